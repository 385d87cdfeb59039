"""Transaction engine benchmark (in-process, engine level, one run).

    .venv/bin/python bench/tx.py [--quick]

Measures, over a real MessageStore (async flush) in a temporary directory:
- committed messages/s for transactions of 1 and of 100 messages of 1 KiB
  (prepare + COMMIT), against the plain store.append of the same batches
  measured in the same run (the peer), in alternating rounds; the ratios are
  the median of CPU-time cost ratios (the machine is shared), wall rates are
  reported too;
  target: a 100-message transaction costs at most 2.5x the plain append of its
  messages. Measured for bare messages (no properties: the store's cheapest
  record) and for messages with a client message id and a tag (what every
  RocketMQ producer sends); halves and finals carry ~7 more properties
  (REAL_TOPIC, REAL_QID, PGROUP, transaction id, sender, ...);
- the Spark sink's shape: one transaction of 4 senders' prepare calls of 4096
  messages (with ids), ended by a sender-restricted COMMIT, against the plain
  appends of the same batches: the prepare and the COMMIT CPU costs per message,
  each as a ratio to the plain append's (the COMMIT's is what every writer waits for);
- check-back with 100 000 pending transactions: a round when nothing is due,
  a round handing every transaction to a listener, and the recovery (table
  rebuild) time of a new engine over the same store.
Prints one JSON line and writes it to bench/results/tx.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import emit  # noqa: E402
from txmq.broker.store.config import StoreConfig  # noqa: E402
from txmq.broker.store.message import PROP_TAGS, PROP_UNIQ_KEY, Message  # noqa: E402
from txmq.broker.store.message_store import MessageStore  # noqa: E402
from txmq.broker.transaction import CheckbackService, Resolution, TransactionConfig, TransactionEngine  # noqa: E402

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


def batch(size: int, serial: int, with_ids: bool) -> list[Message]:
    """`with_ids`: each message carries a client message id and a tag, as every RocketMQ producer sends."""
    if not with_ids:
        return [Message(topic="bench", body=BODY, queue_id=(serial + i) % 4) for i in range(size)]
    return [Message(topic="bench", body=BODY, queue_id=(serial + i) % 4,
                    properties={PROP_UNIQ_KEY: f"{serial:016X}{i:016X}", PROP_TAGS: "bench"})
            for i in range(size)]


class Rate:
    """Messages per second of wall time and per second of this process's CPU time.

    The machine is shared with other builds: the CPU-time rate is what the ratios use."""

    def __init__(self, messages: int) -> None:
        self.messages = messages

    def __enter__(self) -> "Rate":
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_rate = self.messages / (time.perf_counter() - self.wall)
        self.cpu_rate = self.messages / max(time.process_time() - self.cpu, 1e-9)


def plain_rate(store: MessageStore, size: int, batches: int, with_ids: bool) -> Rate:
    with Rate(size * batches) as rate:
        for b in range(batches):
            store.append(batch(size, b, with_ids))
    return rate


def tx_rate(engine: TransactionEngine, size: int, batches: int, with_ids: bool) -> Rate:
    with Rate(size * batches) as rate:
        for b in range(batches):
            tx = engine.prepare(batch(size, b, with_ids), producer_group="bench").transaction_id
            engine.end(tx, Resolution.COMMIT)
    return rate


def paired(store: MessageStore, engine: TransactionEngine, size: int, batches: int, rounds: int,
           with_ids: bool = False) -> dict:
    """Alternate plain and transactional runs: the machine is shared, so each ratio
    compares neighbours in time (in CPU time); the median ratio and the best rates are reported."""
    tag = f"{size}_with_ids" if with_ids else f"{size}"
    plain, tx, ratios = [], [], []
    for _ in range(rounds):
        p = plain_rate(store, size, batches, with_ids)
        t = tx_rate(engine, size, batches, with_ids)
        plain.append(p)
        tx.append(t)
        ratios.append(p.cpu_rate / t.cpu_rate)
    return {f"plain_msgs_per_s_{tag}": max(r.wall_rate for r in plain),
            f"tx_msgs_per_s_{tag}": max(r.wall_rate for r in tx),
            f"plain_msgs_per_cpu_s_{tag}": max(r.cpu_rate for r in plain),
            f"tx_msgs_per_cpu_s_{tag}": max(r.cpu_rate for r in tx),
            f"cost_ratio_{tag}": statistics.median(ratios)}


SINK_BATCH = 4096
SINK_SENDERS = [f"sink/0/{p}/0/bench" for p in range(4)]


def sink_shaped(store: MessageStore, engine: TransactionEngine, rows: int, rounds: int) -> dict:
    """Prepare and COMMIT CPU time per message of a sink-shaped transaction, as ratios to the
    plain append of the same batches (medians of neighbouring rounds)."""
    prepare_ratios, commit_ratios = [], []
    for r in range(rounds):
        batches = [batch(min(SINK_BATCH, rows - start), r * rows + start, True) for start in range(0, rows, SINK_BATCH)]
        plain = Rate(rows)
        with plain:
            for b in batches:
                store.append(b)
        tx = f"sink-{uuid.uuid4().hex}"
        prepare = Rate(rows)
        with prepare:
            for i, b in enumerate(batches):
                engine.prepare(b, transaction_id=tx, producer_group="bench", sender=SINK_SENDERS[i % 4])
        commit = Rate(rows)
        with commit:
            engine.end(tx, Resolution.COMMIT, include_senders=SINK_SENDERS)
        prepare_ratios.append(plain.cpu_rate / prepare.cpu_rate)
        commit_ratios.append(plain.cpu_rate / commit.cpu_rate)
    return {"sink_rows": rows, "cost_ratio_sink_prepare": statistics.median(prepare_ratios),
            "cost_ratio_sink_commit": statistics.median(commit_ratios)}


def throughput(root: Path, quick: bool) -> dict:
    store = MessageStore(StoreConfig(data_dir=root / "throughput"))
    try:
        engine = TransactionEngine(store, TransactionConfig())
        rounds = 5
        n1, n100 = (1_000, 50) if quick else (4_000, 200)
        tx_rate(engine, 1, 200, False)  # warm up both paths
        plain_rate(store, 1, 200, False)
        out = {**paired(store, engine, 1, n1, rounds), **paired(store, engine, 100, n100, rounds),
               **paired(store, engine, 100, n100, rounds, with_ids=True),
               **sink_shaped(store, engine, 16_384 if quick else 50_000, rounds)}
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
    cost_100 = figures.pop("cost_ratio_100")
    ratios = {
        "tx_cost_vs_plain_append_100": cost_100,
        "tx_cost_vs_plain_append_1": figures.pop("cost_ratio_1"),
        "tx_cost_vs_plain_append_100_with_ids": figures.pop("cost_ratio_100_with_ids"),
        "sink_prepare_cost_vs_plain_append": figures.pop("cost_ratio_sink_prepare"),
        "sink_commit_cost_vs_plain_append": figures.pop("cost_ratio_sink_commit"),
        "tx_cost_100_vs_target_2_5": cost_100 / TARGET_RATIO_100,
    }
    line = {"bench": "tx", "quick": args.quick, **{k: round(v, 6) if isinstance(v, float) else v
                                                   for k, v in figures.items()},
            "ratios": {k: round(v, 3) for k, v in ratios.items()},
            "target_met": cost_100 <= TARGET_RATIO_100}
    emit("tx", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
