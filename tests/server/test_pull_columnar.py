"""The columnar pull path builds exactly the batch the object path builds.

`native_pull.pull_batch` (CommitLog bytes → numpy/Arrow columns) must equal
`build_pull_batch(store.read_queue(...).messages)` — same schema, values, nulls,
order, and the same next/min/max offsets — for any mix of messages a store can hold.
Every test runs twice: with the compiled decode (store/pull_decode_kernel.py) taking
every pull it can, and with the numpy decode taking all of them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txmq.broker.errors import DataDeleted, IllegalOffset, StoreError
from txmq.broker.server.native_pull import build_pull_batch, pull_batch
from txmq.broker.store import Message, MessageStore, StoreConfig, columnar_read
from txmq.broker.store.columnar_read import read_queue_bytes
from txmq.broker.store.record_columns import byte_rows, decode_columns, gather_binary
from txmq.broker.store.message import (
    PROP_CRC32,
    PROP_KEYS,
    PROP_TAGS,
    PROP_TRAN_MSG,
    PROP_TRANSACTION_ID,
    PROP_UNIQ_KEY,
    SYSFLAG_TRANSACTION_COMMIT,
)

TOPICS = ["orders", "pay_ments-1", "t%|x"]
QUEUES = 3

pytestmark = pytest.mark.usefixtures("decode_path")

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"), max_size=12)
# any name a producer may use: not empty, not the store's reserved record-CRC name
name = st.one_of(text.filter(lambda k: k and k != PROP_CRC32),
                 st.sampled_from(["__hidden", "REAL_TOPIC", "PGROUP", "color", "ключ"]))
keys = st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02 "),
                        max_size=6), max_size=4).map(" ".join)


def read_queue_columns(store, topic: str, queue_id: int, offset: int, max_count: int):
    read = read_queue_bytes(store, topic, queue_id, offset, max_count)
    return decode_columns(read.data, read.record_at, read.phys, read.sizes, topic, queue_id)


@st.composite
def messages(draw) -> Message:
    props: dict[str, str] = draw(st.dictionaries(name, text, max_size=5))
    for prop, strategy in ((PROP_TAGS, text), (PROP_KEYS, keys), (PROP_UNIQ_KEY, text.map(str.upper))):
        if draw(st.booleans()):
            props[prop] = draw(strategy)
    sys_flag = 0
    if draw(st.booleans()):  # a committed transactional message, as the engine writes it
        props[PROP_TRANSACTION_ID] = draw(text.filter(bool))
        props[PROP_TRAN_MSG] = "true"
        sys_flag = SYSFLAG_TRANSACTION_COMMIT
    born = draw(st.sampled_from([("10.1.2.3", 5555), ("::1", 40000), ("2001:db8::7", 1)]))
    return Message(topic=draw(st.sampled_from(TOPICS)), body=draw(st.binary(min_size=1, max_size=300)),
                   queue_id=draw(st.integers(0, QUEUES - 1)), properties=props, sys_flag=sys_flag,
                   born_timestamp=draw(st.integers(0, 1 << 42)), born_host=born)


@pytest.fixture(autouse=True)
def entries_read_a_few_at_a_time(monkeypatch):
    """Queue entries are read a few first, then four times as many until the byte limit is
    passed (columnar_read._FIRST_ENTRIES): pulls here take several such rounds."""
    monkeypatch.setattr(columnar_read, "_FIRST_ENTRIES", 2)


@pytest.fixture(autouse=True)
def every_pull_columnar(monkeypatch):
    """Pulls of one or two messages take the object path (native_pull.OBJECT_PATH_MAX_COUNT); here
    every pull takes the columnar one, which these tests hold to the object path's batch."""
    from txmq.broker.server import native_pull

    monkeypatch.setattr(native_pull, "OBJECT_PATH_MAX_COUNT", 0)


def open_store(root: Path, store_host=("127.0.0.1", 10911)) -> MessageStore:
    # small segments and queue files: reads cross segment and queue-file boundaries
    return MessageStore(StoreConfig(root, commitlog_segment_bytes=8192, consume_queue_entries_per_file=7,
                                    store_host=store_host))


def assert_same_pull(store: MessageStore, topic: str, queue_id: int, start: int, count: int,
                     max_bytes: int | None) -> None:
    old = store.read_queue(topic, queue_id, start, count, max_bytes=max_bytes)
    expected = build_pull_batch(old.messages)
    got = pull_batch(store, topic, queue_id, start, count, max_bytes=max_bytes)
    assert got.batch.schema.equals(expected.schema)
    assert got.batch.to_pylist() == expected.to_pylist()
    assert got.batch.equals(expected)
    assert (got.next_offset, got.min_offset, got.max_offset) == (old.next_offset, old.min_offset, old.max_offset)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(messages(), min_size=1, max_size=12), min_size=1, max_size=5),
       store_host=st.sampled_from([("127.0.0.1", 10911), ("::1", 10911)]),
       start=st.integers(0, 20), count=st.integers(1, 40),
       max_bytes=st.one_of(st.none(), st.integers(1, 3000)))
