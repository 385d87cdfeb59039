"""Pull micro-benchmark: a queue range as an Arrow batch, object path vs columnar path, in rows/s.

    .venv/bin/python bench/pull_columnar.py [--quick] [--rows N]

Writes N committed-transaction-like messages (1 KiB bodies, UNIQ_KEY,
__transactionId__, TRAN_MSG, PGROUP, one user property) round-robin into a
4-queue topic of a MessageStore in a temp dir (default 200,000; --quick 40,000),
then reads every queue in 64 MiB pulls (what the PullArrow RPC does, IPC
serialisation included) with
(a) the object path: MessageStore.read_queue + build_pull_batch (StoredMessage per record),
(b) the columnar path: native_pull.pull_batch (CommitLog bytes → numpy/Arrow),
and measures a limit: (c) reading back the same rows from a prebuilt Arrow IPC
stream (what any reader of prepared Arrow data pays at least).
Prints one JSON line, writes bench/results/pull_columnar.json.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results_io import emit  # noqa: E402
from size_args import parse_size_args  # noqa: E402
from txmq.broker.server.native_pull import build_pull_batch, pull_batch  # noqa: E402
from txmq.broker.store import Message, MessageStore, StoreConfig  # noqa: E402
from txmq.broker.store.message import SYSFLAG_TRANSACTION_COMMIT  # noqa: E402

TOPIC = "bench-pull"
QUEUES = 4
BODY = b"x" * 1024
WRITE_BATCH = 10_000
PULL_BYTES = 64 << 20
PULL_COUNT = 100_000


def load(store: MessageStore, rows: int) -> None:
    for first in range(0, rows, WRITE_BATCH):
        n = min(WRITE_BATCH, rows - first)
        tx = f"tx-{first}"
        store.append([Message(TOPIC, BODY, queue_id=(first + i) % QUEUES, sys_flag=SYSFLAG_TRANSACTION_COMMIT,
                              properties={"UNIQ_KEY": f"7F000001{first + i:024X}", "__transactionId__": tx,
                                          "TRAN_MSG": "true", "PGROUP": "bench", "source": "bench"})
                      for i in range(n)])


def to_ipc(data: pa.RecordBatch | pa.Table) -> bytes:
    """`data` as one Arrow IPC stream: what a pull's batch costs to put on the wire."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()


def read_all(store: MessageStore, pull) -> list[bytes]:
    """Every queue from offset 0 in PullArrow-sized pulls; returns the IPC payloads."""
    payloads = []
    for q in range(QUEUES):
        pos, hi = 0, store.max_offset(TOPIC, q)
        while pos < hi:
            batch, pos = pull(store, q, pos, min(hi - pos, PULL_COUNT))
            payloads.append(to_ipc(batch))
    return payloads


def object_pull(store: MessageStore, q: int, pos: int, count: int):
    read = store.read_queue(TOPIC, q, pos, count, max_bytes=PULL_BYTES)
    return build_pull_batch(read.messages), read.next_offset


def columnar_pull(store: MessageStore, q: int, pos: int, count: int):
    read = pull_batch(store, TOPIC, q, pos, count, max_bytes=PULL_BYTES)
    return read.batch, read.next_offset


def best_seconds(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    args, rows = parse_size_args(40_000, 200_000)
    with tempfile.TemporaryDirectory() as tmp:
        store = MessageStore(StoreConfig(Path(tmp) / "store"))
        try:
            load(store, rows)
            old_payloads = read_all(store, object_pull)
            new_payloads = read_all(store, columnar_pull)
            old_t = pa.ipc.open_stream(b"".join(old_payloads[:1])).read_all()
            assert old_payloads == new_payloads, "the columnar path built different batches"
            del old_t
            ipc = b"".join(new_payloads[:1])
            per_pull = pa.ipc.open_stream(ipc).read_all().num_rows
            whole = to_ipc(pa.concat_tables([pa.ipc.open_stream(x).read_all() for x in new_payloads]))
            timings = {
                "object": best_seconds(lambda: read_all(store, object_pull), args.repeat),
                "columnar": best_seconds(lambda: read_all(store, columnar_pull), args.repeat),
                "ipc_read_limit": best_seconds(lambda: pa.ipc.open_stream(whole).read_all().combine_chunks(),
                                               args.repeat),
            }
        finally:
            store.close()
    rates = {k: rows / v for k, v in timings.items()}
    result = {
        "bench": "pull_columnar", "rows": rows, "body_bytes": len(BODY), "queues": QUEUES, "rows_per_pull": per_pull,
        "rows_per_s": {k: round(v) for k, v in rates.items()},
        "us_per_row": {k: round(v / rows * 1e6, 3) for k, v in timings.items()},
        "ratios": {"columnar_vs_object": round(rates["columnar"] / rates["object"], 2),
                   "columnar_vs_ipc_read_limit": round(rates["columnar"] / rates["ipc_read_limit"], 3)},
    }
    emit("pull_columnar", result)


if __name__ == "__main__":
    main()
