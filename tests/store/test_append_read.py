"""The MessageStore facade: append, read back, offsets, filters, listeners."""

from __future__ import annotations

import pytest

from txmq.broker.errors import DataDeleted, IllegalFilterExpression, IllegalOffset, MessageNotFound
from txmq.broker.store import TagFilter
from txmq.broker.store.message import HALF_TOPIC, SYSFLAG_TRANSACTION_PREPARED, Message
from tests.store._helpers import msg


def test_append_returns_positions_and_offset_ids(open_store) -> None:
    store = open_store()
    results = store.append([msg(body=b"a"), msg(body=b"b"), msg(queue_id=1, body=b"c")])
    assert [r.queue_offset for r in results] == [0, 1, 0]
    assert results[0].physical_offset == 0
    assert results[1].physical_offset == results[0].size
    assert results[0].msg_id == "7F00000100002A9F" + "%016X" % 0
    assert results[2].msg_id.endswith("%016X" % results[2].physical_offset)


def test_read_queue_returns_messages_in_queue_order(open_store) -> None:
    store = open_store()
    store.append([msg(body=b"m%d" % i) for i in range(10)])
    read = store.read_queue("T", 0, 3, 4)
    assert [m.body for m in read.messages] == [b"m3", b"m4", b"m5", b"m6"]
    assert [m.queue_offset for m in read.messages] == [3, 4, 5, 6]
    assert (read.next_offset, read.min_offset, read.max_offset) == (7, 0, 10)


def test_read_at_max_offset_is_empty_and_beyond_is_refused(open_store) -> None:
    store = open_store()
    store.append([msg()])
    assert store.read_queue("T", 0, 1, 10).messages == []
    with pytest.raises(IllegalOffset):
        store.read_queue("T", 0, 2, 10)


def test_unknown_queue_reads_empty(open_store) -> None:
    store = open_store()
    assert store.read_queue("Nope", 0, 0, 10).messages == []
    assert store.max_offset("Nope", 3) == 0 and store.min_offset("Nope", 3) == 0


def test_read_at_returns_the_record(open_store) -> None:
    store = open_store()
    r = store.append([msg(body=b"x"), msg(body=b"yy", KEYS="k1")])[1]
    got = store.read_at(r.physical_offset)
    assert got.body == b"yy" and got.keys == ["k1"] and got.msg_id == r.msg_id and got.size == r.size
    assert store.read_at(r.physical_offset, r.size).body == b"yy"
    with pytest.raises(MessageNotFound):
        store.read_at(r.physical_offset + 1)
    with pytest.raises(MessageNotFound):
        store.read_at(10**9)


def test_max_bytes_stops_early_but_returns_at_least_one(open_store) -> None:
    store = open_store()
    store.append([msg(body=b"x" * 500) for _ in range(5)])
    read = store.read_queue("T", 0, 0, 10, max_bytes=1300)  # records are 612 bytes
    assert len(read.messages) == 2 and read.next_offset == 2
    assert len(store.read_queue("T", 0, 0, 10, max_bytes=1).messages) == 1


def test_tag_filter_returns_only_matching_tags_and_advances_past_skipped(open_store) -> None:
    store = open_store()
    tags = ["A", "B", "C", "A", "B", "C", "A"]
    store.append([msg(body=t.encode(), TAGS=t) for t in tags] + [msg(body=b"none")])
    read = store.read_queue("T", 0, 0, 10, tag_filter=TagFilter.parse("A || C"))
    assert [m.tags for m in read.messages] == ["A", "C", "A", "C", "A"]
    assert read.next_offset == 8
    read = store.read_queue("T", 0, 0, 2, tag_filter="B")
    assert [m.queue_offset for m in read.messages] == [1, 4] and read.next_offset == 5
    assert len(store.read_queue("T", 0, 0, 100, tag_filter="*").messages) == 8


def test_a_tag_expression_naming_no_tag_is_refused() -> None:
    with pytest.raises(IllegalFilterExpression):
        TagFilter.parse("|| ||")


def test_empty_tags_between_separators_are_skipped_as_rocketmq_skips_them() -> None:
    assert TagFilter.parse("A |||| B ||").tags == {"A", "B"}


