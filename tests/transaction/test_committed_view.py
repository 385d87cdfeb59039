"""What every reader shows of a committed message (issue #42).

A COMMIT by reference (docs/TRANSACTIONS.md) changes where a committed message's bytes
are, not what any reader shows of it. These tests pin that view, reader by reader, on
today's COMMIT (a copy of each half): the queue read, the record at its offset, the
lookups by message id, UNIQ_KEY and key, the pull's Arrow batch, tag and SQL92 filtered
reads, the queue offset for a time, and all of it again after a crash and recovery.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from txmq.broker.store import MessageStore, StoreConfig
from txmq.broker.store.columnar_read import read_queue_bytes
from txmq.broker.store.filter_read import filtered_pull_batch
from txmq.broker.store.message import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK
from txmq.broker.store.message_filter import MessageFilter
from txmq.broker.store.pull_decode import decode_pull_batch
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine
from txmq.broker.transaction.half import PROP_PREPARED_MS

from tests.store._helpers import crash

from .conftest import FakeClock, msg

TOPIC = "orders"


def committed_store(path: Path) -> tuple[MessageStore, list[int]]:
    """A store where transaction "t" committed four halves into orders:0 (two tagged "a" with
    colour=red, two tagged "b" with colour=blue), after an untransacted message; returns
    the store and the halves' physical offsets."""
    store = MessageStore(StoreConfig(data_dir=path, flush_mode="async"))
    store.topics.create(TOPIC, queue_count=1)
    store.append([msg(TOPIC, b"plain", 0, TAGS="a")])
    engine = TransactionEngine(store, TransactionConfig(), clock=FakeClock())
    halves = engine.prepare([msg(TOPIC, b"m%d" % i, 0, TAGS="ab"[i % 2], KEYS=f"k{i}", UNIQ_KEY=f"U{i}",
                                 colour=("red", "blue")[i % 2]) for i in range(4)],
                            transaction_id="t", producer_group="g")
    engine.end("t", Resolution.COMMIT)
    engine.close()
    return store, [r.physical_offset for r in halves.results]


def delivered(store: MessageStore):
    return store.read_queue(TOPIC, 0, 1, 100).messages


@pytest.fixture
def store(tmp_path: Path):
    s, _ = committed_store(tmp_path / "data")
    yield s
    s.close()


def test_a_committed_message_is_read_from_its_queue_as_a_committed_record_of_its_topic(tmp_path: Path) -> None:
    store, half_offsets = committed_store(tmp_path / "data")
    got = delivered(store)
    assert [m.body for m in got] == [b"m0", b"m1", b"m2", b"m3"]
    for i, m in enumerate(got):
        assert (m.topic, m.queue_id, m.queue_offset) == (TOPIC, 0, 1 + i)
        assert m.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT
        assert m.prepared_transaction_offset == half_offsets[i]
        assert (m.tags, m.keys, m.unique_key, m.transaction_id) == ("ab"[i % 2], [f"k{i}"], f"U{i}", "t")
        assert m.properties["colour"] == ("red", "blue")[i % 2]
        assert PROP_PREPARED_MS not in m.properties
    store.close()


def test_the_record_at_a_committed_message_offset_is_that_message(store: MessageStore) -> None:
    for m in delivered(store):
        assert store.read_at(m.physical_offset, m.size) == m


def test_a_committed_message_is_found_by_its_offset_id_and_by_its_unique_key(store: MessageStore) -> None:
    for m in delivered(store):
        assert store.get_by_message_id(m.msg_id) == m
        found = store.get_by_message_id(m.unique_key)
        assert (found.topic, found.body, found.unique_key) == (TOPIC, m.body, m.unique_key)


def test_a_committed_message_is_found_by_its_key_in_its_topic(store: MessageStore) -> None:
    for m in delivered(store):
        assert store.query_by_key(TOPIC, m.keys[0]) == [m]


