"""Filter bit maps (store/filter_bits.py): seed 003's dispatch-time bits for SQL92 consumers.
Reads with a registered expression skip, by its bit, every entry it cannot select without
reading or scanning it, and return exactly what the scan returns."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.server.native_pull import pull_batch
from txmq.broker.store import Message, MessageStore, StoreConfig
from txmq.broker.store import filter_read
from txmq.broker.store.message_filter import MessageFilter

TOPIC = "bits"


def wait_bits(store: MessageStore, f: MessageFilter, queue_id: int = 0, start: int = 0) -> np.ndarray:
    end = store.max_offset(TOPIC, queue_id)
    deadline = time.monotonic() + 30  # generous: a background thread on a loaded host
    while True:
        bits = store.filter_bits.may_pass(TOPIC, queue_id, start, end - start, f)
        if bits is not None:
            return bits
        assert time.monotonic() < deadline, "the bits were not computed"
        time.sleep(0.01)


def send(store: MessageStore, amounts: list[int | None]) -> None:
    store.append([Message(TOPIC, b"m%d" % i, properties={} if a is None else {"amount": str(a)})
                  for i, a in enumerate(amounts)])


@pytest.fixture
def store(tmp_path):
    s = MessageStore(StoreConfig(tmp_path / "store"))
    yield s
    s.close()


@settings(max_examples=15, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 20)), min_size=1, max_size=60), st.integers(0, 20))
def test_an_entrys_bit_is_set_exactly_when_the_expression_may_select_it(tmp_path_factory, amounts, limit):
    with MessageStore(StoreConfig(tmp_path_factory.mktemp("b") / "store")) as store:
        f = MessageFilter.parse(sql=f"amount > {limit}")
        store.filter_bits.register(TOPIC, f)
        send(store, amounts)
        bits = wait_bits(store, f)
        assert bits.tolist() == [a is not None and a > limit for a in amounts]


def test_a_pull_with_covering_bits_reads_no_properties_and_returns_what_the_scan_returns(store, monkeypatch):
    f = MessageFilter.parse(sql="amount >= 15")
    store.filter_bits.register(TOPIC, f)
    send(store, [i % 20 for i in range(200)])
    wait_bits(store, f)
    scanned = pull_batch(store, TOPIC, 0, 0, 200, message_filter=MessageFilter.parse(sql="amount >= 15 "))

    def no_scan(*args, **kwargs):
        raise AssertionError("the bits cover this read: no scan")

    monkeypatch.setattr(filter_read, "prefilter", no_scan)
    with_bits = pull_batch(store, TOPIC, 0, 0, 200, message_filter=f)
    assert with_bits.batch.column("body").to_pylist() == scanned.batch.column("body").to_pylist()
    assert len(with_bits.batch) == 50


def test_an_object_read_skips_entries_by_their_bit_and_decodes_only_the_others(store, monkeypatch):
    f = MessageFilter.parse(sql="amount = 3")
    store.filter_bits.register(TOPIC, f)
    send(store, list(range(10)) * 10)
    wait_bits(store, f)
    decoded = []
    real = store._read_records
    monkeypatch.setattr(store, "_read_records", lambda t, q, phys, sizes: decoded.append(len(phys)) or real(t, q, phys, sizes))
    read = store.read_queue(TOPIC, 0, 0, 100, tag_filter=f)
    assert [m.body for m in read.messages] == [b"m%d" % i for i in range(100) if i % 10 == 3]
    assert decoded == [10], "only the entries whose bit is set were read"


def test_entries_stored_before_an_expression_was_registered_are_scanned_instead(store):
    send(store, [1, 2, 3])
    f = MessageFilter.parse(sql="amount > 1")
    store.filter_bits.register(TOPIC, f)
    send(store, [4, 5])
    assert wait_bits(store, f, start=3).tolist() == [True, True]
    assert store.filter_bits.may_pass(TOPIC, 0, 0, 5, f) is None
    assert pull_batch(store, TOPIC, 0, 0, 5, message_filter=f).batch.column("body").to_pylist() == \
        [b"m1", b"m2", b"m0", b"m1"]


def test_a_second_expression_claims_no_bits_for_entries_computed_before_it(store):
    first = MessageFilter.parse(sql="amount > 1")
    store.filter_bits.register(TOPIC, first)
    send(store, [1, 2])
    wait_bits(store, first)
    second = MessageFilter.parse(sql="amount < 2")
    store.filter_bits.register(TOPIC, second)
    send(store, [0, 3])
    assert store.filter_bits.may_pass(TOPIC, 0, 0, 4, second) is None
    assert wait_bits(store, second, start=2).tolist() == [True, False]
    assert wait_bits(store, first).tolist() == [False, True, False, True]


def test_registered_expressions_survive_a_restart_and_bits_cover_what_comes_after(tmp_path):
    f = MessageFilter.parse(sql="amount > 1")
    with MessageStore(StoreConfig(tmp_path / "store")) as store:
        store.filter_bits.register(TOPIC, f)
        send(store, [1, 2])
    with MessageStore(StoreConfig(tmp_path / "store")) as store:
        send(store, [3, 0])
        assert wait_bits(store, f, start=2).tolist() == [True, False]
        assert store.filter_bits.may_pass(TOPIC, 0, 0, 4, f) is None, "bits are not kept across a restart"


def test_a_queue_keeps_the_bits_of_its_newest_entries_only(store, monkeypatch):
    from txmq.broker.store import filter_bits

    monkeypatch.setattr(filter_bits, "MAX_HELD", 8)
    monkeypatch.setattr(filter_bits, "CHUNK", 4)
    f = MessageFilter.parse(sql="amount > 1")
    store.filter_bits.register(TOPIC, f)
    send(store, [i % 3 for i in range(30)])
    assert wait_bits(store, f, start=22).tolist() == [(22 + i) % 3 > 1 for i in range(8)]
    assert store.filter_bits.may_pass(TOPIC, 0, 0, 30, f) is None, "the oldest bits were dropped"
    assert len(pull_batch(store, TOPIC, 0, 0, 30, message_filter=f).batch) == 10, "the scan reads the rest"
