"""MessageStore.append_group_copies: new records made from stored ones (a COMMIT's final records)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txmq.broker.errors import StoreError
from txmq.broker.store import Message, MessageStore
from txmq.broker.store.message import (
    PROP_CRC32,
    SYSFLAG_GROUP_BEGIN,
    SYSFLAG_GROUP_BITS,
    SYSFLAG_GROUP_END,
    SYSFLAG_GROUP_MEMBER,
    SYSFLAG_SPLIT_GROUP,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_PREPARED,
)
from txmq.broker.store.record import encode_properties
from txmq.broker.store.record_layout import CRC_PREFIX
from txmq.broker.store.record_copy import RecordCopies, Reroute, dispatch_properties

from ._helpers import crash, msg, queue_contents, small_config

SOURCE = "SOURCE"


@pytest.fixture(autouse=True, params=["record_by_record", "columnar", "columnar_in_parts"])
def copy_path(request, monkeypatch):
    """Every test runs through each way of reading the sources (the per-record oracle; the
    compiled scan), and with the group built and written in parts of about one source each
    (a large COMMIT)."""
    from txmq.broker.store import message_store, record_copy

    for name in ("COLUMNAR_MIN_COPIES", "COLUMNAR_MIN_SLOTS"):
        monkeypatch.setattr(record_copy, name, 10**9 if request.param == "record_by_record" else 0)
    if request.param == "columnar_in_parts":
        monkeypatch.setattr(message_store, "COPY_PART_BYTES", 1)
    return request.param


def sources(store: MessageStore, messages: list[Message]) -> list[tuple[int, int]]:
    """Append `messages` to the SOURCE topic; their (physical offset, size)."""
    for m in messages:
        m.topic = SOURCE
    return [(r.physical_offset, r.size) for r in store.append(messages)]


def copies_of(placed: list[tuple[int, int]], topic: str = "FINAL", queue_id: int = 1,
              tx_type: int = SYSFLAG_TRANSACTION_COMMIT, drop: tuple[str, ...] = (),
              reroute: Reroute | None = None) -> RecordCopies:
    return RecordCopies([p for p, _ in placed], [s for _, s in placed], [topic] * len(placed),
                        [queue_id] * len(placed), tx_type, source_topic=SOURCE, drop_properties=drop,
                        reroute=reroute)


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


def test_a_copy_whose_source_carries_the_reroute_marker_goes_where_the_reroute_says(open_store):
    store = open_store()
    placed = sources(store, [msg(body=b"first", MARK="1", k="v"), msg(body=b"plain", XMARK="1", MARKX="2"),
                             msg(body=b"last", k="v", drop_me="x", MARK="3"), msg(body=b"bare")])
    results = store.append_group_copies(copies_of(placed, drop=("drop_me",), reroute=Reroute("MARK", "PARKED", 2)),
                                        [msg("OP", b"op")])
    assert [(r.topic, r.queue_id) for r in results] == [("PARKED", 2), ("FINAL", 1), ("PARKED", 2), ("FINAL", 1),
                                                         ("OP", 0)]
    assert [(m.body, m.properties) for m in store.read_queue("PARKED", 2, 0, 10).messages] == [
        (b"first", {"MARK": "1", "k": "v"}), (b"last", {"k": "v", "MARK": "3"})]
    assert [m.body for m in store.read_queue("FINAL", 1, 0, 10).messages] == [b"plain", b"bare"]


_NAMES = st.sampled_from(["REAL_TOPIC", "REAL_QID", "__TXMQ_PREPARED_MS", "UNIQ_KEY", "k", "XREAL_QID", "REAL_QIDX"])
_DROPS = st.lists(st.sampled_from(["REAL_TOPIC", "REAL_QID", "__TXMQ_PREPARED_MS", "k"]), min_size=1, max_size=3,
                  unique=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(props=st.lists(st.lists(st.tuples(_NAMES, st.text("abc", max_size=4)), max_size=5), min_size=1, max_size=6),
       drop=_DROPS)
def test_a_copy_has_its_sources_properties_less_the_dropped_ones_wherever_they_are(tmp_path_factory, props, drop):
    """Wherever the dropped properties are in a property string, in any order, and whatever
    names merely contain theirs."""
    store = MessageStore(small_config(tmp_path_factory.mktemp("drop"), commitlog_segment_bytes=4 << 20))
    try:
        dicts = [dict(pairs) for pairs in props]
        placed = sources(store, [Message(SOURCE, b"m%d" % i, 0, d) for i, d in enumerate(dicts)])
        store.append_group_copies(copies_of(placed, drop=tuple(drop)))
        assert [m.properties for m in store.read_queue("FINAL", 1, 0, 100).messages] == [
            {k: v for k, v in d.items() if k not in drop} for d in dicts]
    finally:
        store.close()


def test_copies_and_messages_land_as_one_group(open_store, copy_path):
    store = open_store()
    placed = sources(store, [msg(body=b"a"), msg(body=b"b")])
    results = store.append_group_copies(copies_of(placed), [msg("OP", b"op")])
    flags = [store.read_at(r.physical_offset).sys_flag & SYSFLAG_GROUP_BITS for r in results]
    if copy_path == "columnar_in_parts":  # a split group: BEGIN ... END, other writers allowed between parts
        assert flags == [SYSFLAG_SPLIT_GROUP | SYSFLAG_GROUP_BEGIN, SYSFLAG_SPLIT_GROUP,
                         SYSFLAG_SPLIT_GROUP | SYSFLAG_GROUP_END]
    else:  # one contiguous group
        assert flags == [SYSFLAG_GROUP_MEMBER, SYSFLAG_GROUP_MEMBER, SYSFLAG_GROUP_END]
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


def test_a_group_in_parts_becomes_visible_only_with_its_last_part(open_store, monkeypatch):
    from txmq.broker.store import message_store

    store = open_store()
    placed = sources(store, [msg(body=b"a"), msg(body=b"b"), msg(body=b"c")])
    monkeypatch.setattr(message_store, "COPY_PART_BYTES", 1)  # one part per copy, then one for the op
    seen_while_writing = []
    real_copy_columns = message_store.copy_columns

    def watching(store_, part):
        seen_while_writing.append((store_.max_offset("FINAL", 1), store_.max_offset("OP", 0)))
        return real_copy_columns(store_, part)

    monkeypatch.setattr(message_store, "copy_columns", watching)
    results = store.append_group_copies(copies_of(placed), [msg("OP", b"op")])
    assert seen_while_writing == [(0, 0), (0, 0), (0, 0)]
    assert [m.body for m in store.read_queue("FINAL", 1, 0, 10).messages] == [b"a", b"b", b"c"]
    assert [r.queue_offset for r in results] == [0, 1, 2, 0]


def test_a_group_cut_off_between_its_parts_is_dropped_whole_by_recovery(tmp_path, monkeypatch):
    """What a kill -9 between two parts leaves on disk: the first parts, no GROUP_END."""
    from txmq.broker.store import message_store

    store = MessageStore(small_config(tmp_path / "s", flush_mode="sync"))
    placed = sources(store, [msg(body=bytes([i]) * 300) for i in range(20)])
    end = store.commitlog.write_end
    monkeypatch.setattr(message_store, "COPY_PART_BYTES", 2000)
    monkeypatch.setattr(store.commitlog, "truncate_to", lambda offset: None)  # the process dies instead
    built = []
    real_copy_columns = message_store.copy_columns

    def dying_at_the_third_part(store_, part):
        built.append(len(part))
        if len(built) == 3:
            raise KeyboardInterrupt("killed")
        return real_copy_columns(store_, part)

    monkeypatch.setattr(message_store, "copy_columns", dying_at_the_third_part)
    with pytest.raises(KeyboardInterrupt):
        store.append_group_copies(copies_of(placed), [msg("OP", b"op")])
    assert store.commitlog.write_end > end  # two parts reached the CommitLog
    store.commitlog.flush()
    crash(store)
    store = MessageStore(small_config(tmp_path / "s", flush_mode="sync"))
    try:
        assert store.commitlog.write_end == end
        contents = queue_contents(store)
        assert ("FINAL", 1) not in contents and ("OP", 0) not in contents
        assert len(contents[(SOURCE, 0)]) == 20
    finally:
        store.close()


def test_parts_of_copies_cover_them_in_order_within_the_byte_budget():
    copies = RecordCopies(list(range(0, 1000, 100)), [100] * 10, ["T"] * 10, [0] * 10,
                          SYSFLAG_TRANSACTION_COMMIT, source_topic=SOURCE)
    parts = copies.parts(250)
    assert [list(p.physical_offsets) for p in parts] == [[0, 100], [200, 300], [400, 500], [600, 700], [800, 900]]
    assert [len(p) for p in copies.parts(50)] == [1] * 10  # a part holds at least one copy
    assert [len(p) for p in copies.parts(10**6)] == [10]



@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=60), st.integers(1, 1000))
def test_parts_are_the_fewest_in_order_runs_within_the_budget(sizes, budget):
    """Each part holds as many copies as fit in the budget (one copy at least), in order."""
    n = len(sizes)
    copies = RecordCopies(list(range(n)), sizes, ["T"] * n, [0] * n, SYSFLAG_TRANSACTION_COMMIT, source_topic=SOURCE)
    parts = copies.parts(budget)
    assert [o for p in parts for o in p.physical_offsets] == list(range(n))
    for part, following in zip(parts, parts[1:] + [None]):
        assert len(part) == 1 or sum(part.sizes) <= budget
        if following is not None:  # the next copy would not have fitted
            assert sum(part.sizes) + following.sizes[0] > budget


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


def test_a_property_every_string_starts_with_is_read_like_any_other():
    props = [{"UNIQ_KEY": "u%d" % i, "TAGS": "t", **({"UNIQ_KEYS": "x"} if i % 2 else {})} for i in range(300)]
    encoded = [encode_properties(p) + CRC_PREFIX for p in props]
    assert dispatch_properties(encoded) == ([p["TAGS"] for p in props], [p["UNIQ_KEY"].encode() for p in props],
                                            [None] * len(props))


def test_a_source_the_commitlog_no_longer_holds_is_refused_as_not_found(open_store):
    from txmq.broker.errors import NotFound

    store = open_store()
    placed = sources(store, [msg(body=b"a")])
    end = store.commitlog.write_end
    with pytest.raises(NotFound):
        store.append_group_copies(copies_of([placed[0], (10 << 30, placed[0][1])]), [msg("OP", b"op")])
    assert store.commitlog.write_end == end