def test_columnar_pull_equals_object_pull(batches, store_host, start, count, max_bytes):
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "store", store_host)
        try:
            for batch in batches:
                store.append(batch)
            for topic in TOPICS:
                for queue_id in range(QUEUES):
                    hi = store.max_offset(topic, queue_id)
                    assert_same_pull(store, topic, queue_id, min(start, hi), count, max_bytes)
        finally:
            store.close()


def test_whole_queue_pull_equals_object_pull_across_segments(tmp_path):
    store = open_store(tmp_path / "store")
    try:
        for i in range(40):
            store.append([Message("orders", bytes([i]) * (50 + 37 * i), queue_id=i % 2,
                                  properties={PROP_TAGS: f"tag{i % 3}", "n": str(i)})])
        assert len(store.commitlog.segments) > 2
        assert_same_pull(store, "orders", 0, 0, 100, None)
        assert_same_pull(store, "orders", 1, 3, 100, 1 << 20)
    finally:
        store.close()


@pytest.mark.parametrize("hosts", [
    [("127.0.0.1", 10911), ("127.0.0.1", 10912)],  # the broker restarted on another port
    [("10.0.0.7", 10911), ("::1", 10911), ("10.0.0.7", 10911)],  # and once on an IPv6 address
])
def test_offset_ids_of_a_queue_written_by_several_store_hosts_equal_the_object_pull(tmp_path, hosts):
    for i, host in enumerate(hosts):
        store = open_store(tmp_path / "store", host)
        try:
            store.append([Message("orders", b"m%d-%d" % (i, j), queue_id=0) for j in range(3)])
        finally:
            store.close()
    store = open_store(tmp_path / "store", hosts[0])
    try:
        assert_same_pull(store, "orders", 0, 0, 100, None)
        assert_same_pull(store, "orders", 0, 3, 4, None)  # a pull within the second host's records
    finally:
        store.close()


PROPERTY_EDGE_CASES = [
    {},  # no property at all: an empty property text
    {"a": ""},  # an empty value at the end of the text
    {"x": "v", "e": ""},  # an empty value after a non-empty one
    {PROP_KEYS: "", PROP_TAGS: "", "k": "v"},  # empty KEYS and TAGS
    {PROP_KEYS: "  k1   k2 ", PROP_UNIQ_KEY: "ABC", "ключ": "значение ✓"},  # odd spacing, multibyte
    {"__hidden": "1", "REAL_TOPIC": "t", "1": "2"},  # system and hidden names dropped, digits kept
    {"long": "x" * 300, "s": "y"},  # a value past the inline-view size next to a short one
    {PROP_KEYS: " ".join("k%d" % i for i in range(12)), **{"p%d" % i: str(i) for i in range(12)}},  # many of both
    {"nu\x00l": "a\x00b\x00", "z": "\x00", "\x00": "x" * 9 + "\x00"},  # \x00 is text, not a separator
    {"abcdefg": "12345678", "abcdefgh": "1234567", "w": "é" * 8},  # separators at every place in a word
]


@pytest.mark.parametrize("split_at", [0, 3, len(PROPERTY_EDGE_CASES)])
def test_property_edge_cases_split_like_the_per_record_decode(tmp_path, split_at):
    store = open_store(tmp_path / "store")
    try:
        cases = PROPERTY_EDGE_CASES[split_at:] + PROPERTY_EDGE_CASES[:split_at]
        store.append([Message("orders", b"b%d" % i, queue_id=0, properties=dict(props))
                      for i, props in enumerate(cases)])
        assert_same_pull(store, "orders", 0, 0, 100, None)
        assert_same_pull(store, "orders", 0, 1, 2, None)
    finally:
        store.close()


def test_pull_beyond_the_queue_end_is_an_illegal_offset(tmp_path):
    store = open_store(tmp_path / "store")
    try:
        store.append([Message("orders", b"x")])
        with pytest.raises(IllegalOffset):
            read_queue_columns(store, "orders", 0, 2, 10)
        with pytest.raises(IllegalOffset):
            read_queue_columns(store, "orders", 0, -1, 10)
        assert read_queue_columns(store, "orders", 0, 1, 10).count == 0
    finally:
        store.close()


