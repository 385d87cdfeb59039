"""Transaction engine benchmark (in-process, engine level, one run).

    .venv/bin/python bench/tx.py [--quick]

Measures, over a real MessageStore (async flush) in a temporary directory:
- committed messages/s for transactions of 1 and of 100 messages of 1 KiB
  (prepare + COMMIT), against the plain store.append of the same batches
  measured in the same run (the peer); target: a 100-message transaction costs
  at most 2.5x the plain append of its messages;
- check-back with 100 000 pending transactions: a round when nothing is due,
  a round handing every transaction to a listener, and the recovery (table
  rebuild) time of a new engine over the same store.
Prints one JSON line and writes it to bench/results/tx.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import Message
from txmq.broker.store.message_store import MessageStore
from txmq.broker.transaction import CheckbackService, Resolution, TransactionConfig, TransactionEngine

BODY = b"x" * 1024
TARGET_RATIO_100 = 2.5


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class CountingListener:
    def __init__(self) -> None:
        self.count = 0

    def request_check(self, tx, half) -> bool:
        self.count += 1
        return True


def batch(size: int, serial: int) -> list[Message]:
    return [Message(topic="bench", body=BODY, queue_id=(serial + i) % 4) for i in range(size)]


def plain_rate(store: MessageStore, size: int, batches: int) -> float:
    started = time.perf_counter()
    for b in range(batches):
        store.append(batch(size, b))
    return size * batches / (time.perf_counter() - started)


def tx_rate(engine: TransactionEngine, size: int, batches: int) -> float:
    started = time.perf_counter()
    for b in range(batches):
        tx = engine.prepare(batch(size, b), producer_group="bench").transaction_id
        engine.end(tx, Resolution.COMMIT)
    return size * batches / (time.perf_counter() - started)


def best_of(runs: int, fn, *args) -> float:
    return max(fn(*args) for _ in range(runs))


def throughput(root: Path, quick: bool) -> dict:
    store = MessageStore(StoreConfig(data_dir=root / "throughput"))
    try:
        engine = TransactionEngine(store, TransactionConfig())
        runs = 3
        n1, n100 = (2_000, 40) if quick else (10_000, 200)
        tx_rate(engine, 1, 200)  # warm up both paths
        plain_rate(store, 1, 200)
        out = {
            "plain_msgs_per_s_1": best_of(runs, plain_rate, store, 1, n1),
            "tx_msgs_per_s_1": best_of(runs, tx_rate, engine, 1, n1),
            "plain_msgs_per_s_100": best_of(runs, plain_rate, store, 100, n100),
            "tx_msgs_per_s_100": best_of(runs, tx_rate, engine, 100, n100),
        }
        engine.close()
        return out
    finally:
        store.close()


def checkback(root: Path, pending: int) -> dict:
    store = MessageStore(StoreConfig(data_dir=root / "checkback"))
    clock = Clock()
    config = TransactionConfig(max_checks_per_round=pending, snapshot_interval_s=1e9)
    try:
        engine = TransactionEngine(store, config, clock=clock)
        started = time.perf_counter()
        for i in range(pending):
            engine.prepare([Message(topic="bench", body=b"p", queue_id=i % 4)], transaction_id=f"p{i}")
        prepare_s = time.perf_counter() - started
        listener = CountingListener()
        service = CheckbackService(engine, listener)
        started = time.perf_counter()
        idle = service.run_once()
        idle_s = time.perf_counter() - started
        assert idle.checked == 0
        clock.now += config.transaction_timeout_s + 1
        started = time.perf_counter()
        full = service.run_once()
        full_s = time.perf_counter() - started
        assert full.checked == pending == listener.count, (full, listener.count)
        started = time.perf_counter()
        engine.snapshot()
        snapshot_s = time.perf_counter() - started
        started = time.perf_counter()
        again = TransactionEngine(store, config, clock=clock)
        recovery_s = time.perf_counter() - started
        assert len(again.pending(limit=pending)) == pending
        shutil.rmtree(again.state_dir)
        started = time.perf_counter()
        TransactionEngine(store, config, clock=clock)
        replay_s = time.perf_counter() - started
        return {
            "pending_transactions": pending,
            "prepare_pending_s": prepare_s,
            "checkback_idle_round_s": idle_s,
            "checkback_full_round_s": full_s,
            "checkback_per_tx_us": full_s / pending * 1e6,
            "snapshot_write_s": snapshot_s,
            "recovery_from_snapshot_s": recovery_s,
            "recovery_full_replay_s": replay_s,
        }
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="txmq-bench-tx-"))
    try:
        figures = throughput(root, args.quick)
        figures.update(checkback(root, 100_000))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    cost_100 = figures["plain_msgs_per_s_100"] / figures["tx_msgs_per_s_100"]
    ratios = {
        "tx_cost_vs_plain_append_100": cost_100,
        "tx_cost_vs_plain_append_1": figures["plain_msgs_per_s_1"] / figures["tx_msgs_per_s_1"],
        "tx_cost_100_vs_target_2_5": cost_100 / TARGET_RATIO_100,
    }
    line = {"bench": "tx", "quick": args.quick, **{k: round(v, 6) if isinstance(v, float) else v
                                                   for k, v in figures.items()},
            "ratios": {k: round(v, 3) for k, v in ratios.items()},
            "target_met": cost_100 <= TARGET_RATIO_100}
    text = json.dumps(line)
    print(text)
    out = Path(__file__).resolve().parent / "results" / "tx.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
