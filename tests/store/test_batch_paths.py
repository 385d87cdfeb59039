"""The batch (columnar) hot paths give exactly what their one-at-a-time counterparts give.

Appends validate, encode and index a batch column by column, reads decode a span of
records at once; each fast path is checked here against the simple path it replaces.
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.errors import StoreError
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store import flush as flush_module
from txmq.broker.store.consume_queue import ENTRY
from txmq.broker.store.flush import GroupCommit
from txmq.broker.store.index_file import IndexFile
from txmq.broker.store.message import PROP_CRC32, AppendResult, Message
from txmq.broker.store.record import (
    RecordCorrupted,
    decode_record,
    decode_records,
    encode_messages_standalone,
    message_id,
    message_ids,
)
from txmq.broker.store.validation import _check_sequentially, check_columns
from tests.store._helpers import crash, msg

LIMITS = dict(max_body_bytes=64, max_properties_bytes=80)

prop_values = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                      max_size=20)
valid_messages = st.builds(
    Message,
    topic=st.sampled_from(["T", "Other"]),
    body=st.binary(min_size=1, max_size=64),
    queue_id=st.integers(0, 5),
    properties=st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "%s"]), prop_values, max_size=3),
)
# one defect (or none) applied to one message of a valid batch
defects = st.sampled_from([
    None, ("topic", "bad topic"), ("topic", ""), ("topic", "RMQ_SYS_TRANS_HALF_TOPIC"), ("body", b""),
    ("body", b"x" * 65), ("body", bytearray(b"ba")), ("body", "text"), ("queue_id", -1), ("queue_id", 2**31),
    ("prop", (PROP_CRC32, "1")), ("prop", ("x__CRC32#", "1")), ("prop", ("", "v")), ("prop", ("b\x01", "v")),
    ("prop", ("k", "v\x02")), ("prop", ("big", "x" * 90)), ("properties", {}), ("properties", {"TAGS": "t"}),
])


@st.composite
def batches_with_a_defect(draw) -> list[Message]:
    batch = draw(st.lists(valid_messages, min_size=1, max_size=5))
    defect = draw(defects)
    if defect is not None:
        m = batch[draw(st.integers(0, len(batch) - 1))]
        field, value = defect
        if field == "prop":
            m.properties[value[0]] = value[1]
        else:
            setattr(m, field, value)
    return batch


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the error itself is the outcome compared
        return (type(exc), str(exc))


@settings(max_examples=150, deadline=None)
@given(batches_with_a_defect(), st.booleans())
def test_batch_validation_refuses_and_encodes_like_the_message_by_message_check(batch, allow_system) -> None:
    fast = _outcome(lambda: check_columns(BatchColumns(batch), allow_system=allow_system, **LIMITS).props_raw)
    slow = _outcome(lambda: _check_sequentially(batch, allow_system=allow_system, **LIMITS))
    assert fast == slow


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**40), st.integers(0, 2**42)),
                min_size=1, max_size=60),
       st.integers(1, 7), st.booleans())
def test_index_items_written_as_arrays_match_item_by_item_puts(tmp_path_factory, items, slots, garbage) -> None:
    d = tmp_path_factory.mktemp("idx")
    one, many = IndexFile(d / "one", slots, 50), IndexFile(d / "many", slots, 50)
    if garbage:  # a torn slot from before a crash must end the chain in both paths
        for f in (one, many):
            f.mm[40:44] = b"\x7f\x00\x00\x00"
    for h, phys, ts in items[:50]:
        one.put(h, phys, ts)
    assert many.put_many(items) == min(len(items), 50)
    assert bytes(one.mm) == bytes(many.mm)
    assert (one.count, one.begin_ts, one.end_ts, one.end_phys) == (many.count, many.begin_ts, many.end_ts,
                                                                    many.end_phys)
    one.close()
    many.close()


span_messages = st.builds(
    Message,
    topic=st.sampled_from(["T", "Topic-2", "x" * 127]),
    body=st.binary(min_size=1, max_size=50),
    queue_id=st.integers(0, 9),
    properties=st.dictionaries(st.sampled_from(["TAGS", "KEYS", "p"]), st.text(
        alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=8),
        max_size=3),
    born_host=st.sampled_from([("10.0.0.1", 7), ("127.0.0.1", 0), ("::1", 9)]),
    born_timestamp=st.integers(1, 2**50),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(span_messages, min_size=1, max_size=12), st.integers(0, 2**40))
def test_a_span_decodes_like_record_by_record(batch, first) -> None:
    raw = encode_messages_standalone(batch, first, store_timestamp=77)
    offsets, off = [], 0
    for _ in batch:
        offsets.append(off)
        off += decode_record(raw, off).size
    assert decode_records(raw, offsets) == [decode_record(raw, o) for o in offsets]


def test_a_damaged_record_in_a_span_is_reported() -> None:
    batch = [Message("T", b"body%d" % i, 0, {"TAGS": "a"}) for i in range(6)]
    raw = bytearray(encode_messages_standalone(batch))
    size = decode_record(bytes(raw), 0).size
    raw[3 * size + 5] ^= 0xFF  # the magic code of the fourth record
    with pytest.raises(RecordCorrupted):
        decode_records(bytes(raw), [i * size for i in range(6)])


def test_batch_message_ids_are_the_offset_message_ids() -> None:
    host = bytes.fromhex("7F00000100002A9F")
    offsets = [0, 1, 2**40 + 17, 12345678901234] * 5
    assert message_ids(host, offsets) == [message_id(host, p) for p in offsets]


def test_append_results_are_immutable_named_records(open_store) -> None:
    (r,) = open_store().append([msg(body=b"x", queue_id=2)])
    assert isinstance(r, AppendResult) and (r.topic, r.queue_id, r.queue_offset) == ("T", 2, 0)
    with pytest.raises(AttributeError):
        r.queue_offset = 5  # type: ignore[misc]


def test_a_batch_over_several_queues_gets_consecutive_offsets_per_queue(open_store) -> None:
    store = open_store()
    store.append([msg(queue_id=1)])
    results = store.append([msg(body=b"%d" % i, queue_id=i % 3) for i in range(9)])
    assert [r.queue_offset for r in results] == [0, 1, 0, 1, 2, 1, 2, 3, 2]
    assert [m.body for m in store.read_queue("T", 1, 0, 10).messages] == [b"hello", b"1", b"4", b"7"]


def test_a_queue_entry_not_pointing_at_a_record_is_reported(open_store) -> None:
    store = open_store()
    store.append([msg(body=b"%d" % i) for i in range(8)])
    cq = store.dispatcher.queue("T", 0)
    phys, size, tag_hash = ENTRY.unpack(cq.read_raw(3, 1))
    cq.write(3, ENTRY.pack(phys + 1, size, tag_hash))  # one byte into the record
    with pytest.raises(StoreError):
        store.read_queue("T", 0, 0, 8)


def test_group_commit_leader_waits_for_appenders_mid_write(monkeypatch) -> None:
    monkeypatch.setattr(flush_module, "GATHER_MAX_S", 30.0)
    written = [0]
    flushed: list[int] = []

    def flush() -> int:
        flushed.append(written[0])
        return written[0]

    gc = GroupCommit(flush)
    gc.writer_started()  # appender A is writing
    gc.writer_started()  # appender B is writing
    written[0] = 10
    gc.writer_done()  # B done: it leads, and must not fsync before A has written
    leader = threading.Thread(target=gc.wait_durable, args=(10,))
    leader.start()
    time.sleep(0.05)
    written[0] = 20
    gc.writer_done()
    leader.join(5)
    gc.wait_durable(20)  # A: already durable
    assert flushed == [20] and gc.fsyncs == 1


def test_group_commit_lone_appender_does_not_wait(monkeypatch) -> None:
    monkeypatch.setattr(flush_module, "GATHER_MAX_S", 30.0)
    gc = GroupCommit(lambda: 1)
    gc.writer_started()
    gc.writer_done()
    started = time.perf_counter()
    gc.wait_durable(1)
    assert time.perf_counter() - started < 10 and gc.fsyncs == 1


def test_queue_entries_are_readable_before_and_after_they_reach_the_file(open_store) -> None:
    store = open_store()
    store.append([msg(body=b"%d" % i) for i in range(5)])
    before = [m.body for m in store.read_queue("T", 0, 0, 10).messages]
    store.dispatcher.flush()
    assert before == [m.body for m in store.read_queue("T", 0, 0, 10).messages] == [b"%d" % i for i in range(5)]


def test_queue_entries_lost_with_a_killed_process_are_rebuilt_from_the_log(open_store, tmp_path) -> None:
    store = open_store(checkpoint_interval_ms=10**8, flush_interval_ms=10**8)
    store.append([msg(body=b"%d" % i, queue_id=1) for i in range(3)])
    for cq in store.dispatcher.queues():  # what a SIGKILL loses: the entries not yet in their files
        cq._tail = (cq._tail[0], bytearray())
    crash(store)
    store = open_store()
    assert store.min_offset("T", 1) == 0
    assert [m.body for m in store.read_queue("T", 1, 0, 10).messages] == [b"0", b"1", b"2"]


def test_append_results_read_like_a_list_of_complete_results(open_store) -> None:
    store = open_store()
    results = store.append([msg(body=b"%d" % i, queue_id=i % 2) for i in range(12)])
    as_list = list(results)
    assert len(results) == 12 and results == as_list and results[-1] == as_list[-1] and results[2:5] == as_list[2:5]
    assert all(isinstance(r, AppendResult) for r in results)
    assert [r.msg_id for r in results] == [message_id(store.commitlog.store_host[0], r.physical_offset)
                                           for r in results]


def test_a_batch_over_several_topics_gets_consecutive_offsets_per_queue(open_store) -> None:
    store = open_store()
    store.append([msg(topic="A", queue_id=1)])
    batch = [msg(topic="AB"[i % 2], body=b"%d" % i, queue_id=i % 3) for i in range(12)]
    results = store.append(batch)
    assert [(r.topic, r.queue_id, r.queue_offset) for r in results] == [
        ("A", 0, 0), ("B", 1, 0), ("A", 2, 0), ("B", 0, 0), ("A", 1, 1), ("B", 2, 0),
        ("A", 0, 1), ("B", 1, 1), ("A", 2, 1), ("B", 0, 1), ("A", 1, 2), ("B", 2, 1)]
    assert [m.body for m in store.read_queue("A", 1, 0, 10).messages] == [b"hello", b"4", b"10"]
    assert [m.body for m in store.read_queue("B", 2, 0, 10).messages] == [b"5", b"11"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([("T", 0), ("T", 1), ("U", 0), ("V", 7)]), st.booleans(),
                          st.integers(0, 2**62), st.integers(1, 2**31 - 1), st.integers(-2**63, 2**63 - 1)),
                min_size=1, max_size=300))
def test_queue_entries_packed_one_by_one_equal_the_array_packing(rows) -> None:
    from txmq.broker.store import dispatch

    keys = [r[0] for r in rows]
    queued = [r[1] for r in rows]
    starts = {key: 10 * i for i, key in enumerate(dict.fromkeys(k for k, q in zip(keys, queued) if q))}
    if not starts:
        return
    columns = ([r[2] for r in rows] + [0], [r[3] for r in rows], [r[4] for r in rows])
    large = dispatch.queue_runs
    old = dispatch._PACK_EACH_MAX
    try:
        dispatch._PACK_EACH_MAX = 0
        by_array = large(keys, queued, starts, *columns)
        dispatch._PACK_EACH_MAX = 10**6
        by_struct = large(keys, queued, starts, *columns)
    finally:
        dispatch._PACK_EACH_MAX = old
    assert by_struct == by_array
