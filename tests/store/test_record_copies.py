"""MessageStore.append_group_copies: new records made from stored ones (a COMMIT's final records)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.errors import StoreError
from txmq.broker.store import Message, MessageStore
from txmq.broker.store.message import (
    PROP_CRC32,
    SYSFLAG_GROUP_END,
    SYSFLAG_GROUP_MEMBER,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_PREPARED,
)
from txmq.broker.store.record import CRC_PREFIX, encode_properties
from txmq.broker.store.record_copy import RecordCopies, dispatch_properties

from ._helpers import crash, msg, queue_contents, small_config

SOURCE = "SOURCE"


@pytest.fixture(autouse=True, params=["record_by_record", "columnar"])
def copy_path(request, monkeypatch):
    """Every test runs through both ways of reading the sources (few copies / many copies)."""
    from txmq.broker.store import record_copy

    monkeypatch.setattr(record_copy, "COLUMNAR_MIN_COPIES", 10**9 if request.param == "record_by_record" else 0)
    monkeypatch.setattr(record_copy, "_ARRAY_SEARCH_MIN", 10**9 if request.param == "record_by_record" else 0)
    return request.param


def sources(store: MessageStore, messages: list[Message]) -> list[tuple[int, int]]:
    """Append `messages` to the SOURCE topic; their (physical offset, size)."""
    for m in messages:
        m.topic = SOURCE
    return [(r.physical_offset, r.size) for r in store.append(messages)]


def copies_of(placed: list[tuple[int, int]], topic: str = "FINAL", queue_id: int = 1,
              tx_type: int = SYSFLAG_TRANSACTION_COMMIT, drop: tuple[str, ...] = ()) -> RecordCopies:
    return RecordCopies([p for p, _ in placed], [s for _, s in placed], [topic] * len(placed),
                        [queue_id] * len(placed), tx_type, source_topic=SOURCE, drop_properties=drop)


def test_a_copy_keeps_body_flag_born_fields_and_properties_and_takes_the_new_route(open_store):
    store = open_store()
    original = Message(SOURCE, b"payload", 2, {"TAGS": "t", "UNIQ_KEY": "u1", "k": "v"}, flag=7,
                       born_timestamp=1234, born_host=("10.1.2.3", 4567), reconsume_times=2)
    placed = sources(store, [original])
    store.append_group_copies(copies_of(placed, queue_id=3))
    copy = store.read_queue("FINAL", 3, 0, 10).messages[0]
    assert (copy.body, copy.flag, copy.born_timestamp, copy.born_host, copy.reconsume_times) == (
        b"payload", 7, 1234, ("10.1.2.3", 4567), 2)
    assert copy.properties == {"TAGS": "t", "UNIQ_KEY": "u1", "k": "v"}
    assert (copy.topic, copy.queue_id, copy.queue_offset) == ("FINAL", 3, 0)


def test_a_copy_points_at_its_source_and_has_the_requested_transaction_type(open_store):
    store = open_store()
    placed = sources(store, [Message(SOURCE, b"x", sys_flag=SYSFLAG_TRANSACTION_PREPARED)])
    store.append_group_copies(copies_of(placed))
    copy = store.read_queue("FINAL", 1, 0, 10).messages[0]
    assert copy.prepared_transaction_offset == placed[0][0]
    assert copy.sys_flag & 0b1100 == SYSFLAG_TRANSACTION_COMMIT


def test_dropped_properties_are_removed_and_only_they(open_store):
    store = open_store()
    placed = sources(store, [msg(body=b"a", first="1", drop_me="x", last="3"), msg(body=b"b", drop_me="y"),
                             msg(body=b"c", keep="k")])
    store.append_group_copies(copies_of(placed, drop=("drop_me",)))
    assert [m.properties for m in store.read_queue("FINAL", 1, 0, 10).messages] == [
        {"first": "1", "last": "3"}, {}, {"keep": "k"}]


def test_copies_and_messages_land_as_one_group(open_store):
    store = open_store()
    placed = sources(store, [msg(body=b"a"), msg(body=b"b")])
    results = store.append_group_copies(copies_of(placed), [msg("OP", b"op")])
    flags = [store.read_at(r.physical_offset).sys_flag for r in results]
    assert [f & (SYSFLAG_GROUP_MEMBER | SYSFLAG_GROUP_END) for f in flags] == [
        SYSFLAG_GROUP_MEMBER, SYSFLAG_GROUP_MEMBER, SYSFLAG_GROUP_END]
    assert [r.topic for r in results] == ["FINAL", "FINAL", "OP"]


def test_a_source_that_is_not_a_record_is_refused_and_nothing_is_written(open_store):
    store = open_store()
    placed = sources(store, [msg(body=b"a"), msg(body=b"b")])
    end = store.commitlog.write_end
    bad = [placed[0], (placed[1][0] + 4, placed[1][1])]
    with pytest.raises(StoreError, match="does not match the CommitLog"):
        store.append_group_copies(copies_of(bad), [msg("OP", b"op")])
    assert store.commitlog.write_end == end
    assert store.max_offset("FINAL", 1) == 0 and store.max_offset("OP", 0) == 0


def test_copies_of_ipv6_born_hosts_are_encoded_like_any_record(open_store):
    store = open_store()
    placed = sources(store, [Message(SOURCE, b"six", born_host=("::1", 9876)),
                             Message(SOURCE, b"four", born_host=("127.0.0.1", 1))])
    store.append_group_copies(copies_of(placed))
    copies = store.read_queue("FINAL", 1, 0, 10).messages
    assert [(m.body, m.born_host) for m in copies] == [(b"six", ("::1", 9876)), (b"four", ("127.0.0.1", 1))]


def test_a_copy_group_larger_than_a_segment_spans_segments_and_survives_a_crash(tmp_path):
    store = MessageStore(small_config(tmp_path / "s", flush_mode="sync"))  # 16 KiB segments
    placed = sources(store, [msg(body=bytes([i]) * 500, TAGS="t%d" % (i % 3), KEYS="k%d" % i) for i in range(60)])
    store.append_group_copies(copies_of(placed), [msg("OP", b"op")])
    assert len({store.commitlog.segment_for(p).start for p, _ in placed}) > 1
    crash(store)
    store = MessageStore(small_config(tmp_path / "s", flush_mode="sync"))
    try:
        contents = queue_contents(store)  # every queue entry agrees with its record (tag hashes included)
        assert contents[("FINAL", 1)] == [bytes([i]) * 500 for i in range(60)]
        assert [m.body for m in store.query_by_key("FINAL", "k42")] == [bytes([42]) * 500]
    finally:
        store.close()


_names = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                 max_size=8).filter(lambda k: k != PROP_CRC32)
_values = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), max_size=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.one_of(st.sampled_from(["TAGS", "UNIQ_KEY", "KEYS", "XTAGS"]), _names),
                                _values, max_size=5), min_size=1, max_size=5))
def test_dispatch_properties_are_read_from_property_strings_as_from_dicts(props):
    encoded = [encode_properties(p) + CRC_PREFIX for p in props]
    tags, uniq_keys, keys = dispatch_properties(encoded)
    assert tags == [p.get("TAGS") for p in props]
    assert uniq_keys == [p["UNIQ_KEY"].encode() if "UNIQ_KEY" in p else None for p in props]
    assert keys == [p.get("KEYS") for p in props]


def test_a_source_the_commitlog_no_longer_holds_is_refused_as_not_found(open_store):
    from txmq.broker.errors import NotFound

    store = open_store()
    placed = sources(store, [msg(body=b"a")])
    end = store.commitlog.write_end
    with pytest.raises(NotFound):
        store.append_group_copies(copies_of([placed[0], (10 << 30, placed[0][1])]), [msg("OP", b"op")])
    assert store.commitlog.write_end == end
