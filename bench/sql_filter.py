"""SQL92 filter benchmark: a filter keeping 1% of a topic, read by the broker's filtered pull vs
decoding every message and filtering it in Python.

    .venv/bin/python bench/sql_filter.py [--quick] [--rows N] [--repeat K]

Writes N messages (default 1,000,000; --quick 100,000) round-robin into a 4-queue
topic of a MessageStore in a temp dir: 256-byte bodies, a tag, a key, and the user
properties region (10 values), amount (0..999) and source. Then reads every queue
in full with the filter `region = 'r3' AND amount >= 900` (1% of the messages):
(a) baseline: MessageStore.read_queue (every record decoded into a StoredMessage) and
    the compiled filter asked of each message in Python;
(b) txmq with filter bits: native_pull.pull_batch (what Flight DoGet and the Spark
    source run) with the expression registered before the messages were written, so the
    broker's dispatch-time bits (store/filter_bits.py) say which entries it may select:
    only those are decoded, nothing else is scanned;
(c) txmq scanning: the same pull with an expression registered only after the writes (its
    bits do not cover them): the named properties found in the raw records by the compiled
    scan, the filter evaluated as columns, only the matches decoded.
All must select the same messages. Prints one JSON line with the ratios (b and c vs a,
rows/s) and writes bench/results/sql_filter.json.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results_io import emit  # noqa: E402
from size_args import parse_size_args  # noqa: E402
from txmq.broker.server.native_pull import pull_batch  # noqa: E402
from txmq.broker.store import Message, MessageStore, StoreConfig  # noqa: E402
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS  # noqa: E402
from txmq.broker.store.message_filter import MessageFilter  # noqa: E402

TOPIC = "bench-sql"
QUEUES = 4
BODY = b"b" * 256
WRITE_BATCH = 10_000
PULL_COUNT = 100_000
PULL_BYTES = 64 << 20
EXPRESSION = "region = 'r3' AND amount >= 900"


def load(store: MessageStore, rows: int) -> None:
    for first in range(0, rows, WRITE_BATCH):
        n = min(WRITE_BATCH, rows - first)
        store.append([Message(TOPIC, BODY, queue_id=(first + i) % QUEUES,
                              properties={PROP_TAGS: f"t{(first + i) % 4}", PROP_KEYS: f"k{first + i}",
                                          "region": f"r{(first + i) // 7 % 10}", "amount": str((first + i) % 1000),
                                          "source": "bench"})
                      for i in range(n)])


def python_filter(store: MessageStore, f: MessageFilter) -> list[bytes]:
    """Every message decoded, the filter asked of each one in Python."""
    kept = []
    for q in range(QUEUES):
        pos, hi = 0, store.max_offset(TOPIC, q)
        while pos < hi:
            read = store.read_queue(TOPIC, q, pos, min(hi - pos, PULL_COUNT), max_bytes=PULL_BYTES)
            kept += [m.body + m.properties[PROP_KEYS].encode() for m in read.messages if f.accepts(m)]
            pos = read.next_offset
    return kept


def filtered_pull(store: MessageStore, f: MessageFilter) -> list[bytes]:
    """The broker's filtered pull over every queue."""
    kept = []
    for q in range(QUEUES):
        pos, hi = 0, store.max_offset(TOPIC, q)
        while pos < hi:
            read = pull_batch(store, TOPIC, q, pos, min(hi - pos, PULL_COUNT), max_bytes=PULL_BYTES,
                              message_filter=f)
            batch = read.batch
            kept += [body + keys[0].encode() for body, keys in zip(batch.column("body").to_pylist(),
                                                                  batch.column("keys").to_pylist())]
            pos = read.next_offset
    return kept


def best_seconds(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    args, rows = parse_size_args(100_000, 1_000_000)
    f = MessageFilter.parse(sql=EXPRESSION)
    scan = MessageFilter.parse(sql=EXPRESSION + " ")  # the same filter, an expression registered only later
    with tempfile.TemporaryDirectory() as tmp:
        store = MessageStore(StoreConfig(Path(tmp) / "store"))
        try:
            store.filter_bits.register(TOPIC, f)  # a consumer group subscribed before the writes
            t0 = time.perf_counter()
            load(store, rows)
            load_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            while any(store.filter_bits.may_pass(TOPIC, q, 0, store.max_offset(TOPIC, q), f) is None
                      for q in range(QUEUES)):
                time.sleep(0.01)
            bits_s = time.perf_counter() - t0  # what the bits thread still had to do after the writes
            baseline = python_filter(store, f)
            assert filtered_pull(store, f) == baseline, "the pull with bits selected other messages"
            assert filtered_pull(store, scan) == baseline, "the scanning pull selected other messages"
            timings = {"python_filter": best_seconds(lambda: python_filter(store, f), args.repeat),
                       "filtered_pull": best_seconds(lambda: filtered_pull(store, f), args.repeat),
                       "filtered_pull_scan": best_seconds(lambda: filtered_pull(store, scan), args.repeat)}
        finally:
            store.close()
    rates = {k: rows / v for k, v in timings.items()}
    result = {
        "bench": "sql_filter", "rows": rows, "kept": len(baseline), "kept_fraction": round(len(baseline) / rows, 4),
        "expression": EXPRESSION, "body_bytes": len(BODY), "queues": QUEUES, "load_s": round(load_s, 1),
        "bits_behind_writes_s": round(bits_s, 2),
        "seconds": {k: round(v, 3) for k, v in timings.items()},
        "rows_per_s": {k: round(v) for k, v in rates.items()},
        "ratios": {"filtered_pull_vs_python_filter": round(rates["filtered_pull"] / rates["python_filter"], 1),
                   "filtered_pull_scan_vs_python_filter": round(rates["filtered_pull_scan"] / rates["python_filter"], 1),
                   "bits_vs_scan": round(rates["filtered_pull"] / rates["filtered_pull_scan"], 2)},
    }
    emit("sql_filter", result)


if __name__ == "__main__":
    main()
