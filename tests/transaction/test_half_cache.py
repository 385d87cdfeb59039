"""COMMIT of a transaction larger than the engine's half cache: halves read back from the CommitLog."""

from __future__ import annotations

from pathlib import Path

import pytest

from txmq.broker.store import MessageStore, StoreConfig
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine

from .conftest import FakeClock, msg


def committed_records(tmp_path: Path, name: str, half_cache_bytes: int) -> list[tuple]:
    """Final records of one transaction of three prepare calls (two senders, a sender-restricted COMMIT)."""
    store = MessageStore(StoreConfig(data_dir=tmp_path / name, flush_mode="async"))
    try:
        engine = TransactionEngine(store, TransactionConfig(half_cache_bytes=half_cache_bytes), clock=FakeClock())
        engine.prepare([msg("orders", b"a%d" % i, i % 2, KEYS=f"k{i}") for i in range(5)],
                       transaction_id="t", sender="s1")
        engine.prepare([msg("orders", b"dropped", 0)], transaction_id="t", sender="s2")
        engine.prepare([msg("orders", b"b%d" % i, 1) for i in range(3)], transaction_id="t", sender="s1")
        engine.end("t", Resolution.COMMIT, include_senders=["s1"])
        records = []
        for queue_id in (0, 1):
            for m in store.read_queue("orders", queue_id, 0, 100).messages:
                records.append((m.body, m.queue_id, m.sys_flag, m.prepared_transaction_offset,
                                dict(m.properties)))
        return records
    finally:
        store.close()


@pytest.mark.parametrize("half_cache_bytes", [0, 12])
def test_halves_beyond_the_cache_commit_to_the_same_records_as_cached_halves(tmp_path, half_cache_bytes):
    cached = committed_records(tmp_path, "cached", 64 << 20)
    read_back = committed_records(tmp_path, "read-back", half_cache_bytes)
    assert [r[0] for r in cached] == [b"a0", b"a2", b"a4", b"a1", b"a3", b"b0", b"b1", b"b2"]
    assert read_back == cached


@pytest.mark.parametrize("end", ["commit", "rollback", "discard"])
def test_ending_a_transaction_gives_its_cached_halves_back_to_the_cache(memory_store, end):
    engine = TransactionEngine(memory_store, TransactionConfig(half_cache_bytes=10), clock=FakeClock())
    engine.prepare([msg("orders", b"12345")], transaction_id="t")
    engine.prepare([msg("orders", b"6789")], transaction_id="t")
    assert engine._cache_bytes == 9
    if end == "discard":
        engine.discard("t")
    else:
        engine.end("t", Resolution.COMMIT if end == "commit" else Resolution.ROLLBACK)
    assert engine._cache_bytes == 0
    assert all(h.cached is None for tx in engine._table.values() for h in tx.halves)
