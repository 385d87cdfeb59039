"""Producers' and consumers' latency while queues move between groups, against without (issue #40).

Two groups of one replica (`--replication async`, `--flush async`) around one etcd on this host; a
topic of 4 queues, 2 on each. `--producers` ClusterClients send one 1 KiB message per call (each
send's latency is recorded) and one consumer reads cluster-wide consistent cuts in a loop (each
message's latency is from its send to the read that returns it). The same run measures two
windows of `--seconds`: without moves, then with the topic's queues moving back and forth
between the groups one after another (each move a seal, its acknowledgement and two
compare-and-swaps; nothing is copied). Ratios are moving / without.

    .venv/bin/python bench/queue_moves.py [--seconds 10] [--producers 2]
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from txmq.broker import errors
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

TOPIC = "bench-moves"
PAD = b"x" * (1024 - 8)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Window:
    """Latencies (ms) recorded while `active`, for one window."""

    def __init__(self) -> None:
        self.send: list[float] = []
        self.read: list[float] = []
        self.refused = 0  # sends that failed (a sealed queue, retried by the client's caller)


def run(seconds: float, producers: int, root: Path) -> tuple[Window, Window, list[float]]:
    etcd = EtcdProcess(root / "etcd").start()
    groups = [LocalGroup(root, etcd, name, replicas=1, args=["--replication", "async"]).start() for name in ("a", "b")]
    windows = [Window(), Window()]
    current = [windows[0]]
    stop = threading.Event()
    move_seconds: list[float] = []
    try:
        bootstrap = groups[0].endpoints
        with ClusterClient(bootstrap) as admin:
            admin.create_topic(TOPIC, 4)
            queues = [q.key for q in admin.queues(TOPIC)]

        def produce() -> None:
            with ClusterClient(bootstrap, timeout_s=30) as client:
                while not stop.is_set():
                    w = current[0]
                    body = struct.pack(">d", time.time()) + PAD
                    t0 = time.perf_counter()
                    try:
                        client.send([Message(TOPIC, body)], topic=TOPIC)
                    except errors.TxmqError:
                        w.refused += 1
                        continue
                    w.send.append((time.perf_counter() - t0) * 1000)

        def consume() -> None:
            with ClusterClient(bootstrap, timeout_s=30) as client:
                position = client.snapshot_offsets([TOPIC])[TOPIC]
                while not stop.is_set():
                    cut = client.consistent_cut([TOPIC], {TOPIC: position})[TOPIC]
                    for queue, end in cut.items():
                        begin = position.get(queue, 0)
                        if end <= begin:
                            continue
                        for r in client.read_queue(TOPIC, queue, begin, end):
                            now = time.time()
                            w = current[0]
                            w.read.extend((now - struct.unpack_from(">d", body)[0]) * 1000
                                          for body in r.batch.column("body").to_pylist())
                        position[queue] = end
                    time.sleep(0.005)

        threads = [threading.Thread(target=produce, daemon=True) for _ in range(producers)]
        threads.append(threading.Thread(target=consume, daemon=True))
        for t in threads:
            t.start()
        time.sleep(1.0)  # warm up: channels, Flight locations
        windows[0] = Window()
        current[0] = windows[0]
        time.sleep(seconds)
        current[0] = windows[1]
        deadline = time.monotonic() + seconds
        with NativeClient(groups[1].endpoints) as mover:
            i = 0
            while time.monotonic() < deadline:
                queue = queues[i % len(queues)]
                with ClusterClient(bootstrap) as look:
                    now_on = next(q.current.group for q in look.queues(TOPIC) if q.key == queue)
                to = "b" if now_on == "a" else "a"
                t0 = time.perf_counter()
                mover.move_queues(topic=TOPIC, queue=f"{queue[0]}:{queue[1]}", to=to)
                move_seconds.append(time.perf_counter() - t0)
                i += 1
                time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(30)
        return windows[0], windows[1], move_seconds
    finally:
        stop.set()
        for g in groups:
            g.stop()
        etcd.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--producers", type=int, default=2)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="txmq-moves-bench-") as tmp:
        without, moving, moves = run(args.seconds, args.producers, Path(tmp))
    print(f"{'':>22} {'without':>10} {'moving':>10} {'ratio':>6}")
    for label, a, b in (("sends", without.send, moving.send), ("reads (send to read)", without.read, moving.read)):
        for p_ in (50, 99):
            x, y = percentile(a, p_), percentile(b, p_)
            print(f"{label + f' p{p_} ms':>22} {x:>10.2f} {y:>10.2f} {y / x:>6.2f}")
        print(f"{label + ' count':>22} {len(a):>10} {len(b):>10} {len(b) / max(1, len(a)):>6.2f}")
    print(f"{'sends refused':>22} {without.refused:>10} {moving.refused:>10}")
    print(f"# {len(moves)} moves in {args.seconds:.0f} s, each {percentile([m * 1000 for m in moves], 50):.0f} ms "
          f"(p50), {max(moves, default=0) * 1000:.0f} ms (max); {args.producers} producers sending 1 KiB one "
          f"at a time; {os.cpu_count()} cores shared by both groups, etcd and the clients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
