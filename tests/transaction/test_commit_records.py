"""COMMIT appends its final records with the properties their halves were stored with, unvalidated
a second time: the records must be exactly those of the validating append."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from txmq.broker.store import MessageStore, StoreConfig
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine

from .conftest import FakeClock, msg

STORE_ASSIGNED_TIMES = ("store_timestamp", "born_timestamp")  # born 0 means store time


def committed_records(tmp_path: Path, name: str, half_cache_bytes: int, *, validating: bool) -> list[dict]:
    """Final records of one transaction of three prepare calls (two senders, a sender-restricted COMMIT)."""
    store = MessageStore(StoreConfig(data_dir=tmp_path / name, flush_mode="async"))
    if validating:  # the peer: every final record validated and encoded again
        store.append_group_encoded = lambda messages, encoded: store.append_group(messages, allow_system=True)
    try:
        engine = TransactionEngine(store, TransactionConfig(half_cache_bytes=half_cache_bytes), clock=FakeClock())
        engine.prepare([msg("orders", b"a%d" % i, i % 2, KEYS=f"k{i} j{i}", TAGS="t", UNIQ_KEY=f"u{i}")
                        for i in range(5)], transaction_id="t", sender="s1", producer_group="g")
        engine.prepare([msg("orders", b"dropped", 0)], transaction_id="t", sender="s2")
        engine.prepare([msg("audit", b"b%d" % i, 1, note="n%d" % i) for i in range(3)], transaction_id="t",
                       sender="s1")
        engine.end("t", Resolution.COMMIT, include_senders=["s1"])
        return [{k: v for k, v in dataclasses.asdict(m).items() if k not in STORE_ASSIGNED_TIMES}
                for topic, queue_id in (("orders", 0), ("orders", 1), ("audit", 1))
                for m in store.read_queue(topic, queue_id, 0, 100).messages]
    finally:
        store.close()


@pytest.mark.parametrize("half_cache_bytes", [64 << 20, 0, 12], ids=["cached", "read-back", "partly-cached"])
def test_commit_writes_the_records_of_the_validating_append(tmp_path, half_cache_bytes):
    validated = committed_records(tmp_path, "validated", half_cache_bytes, validating=True)
    trusted = committed_records(tmp_path, "trusted", half_cache_bytes, validating=False)
    assert len(trusted) == 8
    assert trusted == validated