def test_the_pull_batch_shows_a_committed_message_as_the_queue_read_does(store: MessageStore) -> None:
    read = read_queue_bytes(store, TOPIC, 0, 1, 100)
    rows = decode_pull_batch(read.data, read.record_at, read.phys, read.sizes, TOPIC, 0).to_pylist()
    for row, m in zip(rows, delivered(store), strict=True):
        assert (row["topic"], row["queueId"], row["queueOffset"]) == (m.topic, m.queue_id, m.queue_offset)
        assert (row["messageId"], row["tag"], row["keys"], row["body"]) == (m.unique_key, m.tags, m.keys, m.body)
        assert row["transactionId"] == "t"
        assert dict(row["properties"]) == {"colour": m.properties["colour"]}


def test_tag_and_sql92_filters_select_committed_messages_by_their_own_properties(store: MessageStore) -> None:
    by_tag = store.read_queue(TOPIC, 0, 0, 100, tag_filter="b").messages
    assert [m.body for m in by_tag] == [b"m1", b"m3"]
    by_sql = store.read_queue(TOPIC, 0, 0, 100, tag_filter=MessageFilter.parse(sql="colour = 'red'")).messages
    assert [m.body for m in by_sql] == [b"m0", b"m2"]
    read = read_queue_bytes(store, TOPIC, 0, 0, 100)
    batch = filtered_pull_batch(read, TOPIC, 0, MessageFilter.parse(tags="a", sql="colour = 'red'"))
    assert batch.column("body").to_pylist() == [b"m0", b"m2"]


def test_the_offset_for_a_time_counts_a_committed_message_at_its_commit_time(store: MessageStore) -> None:
    first = delivered(store)[0]
    assert store.offset_for_timestamp(TOPIC, 0, first.store_timestamp) <= first.queue_offset
    assert store.offset_for_timestamp(TOPIC, 0, first.store_timestamp + 10**9) == 5


def test_recovery_after_a_crash_shows_the_same_committed_messages(tmp_path: Path) -> None:
    store, _ = committed_store(tmp_path / "data")
    before = delivered(store)
    crash(store)
    again = MessageStore(StoreConfig(data_dir=tmp_path / "data", flush_mode="async"))
    try:
        assert again.recovery.crashed
        assert delivered(again) == before
        assert [again.get_by_message_id(m.msg_id) for m in before] == before
    finally:
        again.close()


def test_retention_of_the_segments_before_a_commit_leaves_every_committed_message_readable(tmp_path: Path) -> None:
    """Halves prepared long before their COMMIT: retention of every segment older than the COMMIT's
    must not leave a queue entry whose message cannot be read (a half's segment lives as long as a
    queue entry needs it)."""
    from tests.store._helpers import small_config

    store = MessageStore(small_config(tmp_path / "data"))
    try:
        store.topics.create(TOPIC, queue_count=1)
        engine = TransactionEngine(store, TransactionConfig(), clock=FakeClock())
        engine.prepare([msg(TOPIC, b"h%03d" % i * 100, 0) for i in range(8)], transaction_id="t")
        store.append([msg("other", b"f" * 1000, 0) for _ in range(40)])  # a few segments of other traffic
        engine.end("t", Resolution.COMMIT)
        engine.close()
        commit_at = delivered(store)[0].physical_offset
        old = time.time() - 200 * 3600
        older = [seg for seg in store.commitlog.segments if seg.start + seg.capacity <= commit_at]
        assert len(older) >= 2, "the halves must lie segments before the COMMIT for this test to mean anything"
        for seg in older:
            os.utime(seg.path, (old, old))
        store.delete_expired()
        low, high = store.min_offset(TOPIC, 0), store.max_offset(TOPIC, 0)
        assert high == 8
        assert [m.body for m in store.read_queue(TOPIC, 0, low, 100).messages] == \
            [b"h%03d" % i * 100 for i in range(low, 8)]
        assert low == 0
    finally:
        store.close()