def test_read_queue_entries_are_raw_positions(open_store) -> None:
    store = open_store()
    results = store.append([msg(body=b"a", TAGS="t"), msg(body=b"b")])
    entries = store.read_queue_entries("T", 0, 0, 10)
    assert [(e.queue_offset, e.physical_offset, e.size) for e in entries] == [
        (0, results[0].physical_offset, results[0].size), (1, results[1].physical_offset, results[1].size)]
    assert entries[0].tag_hash != 0 and entries[1].tag_hash == 0


def test_listeners_get_what_was_dispatched(open_store) -> None:
    store = open_store()
    seen = []
    store.add_dispatch_listener(lambda entries, topics: seen.append(
        ([(e.topic, e.queue_id, e.queue_offset) for e in entries], topics)))
    store.append([msg(), msg(queue_id=2)])
    store.append_group([msg(topic="U"), msg(topic="U"), msg(topic="V")])
    assert seen == [([("T", 0, 0), ("T", 2, 0)], {"T"}), ([("U", 0, 0), ("U", 0, 1), ("V", 0, 0)], {"U", "V"})]


def test_a_failing_listener_does_not_fail_the_append(open_store) -> None:
    store = open_store()
    store.add_dispatch_listener(lambda entries, topics: 1 / 0)
    assert store.append([msg()])[0].queue_offset == 0


def test_prepared_records_are_stored_but_not_queued(open_store) -> None:
    store = open_store()
    prepared = Message("T", b"half", sys_flag=SYSFLAG_TRANSACTION_PREPARED)
    r = store.append([prepared, msg(body=b"normal")])
    assert store.max_offset("T", 0) == 1
    assert store.read_at(r[0].physical_offset).body == b"half"


def test_system_topics_are_writable_with_allow_system(open_store) -> None:
    store = open_store()
    store.append([Message(HALF_TOPIC, b"h")], allow_system=True)
    assert store.read_queue(HALF_TOPIC, 0, 0, 1).messages[0].body == b"h"


def test_max_offsets_snapshot_covers_declared_queues(open_store) -> None:
    store = open_store()
    store.topics.create("S", queue_count=3)
    store.append([msg(topic="S", queue_id=1), msg(topic="S", queue_id=1), msg(topic="Other")])
    assert store.max_offsets_snapshot(["S"]) == {("S", 0): 0, ("S", 1): 2, ("S", 2): 0}
    assert store.max_offsets_snapshot()[("Other", 0)] == 1
    assert store.queue_ids("S") == [1]


def test_data_survives_a_clean_restart(open_store) -> None:
    store = open_store()
    store.append([msg(body=b"%d" % i, queue_id=i % 3) for i in range(30)])
    store.close()
    store = open_store()
    assert not store.recovery.crashed
    assert [store.max_offset("T", q) for q in range(3)] == [10, 10, 10]
    assert [m.body for m in store.read_queue("T", 1, 0, 100).messages] == [b"%d" % i for i in range(1, 30, 3)]
    assert store.append([msg(queue_id=1)])[0].queue_offset == 10


def test_reading_below_min_offset_raises_data_deleted(open_store) -> None:
    store = open_store()
    store.append([msg(body=b"x" * 4000) for _ in range(20)])
    store.append([msg(topic="Live")])
    assert store.delete_expired(now_ms=2**50) > 0
    low = store.min_offset("T", 0)
    assert low > 0
    with pytest.raises(DataDeleted) as info:
        store.read_queue("T", 0, 0, 10)
    assert info.value.min_offset == low


def test_second_open_of_the_same_directory_is_refused(open_store, tmp_path) -> None:
    from txmq.broker.errors import StoreError
    from txmq.broker.store import MessageStore
    from tests.store._helpers import small_config
    open_store()
    with pytest.raises(StoreError):
        MessageStore(small_config(tmp_path / "store"))


def test_prepared_records_of_the_half_topic_are_queued_for_the_engine(open_store) -> None:
    store = open_store()
    store.append([Message(HALF_TOPIC, b"half", sys_flag=SYSFLAG_TRANSACTION_PREPARED)], allow_system=True)
    assert store.read_queue(HALF_TOPIC, 0, 0, 10).messages[0].body == b"half"
