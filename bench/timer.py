"""Timer (delay) message benchmark: scheduling throughput against plain sends, and delivery lateness.

    .venv/bin/python bench/timer.py [--quick] [--messages N]

One broker process (async flush), one native client sending Arrow batches of 1,000 messages
of 256 bytes over the Flight data plane, all in the same run:
(a) plain sends: N messages with one user property (the same path a message with
    properties takes), messages/s;
(b) scheduled sends: the same N messages with a delivery time (`deliver_at_ms`) 10 minutes
    ahead, so none falls due during the measurement, messages/s. Target: (b)/(a) >= 0.5.
(c) lateness under load: M messages (default N / 2) due at times spread evenly over a 10 s
    window, while the client keeps sending plain messages as fast as it can; after the window
    the broker is stopped and each delivered copy's store time is compared with its delivery
    time in the CommitLog itself. Target: p99 <= 1 s; never early (min >= 0).
Prints one JSON line and writes bench/results/timer.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results_io import emit  # noqa: E402
from txmq.broker.client import Message  # noqa: E402
from txmq.broker.client.batches import to_arrow_table  # noqa: E402
from txmq.broker.client.native_client import NativeClient  # noqa: E402
from txmq.broker.embedded import EmbeddedBroker  # noqa: E402

BODY = b"t" * 256
BATCH = 1000
WINDOW_S = 10.0


def tables(topic: str, n: int, deliver_at=None) -> list:
    out = []
    for first in range(0, n, BATCH):
        rows = [Message(topic=topic, body=BODY, properties={"k": "v"},
                        deliver_at_ms=None if deliver_at is None else deliver_at(first + i))
                for i in range(min(BATCH, n - first))]
        out.append(to_arrow_table(rows))
    return out


def rate(client: NativeClient, batches: list) -> float:
    started = time.perf_counter()
    for t in batches:
        client.send_arrow(t)
    return sum(t.num_rows for t in batches) / (time.perf_counter() - started)


def lateness(data_dir: Path, topic: str) -> np.ndarray:
    from txmq.broker.store import MessageStore, StoreConfig
    out = []
    with MessageStore(StoreConfig(data_dir=data_dir)) as store:
        for qid in store.queue_ids(topic):
            offset = 0
            while True:
                read = store.read_queue(topic, qid, offset, 10_000)
                out.extend(m.store_timestamp - int(m.properties["TIMER_DELIVER_MS"]) for m in read.messages)
                if not read.messages:
                    break
                offset = read.next_offset
    return np.array(out, dtype=np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--messages", type=int)
    args = ap.parse_args()
    n = args.messages or (20_000 if args.quick else 200_000)
    m = n // 2
    with tempfile.TemporaryDirectory(prefix="txmq-bench-timer-") as tmp:
        data = Path(tmp) / "data"
        broker = EmbeddedBroker(data, flush="async").start()
        try:
            with NativeClient(broker.endpoint) as client:
                rate(client, tables("warm", 5 * BATCH))  # first calls load code and open the data plane
                far = int(time.time() * 1000) + 600_000
                plain = tables("plain", n)
                scheduled = tables("sched", n, lambda i: far + i)
                plain_rate = rate(client, plain)
                scheduled_rate = rate(client, scheduled)
                plain_rate2 = rate(client, plain)  # plain again: the machine's drift in the same run
                start = int(time.time() * 1000) + 3000
                due = tables("due", m, lambda i: start + int(i * WINDOW_S * 1000 / m))
                for t in due:
                    client.send_arrow(t)
                stop = threading.Event()
                load_sent = [0]

                def load() -> None:
                    batch = tables("load", BATCH)[0]
                    while not stop.is_set():
                        client.send_arrow(batch)
                        load_sent[0] += BATCH

                loader = threading.Thread(target=load, daemon=True)
                loader.start()
                time.sleep(max(0.0, (start / 1000 + WINDOW_S + 3.0) - time.time()))
                stop.set()
                loader.join(30)
        finally:
            broker.stop()
        late = lateness(data, "due")
    result = {
        "messages": n,
        "plain_msgs_per_s": round(min(plain_rate, plain_rate2)),
        "plain_msgs_per_s_best": round(max(plain_rate, plain_rate2)),
        "scheduled_msgs_per_s": round(scheduled_rate),
        "ratio_scheduled_vs_plain": round(scheduled_rate / max(plain_rate, plain_rate2), 3),
        "target_ratio": 0.5,
        "due_messages": m,
        "delivered": int(len(late)),
        "load_msgs_sent_during_window": load_sent[0],
        "lateness_ms": {"min": int(late.min()) if len(late) else None,
                        "p50": float(np.percentile(late, 50)) if len(late) else None,
                        "p99": float(np.percentile(late, 99)) if len(late) else None,
                        "max": int(late.max()) if len(late) else None},
        "target_p99_ms": 1000,
    }
    emit("timer", result)


if __name__ == "__main__":
    main()
