"""COMMIT writes each final record as a copy of its half made from the stored bytes
(MessageStore.append_group_copies). The records must be exactly those of the reference:
every half decoded, rebuilt as a Message (real topic and queue, COMMIT, pointing at the
half, the engine's prepare time dropped) and appended through the validating append."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from txmq.broker.store import MessageStore, StoreConfig
from txmq.broker.store.index_file import uniq_index_key
from txmq.broker.store.message import Message
from txmq.broker.store.record_copy import RecordCopies
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine
from txmq.broker.transaction.half import PROP_PREPARED_MS

from .conftest import FakeClock, msg

STORE_ASSIGNED_TIMES = ("store_timestamp", "born_timestamp")  # born 0 means store time
TX_BITS, GROUP_BITS = 0b1100, 0b11 << 16


def decoded_copies(store: MessageStore, copies: RecordCopies) -> list[Message]:
    """The reference for append_group_copies: decode every source and build its copy as a Message."""
    out = []
    for phys, size, topic, qid in zip(copies.physical_offsets, copies.sizes, copies.topics, copies.queue_ids):
        src = store.read_at(phys, size)
        props = {k: v for k, v in src.properties.items() if k not in copies.drop_properties}
        out.append(Message(topic, src.body, qid, props, src.flag,
                           (src.sys_flag & ~TX_BITS & ~GROUP_BITS) | copies.transaction_type,
                           src.born_timestamp, src.born_host, src.reconsume_times, phys))
    return out


def committed_records(tmp_path: Path, name: str, *, reference: bool) -> tuple[list[dict], MessageStore]:
    """Final records of one transaction of three prepare calls (two senders, a sender-restricted COMMIT)."""
    store = MessageStore(StoreConfig(data_dir=tmp_path / name, flush_mode="async"))
    if reference:
        store.append_group_copies = lambda copies, messages=(), **_: store.append_group(
            [*decoded_copies(store, copies), *messages], allow_system=True)
    engine = TransactionEngine(store, TransactionConfig(), clock=FakeClock())
    engine.prepare([msg("orders", b"a%d" % i, i % 2, KEYS=f"k{i} j{i}", TAGS="t", UNIQ_KEY=f"u{i}")
                    for i in range(5)], transaction_id="t", sender="s1", producer_group="g")
    engine.prepare([msg("orders", b"dropped", 0)], transaction_id="t", sender="s2")
    engine.prepare([msg("audit", b"b%d" % i, 1, note="n%d" % i) for i in range(3)], transaction_id="t",
                   sender="s1")
    engine.end("t", Resolution.COMMIT, include_senders=["s1"])
    records = [{k: v for k, v in dataclasses.asdict(m).items() if k not in STORE_ASSIGNED_TIMES}
               for topic, queue_id in (("orders", 0), ("orders", 1), ("audit", 1))
               for m in store.read_queue(topic, queue_id, 0, 100).messages]
    return records, store


@pytest.fixture(params=["record_by_record", "columnar"])
def copy_path(request, monkeypatch):
    from txmq.broker.store import record_copy

    for name in ("COLUMNAR_MIN_COPIES", "COLUMNAR_MIN_SLOTS"):
        monkeypatch.setattr(record_copy, name, 10**9 if request.param == "record_by_record" else 0)
    return request.param


def test_commit_writes_the_records_of_the_decoding_reference(tmp_path, copy_path):
    reference, ref_store = committed_records(tmp_path, "reference", reference=True)
    copied, store = committed_records(tmp_path, "copied", reference=False)
    try:
        assert len(copied) == 8
        assert copied == reference
    finally:
        ref_store.close()
        store.close()


def test_final_records_drop_the_engines_prepare_time_and_keep_the_rest(tmp_path):
    records, store = committed_records(tmp_path, "copied", reference=False)
    try:
        assert all(PROP_PREPARED_MS not in r["properties"] for r in records)
        first = records[0]["properties"]
        assert (first["TAGS"], first["KEYS"], first["UNIQ_KEY"], first["REAL_TOPIC"]) == ("t", "k0 j0", "u0", "orders")
    finally:
        store.close()


def test_final_records_are_found_by_their_keys_and_ids(tmp_path):
    _, store = committed_records(tmp_path, "copied", reference=False)
    try:
        assert [m.body for m in store.query_by_key("orders", "j3")] == [b"a3"]
        final = store.read_queue("orders", 0, 1, 1).messages[0]
        assert final.unique_key == "u2"
        assert final.physical_offset in store.index.lookup(uniq_index_key("u2"), limit=16)
    finally:
        store.close()
