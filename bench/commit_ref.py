"""What a COMMIT by reference would save: today's COMMIT against the reference's work, same run (issue #42).

    .venv/bin/python bench/commit_ref.py [--rows N] [--repeat K]

In one store (in process, async flush, as the broker's default), two transactions of N halves of
1 KiB each (default 200,000 rows, the Spark sink's shape: body-only rows over 8 queues) are
prepared; one is committed by today's COMMIT (`TransactionEngine.end`: a copy of every half, its
queue entries and the op record, as one group), the other is given the work a COMMIT by
reference does before its queue entries are dispatched: the same scan of the halves
(`record_copy.reference_slots`) and the commit records' bodies of 52-byte slots
(`commit_ref.encode_rows`), appended as one group to TXMQ_SYS_COMMIT_REF. The reference is
not wired into the engine yet, so this is a projection: it leaves out the N queue entries the
reference would still dispatch (20 bytes each, which the copy's figure includes) and the op
record (a few hundred bytes). Trials alternate; the figure is the median ratio reference/copy
with min-max, in wall time and in process CPU (the host is shared). Prints one JSON line and writes bench/results/commit_ref.json.
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
from txmq.broker.store.commit_ref import COMMIT_REF_TOPIC, SLOT_SIZE, encode_rows  # noqa: E402
from txmq.broker.store.message import SYSFLAG_TRANSACTION_COMMIT  # noqa: E402
from txmq.broker.store.record_block import load_compiled  # noqa: E402
from txmq.broker.store.record_copy import load_compiled_scan, reference_slots  # noqa: E402
from txmq.broker.store.record_layout import HEADER_V4_SIZE  # noqa: E402
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine  # noqa: E402
from txmq.broker.transaction.engine import SCHEDULED, _copies_of  # noqa: E402

TOPIC = "bench"
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


def commit_by_copy(engine: TransactionEngine, tx: str) -> tuple[float, float]:
    """(wall, process CPU) seconds of today's COMMIT."""
    t0, c0 = time.perf_counter(), time.process_time()
    engine.end(tx, Resolution.COMMIT)
    return time.perf_counter() - t0, time.process_time() - c0


def reference_work(store: MessageStore, engine: TransactionEngine, tx: str) -> tuple[float, float]:
    """(wall, process CPU) seconds of the reference's work."""
    t0, c0 = time.perf_counter(), time.process_time()
    copies = _copies_of(engine._table[tx].halves, None, None, SYSFLAG_TRANSACTION_COMMIT, SCHEDULED)
    topics, rows, *_ = reference_slots(store, copies)
    per_record = (store.config.max_body_bytes - 4096) // SLOT_SIZE
    records = [Message(topic=COMMIT_REF_TOPIC, body=encode_rows(topics, rows[i:i + per_record], body_at=HEADER_V4_SIZE),
                       queue_id=0)
               for i in range(0, len(rows), per_record)]
    store.append_group(records, allow_system=True, durable=False)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    load_compiled_scan()  # as a broker does at start: no trial pays numba's load
    load_compiled()
    copy_s, ref_s = [], []
    for trial in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="txmq-commit-ref-") as tmp:
            store = MessageStore(StoreConfig(data_dir=Path(tmp), flush_mode="async"))
            store.topics.create(TOPIC, queue_count=QUEUES)
            store.topics.create(COMMIT_REF_TOPIC, queue_count=1)
            engine = TransactionEngine(store, TransactionConfig())
            prepare(engine, "copy", args.rows)
            prepare(engine, "ref", args.rows)
            if trial % 2:  # alternate which one runs first (page cache, a warm allocator)
                ref_s.append(reference_work(store, engine, "ref"))
                copy_s.append(commit_by_copy(engine, "copy"))
            else:
                copy_s.append(commit_by_copy(engine, "copy"))
                ref_s.append(reference_work(store, engine, "ref"))
            engine.close()
            store.close()
    ratios = [r[0] / c[0] for r, c in zip(ref_s, copy_s)]
    cpu_ratios = [r[1] / c[1] for r, c in zip(ref_s, copy_s)]
    emit("commit_ref", {
        "rows": args.rows, "body_bytes": len(BODY), "repeat": args.repeat,
        "copy_commit_s": statistics.median(c[0] for c in copy_s),
        "reference_work_s": statistics.median(r[0] for r in ref_s),
        "reference_vs_copy": statistics.median(ratios), "reference_vs_copy_min": min(ratios),
        "reference_vs_copy_max": max(ratios),
        "copy_commit_cpu_s": statistics.median(c[1] for c in copy_s),
        "reference_work_cpu_s": statistics.median(r[1] for r in ref_s),
        "reference_vs_copy_cpu": statistics.median(cpu_ratios), "reference_vs_copy_cpu_min": min(cpu_ratios),
        "reference_vs_copy_cpu_max": max(cpu_ratios),
        "copy_commit_all_s": copy_s, "reference_work_all_s": ref_s,
        "note": "projection: the reference's scan and commit records, without its N queue entries"})


if __name__ == "__main__":
    main()
