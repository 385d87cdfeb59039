"""How long a large COMMIT holds other producers up (a broker process, loopback gRPC).

    .venv/bin/python bench/commit_stall.py [--quick] [--rows N] [--repeat K]

A Spark micro-batch is one transaction: its COMMIT copies every half (1M rows of
1 KiB: over a gigabyte). Meanwhile other producers of the same broker keep sending
to other topics. This benchmark prepares N halves (default 1,000,000; --quick:
200,000) in one transaction, then commits it while a second client sends one
1 KiB message at a time to another topic, and reports the sends' latencies during
the COMMIT against the COMMIT's own duration. The figure that matters is
`max_send_latency_vs_commit`: 1.0 means a sender waited for the whole COMMIT
(what a contiguous group under one write lock gives), a few hundredths means it
waited for one part. The same sender's latencies with no COMMIT running are the
baseline measured in the same run. Prints one JSON line and writes
bench/results/commit_stall.json.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402

from bench.results_io import emit  # noqa: E402
from bench.size_args import parse_size_args  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402

BODY = b"x" * 1024
PREPARE_ROWS = 10_000  # rows per PrepareMessages call


def prepare(client, tx: str, topic: str, rows: int) -> None:
    bodies = pa.array([BODY] * PREPARE_ROWS, pa.binary())
    sent = 0
    while sent < rows:
        n = min(PREPARE_ROWS, rows - sent)
        client.prepare_arrow(tx, pa.RecordBatch.from_arrays([bodies.slice(0, n)], names=["body"]), topic=topic,
                             producer_group="bench", sender="loader")
        sent += n


def send_latencies(client, topic: str, stop: threading.Event) -> list[float]:
    """Send one message at a time until `stop`; each send's latency in seconds."""
    from txmq.broker.client import Message

    out = []
    message = [Message(topic=topic, body=BODY)]
    while not stop.is_set():
        t0 = time.perf_counter()
        client.send(message)
        out.append(time.perf_counter() - t0)
        time.sleep(0.002)
    return out


def summary(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    return {"sends": len(ordered), "p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 2), "max_ms": round(ordered[-1] * 1000, 1)}


def one_round(broker, rows: int) -> dict:
    from txmq.broker.client import NativeClient

    loader, sender = NativeClient(broker.endpoint), NativeClient(broker.endpoint)
    try:
        tx = f"stall-{uuid.uuid4().hex}"
        prepare(loader, tx, "batch-out", rows)
        stop = threading.Event()
        quiet: list[float] = []
        thread = threading.Thread(target=lambda: quiet.extend(send_latencies(sender, "other", stop)))
        thread.start()
        time.sleep(1.0)  # the baseline: the same sends with no COMMIT running
        stop.set()
        thread.join()
        stop.clear()
        during: list[float] = []
        thread = threading.Thread(target=lambda: during.extend(send_latencies(sender, "other", stop)))
        thread.start()
        time.sleep(0.2)
        t0 = time.perf_counter()
        loader.end_transaction(tx, "COMMIT", producer_group="bench")
        commit_s = time.perf_counter() - t0
        stop.set()
        thread.join()
        return {"commit_s": round(commit_s, 3), "idle": summary(quiet), "during_commit": summary(during),
                "max_send_latency_vs_commit": round(max(during) / commit_s, 3)}
    finally:
        loader.close()
        sender.close()


def main() -> None:
    args, rows = parse_size_args(200_000, 1_000_000, repeat=1)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "broker", flush="async") as broker:
        from txmq.broker.client import NativeClient

        admin = NativeClient(broker.endpoint)
        admin.create_topic("batch-out", 4)
        admin.create_topic("other", 4)
        admin.close()
        for _ in range(args.repeat):
            rounds.append(one_round(broker, rows))
    worst = max(rounds, key=lambda r: r["max_send_latency_vs_commit"])
    emit("commit_stall", {
        "rows": rows, "body_bytes": len(BODY), "rounds": rounds,
        "ratios": {"max_send_latency_vs_commit": worst["max_send_latency_vs_commit"],
                   "p99_during_commit_vs_idle": round(worst["during_commit"]["p99_ms"] / worst["idle"]["p99_ms"], 2)},
    })


if __name__ == "__main__":
    main()
