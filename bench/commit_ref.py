"""A COMMIT by reference against the copy it replaced, same run (issue #42); and the read of what each published.

    .venv/bin/python bench/commit_ref.py [--rows N] [--repeat K]

In one store (in process, async flush, as the broker's default), two transactions of N halves of
1 KiB each (default 200,000 rows, the Spark sink's shape: body-only rows over 8 queues) are
prepared; one is committed by the engine's COMMIT (`TransactionEngine.end`: by reference, commit
records of 52-byte slots, the queue entries at the slots and the op record, as one group), the
other the way COMMIT did before: a copy of every half into its topic with the op record
(`MessageStore.append_group_copies`, which the store keeps for a discard's copies). Then the
queues each published are read whole with the pull kernel's read (`columnar_read.read_queue_bytes`
and `pull_decode.decode_pull_batch`, what the Spark source's pulls do). Trials alternate; the
figures are the median ratios reference/copy with min-max, in wall time and in process CPU (the
host is shared). Prints one JSON line and writes bench/results/commit_ref.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results_io import emit  # noqa: E402
from txmq.broker.store import Message, MessageStore, StoreConfig  # noqa: E402
from txmq.broker.store.columnar_read import read_queue_bytes  # noqa: E402
from txmq.broker.store.commit_ref import load_compiled_finals  # noqa: E402
from txmq.broker.store.message import OP_HALF_TOPIC, SYSFLAG_TRANSACTION_COMMIT  # noqa: E402
from txmq.broker.store.pull_decode import decode_pull_batch  # noqa: E402
from txmq.broker.store.pull_decode_kernel import _compiled as load_pull_kernel  # noqa: E402
from txmq.broker.store.record_block import load_compiled  # noqa: E402
from txmq.broker.store.record_copy import load_compiled_scan  # noqa: E402
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine  # noqa: E402
from txmq.broker.transaction.engine import SCHEDULED, _copies_of  # noqa: E402

TOPIC = "bench"
COPY_TOPIC = "bench_copy"  # where the copy publishes the other transaction
QUEUES = 8
BODY = b"x" * 1024
PREPARE_ROWS = 10_000


def prepare(engine: TransactionEngine, tx: str, rows: int) -> None:
    done = 0
    while done < rows:
        n = min(PREPARE_ROWS, rows - done)
        engine.prepare_bodies([TOPIC] * n, [BODY] * n, [i % QUEUES for i in range(n)], None,
                              born_timestamp=int(time.time() * 1000), transaction_id=tx, producer_group="bench")
        done += n


def commit_by_reference(engine: TransactionEngine, tx: str) -> tuple[float, float]:
    """(wall, process CPU) seconds of the engine's COMMIT."""
    t0, c0 = time.perf_counter(), time.process_time()
    engine.end(tx, Resolution.COMMIT)
    return time.perf_counter() - t0, time.process_time() - c0


def commit_by_copy(store: MessageStore, engine: TransactionEngine, tx: str) -> tuple[float, float]:
    """(wall, process CPU) seconds of the copy the COMMIT made before (to COPY_TOPIC), op record included."""
    t0, c0 = time.perf_counter(), time.process_time()
    copies = _copies_of(engine._table[tx].halves, COPY_TOPIC, None, SYSFLAG_TRANSACTION_COMMIT, SCHEDULED)
    store.append_group_copies(copies, [Message(topic=OP_HALF_TOPIC, body=b"op" * 40)], durable=False)
    return time.perf_counter() - t0, time.process_time() - c0


def read_all(store: MessageStore, topic: str) -> tuple[float, float]:
    """(wall, process CPU) seconds to read and decode every queue of `topic` as pulls do."""
    t0, c0 = time.perf_counter(), time.process_time()
    for q in range(QUEUES):
        offset = 0
        while offset < store.max_offset(topic, q):
            read = read_queue_bytes(store, topic, q, offset, 1 << 20, max_bytes=4 << 20, one_kind=True, in_place=True)
            decode_pull_batch(read.data, read.record_at, read.phys, read.sizes, topic, q, read.refs)
            offset = read.next_offset
    return time.perf_counter() - t0, time.process_time() - c0


def _ratios(ref: list, copy: list, k: int) -> dict:
    ratios = [r[k] / c[k] for r, c in zip(ref, copy)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="make bench's size: 50,000 rows, 2 trials")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.repeat = 50_000, 2
    load_compiled_scan()  # as a broker does at start: no trial pays numba's load
    load_compiled()
    load_compiled_finals()  # and the pulls' kernels: the first trial's first read does not pay their load
    load_pull_kernel()
    copy_s, ref_s, copy_read, ref_read = [], [], [], []
    for trial in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="txmq-commit-ref-") as tmp:
            store = MessageStore(StoreConfig(data_dir=Path(tmp), flush_mode="async"))
            store.topics.create(TOPIC, queue_count=QUEUES)
            store.topics.create(COPY_TOPIC, queue_count=QUEUES)
            engine = TransactionEngine(store, TransactionConfig())
            prepare(engine, "copy", args.rows)
            prepare(engine, "ref", args.rows)
            if trial % 2:  # alternate which one runs first (page cache, a warm allocator)
                ref_s.append(commit_by_reference(engine, "ref"))
                copy_s.append(commit_by_copy(store, engine, "copy"))
                ref_read.append(read_all(store, TOPIC))
                copy_read.append(read_all(store, COPY_TOPIC))
            else:
                copy_s.append(commit_by_copy(store, engine, "copy"))
                ref_s.append(commit_by_reference(engine, "ref"))
                copy_read.append(read_all(store, COPY_TOPIC))
                ref_read.append(read_all(store, TOPIC))
            engine.close()
            store.close()
    emit("commit_ref", {
        "rows": args.rows, "body_bytes": len(BODY), "repeat": args.repeat,
        "copy_commit_s": statistics.median(c[0] for c in copy_s),
        "reference_commit_s": statistics.median(r[0] for r in ref_s),
        "commit_reference_vs_copy": _ratios(ref_s, copy_s, 0),
        "commit_reference_vs_copy_cpu": _ratios(ref_s, copy_s, 1),
        "copy_read_s": statistics.median(c[0] for c in copy_read),
        "reference_read_s": statistics.median(r[0] for r in ref_read),
        "read_reference_vs_copy": _ratios(ref_read, copy_read, 0),
        "read_reference_vs_copy_cpu": _ratios(ref_read, copy_read, 1),
        "all": {"copy_commit": copy_s, "reference_commit": ref_s, "copy_read": copy_read, "reference_read": ref_read}})

if __name__ == "__main__":
    main()
