"""Record blocks: large copies encoded column-wise write exactly what the record-by-record encoder writes."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txmq.broker.store import Message, MessageStore, message_store, record_copy
from txmq.broker.store.commitlog import CommitLog
from txmq.broker.store.message import PROP_CRC32, SYSFLAG_TRANSACTION_COMMIT
from txmq.broker.store.record_copy import RecordCopies

from ._helpers import small_config

SOURCE = "SOURCE"
NOW_S = 1_700_000_000.123
DROPPED = "__TXMQ_PREPARED_MS"

_text = st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",))
_names = st.one_of(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "XTAGS", DROPPED, "a"]),
                   st.text(_text, min_size=1, max_size=20)).filter(lambda k: k != PROP_CRC32)
_messages = st.lists(st.builds(
    Message, topic=st.just(SOURCE),
    body=st.binary(min_size=1, max_size=300),  # bodies of up to 12 bytes are inline binary views
    queue_id=st.integers(0, 3),
    properties=st.dictionaries(_names, st.text(_text, max_size=30), max_size=6),
    flag=st.integers(-2**31, 2**31 - 1),
    born_timestamp=st.sampled_from([0, 1, 1_650_000_000_000]),  # 0: the store fills in its time
    born_host=st.tuples(st.sampled_from(["127.0.0.1", "10.1.2.3"]), st.integers(0, 65535)),
    reconsume_times=st.integers(0, 16)), min_size=1, max_size=40)
_topics = st.sampled_from(["F", "FINAL", "a-much-longer-topic-name_of_a_sink"])


def _two_stores(tmp_path, monkeypatch, segment_bytes: int = 4 << 20) -> tuple[MessageStore, MessageStore]:
    """Two stores that write the same bytes (a fixed clock), segments far larger than a test's data."""
    monkeypatch.setattr(message_store, "time", SimpleNamespace(time=lambda: NOW_S, monotonic=time.monotonic))
    monkeypatch.setattr(record_copy, "COLUMNAR_MIN_COPIES", 0)
    monkeypatch.setattr(record_copy, "COLUMNAR_MIN_SLOTS", 0)
    return tuple(MessageStore(small_config(tmp_path / name, commitlog_segment_bytes=segment_bytes))
                 for name in ("blocks", "lists"))


def _commit_in_both(stores, messages: list[Message], topics: list[str], monkeypatch) -> list:
    """Append `messages` to SOURCE, then copy them to `topics` as one group, in both stores; the
    second store encodes record by record. Returns each store's copy results."""
    out = []
    real = CommitLog._write_block
    block_writes = []

    def counted(*args, **kwargs):
        block_writes.append(real(*args, **kwargs))
        return block_writes[-1]

    monkeypatch.setattr(CommitLog, "_write_block", counted)
    for store in stores:
        placed = [(r.physical_offset, r.size) for r in store.append([replace(m) for m in messages])]
        copies = RecordCopies([p for p, _ in placed], [s for _, s in placed], topics,
                              [i % 3 for i in range(len(placed))], SYSFLAG_TRANSACTION_COMMIT,
                              source_topic=SOURCE, drop_properties=(DROPPED,))
        if store is stores[1]:
            monkeypatch.setattr(CommitLog, "_write_block", lambda *a, **k: None)
        out.append(list(store.append_group_copies(copies)))
    assert block_writes and None not in block_writes  # the first store wrote the copies as a block
    return out


def _log_bytes(store: MessageStore) -> bytes:
    return store.commitlog.read(0, store.commitlog.write_end)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=_messages, topic_choice=st.lists(_topics, min_size=1, max_size=3))
def test_a_block_writes_the_bytes_the_record_by_record_encoder_writes(tmp_path_factory, monkeypatch, messages,
                                                                      topic_choice):
    with monkeypatch.context() as patch:
        stores = _two_stores(tmp_path_factory.mktemp("blocks"), patch)
        try:
            topics = [topic_choice[i % len(topic_choice)] for i in range(len(messages))]
            blocks, lists = _commit_in_both(stores, messages, topics, patch)
            assert _log_bytes(stores[0]) == _log_bytes(stores[1])
            assert [tuple(r) for r in blocks] == [tuple(r) for r in lists]
        finally:
            for s in stores:
                s.close()