def test_pull_below_the_queue_minimum_is_data_deleted(tmp_path):
    store = open_store(tmp_path / "store")
    try:
        store.append([Message("orders", b"x" * 1000) for _ in range(40)])
        store.delete_expired(now_ms=1 << 62)  # everything is expired; the active segment stays
        lo = store.min_offset("orders", 0)
        assert lo > 0
        with pytest.raises(DataDeleted) as caught:
            read_queue_columns(store, "orders", 0, 0, 10)
        assert caught.value.min_offset == lo
    finally:
        store.close()


def test_a_damaged_record_is_a_store_error(tmp_path):
    store = open_store(tmp_path / "store")
    try:
        store.append([Message("orders", b"hello", properties={"a": "b"})])
        seg = store.commitlog.segments[0]
        seg.write_at(4, b"\0\0\0\0")  # the magic code of the first record
        with pytest.raises(StoreError, match="does not match the CommitLog"):
            read_queue_columns(store, "orders", 0, 0, 10)
    finally:
        store.close()


def test_tag_filtered_pull_keeps_only_matching_tags(tmp_path):
    from txmq.broker.store.message_filter import MessageFilter

    store = open_store(tmp_path / "store")
    try:
        store.append([Message("orders", b"x", properties={PROP_TAGS: t}) for t in "ABAB"])
        got = pull_batch(store, "orders", 0, 0, 10, message_filter=MessageFilter.parse(tags="B"))
        assert got.batch.column("tag").to_pylist() == ["B", "B"]
        assert got.batch.column("queueOffset").to_pylist() == [1, 3]
    finally:
        store.close()


def test_pull_without_memory_maps_reads_spans_and_equals_object_pull(tmp_path, monkeypatch):
    from txmq.broker.store import columnar_read

    monkeypatch.setattr(columnar_read, "_mapped_segment", lambda *args: None)  # e.g. a closed segment fd
    store = open_store(tmp_path / "store")
    try:
        for i in range(30):
            store.append([Message("orders", bytes([i]) * (40 + 53 * i), queue_id=i % 3,
                                  properties={PROP_KEYS: f"k{i} j{i}", "n": str(i)})])
        for queue_id in range(3):
            assert_same_pull(store, "orders", queue_id, 0, 100, None)
            assert_same_pull(store, "orders", queue_id, 1, 100, 700)
    finally:
        store.close()


def test_byte_rows_copy_fixed_width_slices_and_read_zeros_past_the_end():
    data = np.arange(1, 11, dtype=np.uint8)
    rows = byte_rows(data, np.array([0, 3, 8, 9], dtype=np.int64), 4)
    assert rows.tolist() == [[1, 2, 3, 4], [4, 5, 6, 7], [9, 10, 0, 0], [10, 0, 0, 0]]
    assert byte_rows(data[:2], np.array([0], dtype=np.int64), 4).tolist() == [[1, 2, 0, 0]]


@pytest.mark.parametrize("starts, lengths", [
    ([0, 5, 9], [5, 4, 1]),  # in order, touching: the piece-take path
    ([2, 20, 40], [3, 0, 13]),  # in order with gaps, an empty and a long (non-inline) value
    ([20, 2, 7], [13, 3, 0]),  # out of order: the binary-view path
    ([0, 2, 4], [6, 6, 6]),  # overlapping: the binary-view path
])
def test_gather_binary_returns_each_range_of_the_bytes(starts, lengths):
    data = np.frombuffer(bytes(range(48, 48 + 60)), dtype=np.uint8)
    got = gather_binary(data, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64))
    got.validate(full=True)
    assert got.to_pylist() == [data[s:s + n].tobytes() for s, n in zip(starts, lengths)]


def test_a_batch_with_only_system_properties_has_empty_property_maps(tmp_path):
    store = open_store(tmp_path / "store")
    try:
        store.append([Message("orders", b"b%d" % i, queue_id=0, sys_flag=SYSFLAG_TRANSACTION_COMMIT,
                              properties={PROP_UNIQ_KEY: f"ID{i}", PROP_TRANSACTION_ID: "tx", PROP_TRAN_MSG: "true",
                                          "PGROUP": "g", "__hidden": "h"})
                      for i in range(5)])
        assert_same_pull(store, "orders", 0, 0, 100, None)
        batch = pull_batch(store, "orders", 0, 0, 100).batch
        assert batch.column("properties").to_pylist() == [[]] * 5
    finally:
        store.close()


@pytest.mark.parametrize("born_host", [("10.1.2.3", 5555), ("2001:db8::7", 1)])
def test_records_of_one_host_family_decode_like_the_per_record_decode(tmp_path, born_host):
    store = open_store(tmp_path / "store", ("::1", 10911))
    try:
        store.append([Message("orders", b"b%d" % i, queue_id=0, born_host=born_host, born_timestamp=1000 + i,
                              properties={PROP_TAGS: "t"}) for i in range(6)])
        assert_same_pull(store, "orders", 0, 0, 100, None)
    finally:
        store.close()