def test_copies_written_as_a_block_read_back_with_their_properties_and_index_keys(tmp_path, monkeypatch):
    blocks_store, _ = stores = _two_stores(tmp_path, monkeypatch)
    try:
        messages = [Message(SOURCE, b"body-%d" % i, 0, {"UNIQ_KEY": "id%d" % i, "TAGS": "t%d" % (i % 2),
                                                        "KEYS": "k%d other" % i, DROPPED: "5"})
                    for i in range(50)]
        placed = [(r.physical_offset, r.size) for r in blocks_store.append(messages)]
        copies = RecordCopies([p for p, _ in placed], [s for _, s in placed], ["FINAL"] * 50, [1] * 50,
                              SYSFLAG_TRANSACTION_COMMIT, source_topic=SOURCE, drop_properties=(DROPPED,))
        written = []
        real = CommitLog._write_block

        def watched(*args, **kwargs):
            written.append(real(*args, **kwargs))
            return written[-1]

        monkeypatch.setattr(CommitLog, "_write_block", watched)
        blocks_store.append_group_copies(copies)
        assert written and all(w is not None for w in written)  # the block path wrote them
        read = blocks_store.read_queue("FINAL", 1, 0, 100, tag_filter="t1").messages
        assert [m.body for m in read] == [b"body-%d" % i for i in range(1, 50, 2)]
        assert read[0].properties == {"UNIQ_KEY": "id1", "TAGS": "t1", "KEYS": "k1 other"}
        assert [m.body for m in blocks_store.query_by_key("FINAL", "k7")] == [b"body-7"]
    finally:
        for s in stores:
            s.close()


def _whole_log(store: MessageStore) -> bytes:
    """Every byte of the CommitLog, segment after segment (a read stops at a segment end)."""
    chunks, offset, end = [], 0, store.commitlog.write_end
    while offset < end:
        chunks.append(store.commitlog.read(offset, end - offset))
        offset += len(chunks[-1])
    return b"".join(chunks)


def test_a_block_that_crosses_segment_ends_is_written_as_a_block_with_the_record_by_record_bytes(
        tmp_path, monkeypatch):
    stores = _two_stores(tmp_path, monkeypatch, segment_bytes=16 << 10)
    try:
        messages = [Message(SOURCE, bytes([i]) * 500, 0, {"UNIQ_KEY": "u%d" % i}) for i in range(60)]
        blocks, lists = _commit_in_both(stores, messages, ["FINAL"] * 60, monkeypatch)
        copies_in = {stores[0].commitlog.segment_for(r.physical_offset).start for r in blocks}
        assert len(copies_in) > 1  # the block crossed segment ends (blank records close them)
        assert _whole_log(stores[0]) == _whole_log(stores[1])
        assert [tuple(r) for r in blocks] == [tuple(r) for r in lists]
        assert [m.body for m in stores[0].read_queue("FINAL", 0, 0, 100).messages] == [
            bytes([i]) * 500 for i in range(0, 60, 3)]
    finally:
        for s in stores:
            s.close()


def test_copies_in_a_store_with_an_ipv6_host_are_written_record_by_record(tmp_path, monkeypatch):
    monkeypatch.setattr(record_copy, "COLUMNAR_MIN_COPIES", 0)
    monkeypatch.setattr(record_copy, "COLUMNAR_MIN_SLOTS", 0)
    store = MessageStore(small_config(tmp_path / "s", commitlog_segment_bytes=4 << 20, store_host=("::1", 10911)))
    try:
        placed = [(r.physical_offset, r.size) for r in store.append(
            [Message(SOURCE, b"m%d" % i, 0, {"UNIQ_KEY": "u%d" % i}) for i in range(20)])]
        copies = RecordCopies([p for p, _ in placed], [s for _, s in placed], ["FINAL"] * 20, [0] * 20,
                              SYSFLAG_TRANSACTION_COMMIT, source_topic=SOURCE)
        store.append_group_copies(copies)
        read = store.read_queue("FINAL", 0, 0, 100).messages
        assert [(m.body, m.store_host) for m in read] == [(b"m%d" % i, ("::1", 10911)) for i in range(20)]
    finally:
        store.close()


def test_sources_in_two_segments_make_one_block_with_both_maps(tmp_path, monkeypatch):
    stores = _two_stores(tmp_path, monkeypatch, segment_bytes=64 << 10)
    try:
        for store in stores:  # the sources start near the end of the first segment
            store.append([Message("FILLER", b"f" * 1000, 0) for _ in range(44)])
        messages = [Message(SOURCE, bytes([i]) * 1000, 0, {"UNIQ_KEY": "u%d" % i}) for i in range(20)]
        blocks, lists = _commit_in_both(stores, messages, ["FINAL"] * 20, monkeypatch)
        sources = stores[0].read_queue(SOURCE, 0, 0, 100).messages
        assert sources[0].physical_offset < 64 << 10 <= sources[-1].physical_offset  # they span two segments
        assert _log_bytes(stores[0]) == _log_bytes(stores[1])
        assert [tuple(r) for r in blocks] == [tuple(r) for r in lists]
    finally:
        for s in stores:
            s.close()
