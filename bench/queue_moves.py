"""Producers' and consumers' latency while queues move between groups and while a moved queue's
history is copied, against without; and the copy's throughput against its byte rate (issue #40).

Two groups of one replica (`--replication async`, `--flush async`) around one etcd on this host; a
topic of 4 queues, 2 on each. `--producers` ClusterClients send one 1 KiB message per call (each
send's latency is recorded) and one consumer reads cluster-wide consistent cuts in a loop (each
message's latency is from its send to the read that returns it). The same run measures three
windows: without moves (`--seconds`); with the topic's queues moving back and forth between the
groups one after another, keeping their history where it lies (`--seconds`; each move a seal,
its acknowledgement and two compare-and-swaps); and while another topic's queue, holding
`--history-mb` MiB of 1 KiB messages on group a, moves to b and its history is copied at
`--rate` bytes per second (the window lasts the copy). Then the same history size is copied
unthrottled (`rate 0`) with the load still running, for the copier's own ceiling. Ratios are
against the window without moves.

    .venv/bin/python bench/queue_moves.py [--seconds 10] [--producers 2] [--history-mb 32] [--rate 8MiB]
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
HISTORY = "bench-history"  # its queues on group a hold the history the copies take
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


def fill_history(group: LocalGroup, mib: int) -> None:
    """About `mib` MiB of 1 KiB messages into `group`'s queues of HISTORY (the group spreads them)."""
    with NativeClient(group.endpoints) as c:
        for start in range(0, mib * 1024, 500):
            c.send([Message(HISTORY, PAD + b"histpad!") for _ in range(min(500, mib * 1024 - start))], topic=HISTORY)


def copy_record(etcd_port: int, queue: tuple[str, int]) -> dict:
    from txmq.broker.cluster.coordination import cluster_status
    name = f"{queue[0]}:{queue[1]}"
    return next((c for c in cluster_status([("127.0.0.1", etcd_port)])["copies"] if c["queue"] == name), {})


def run(seconds: float, producers: int, root: Path, history_mib: int, rate: int
        ) -> tuple[list[Window], list[float], list[dict]]:
    etcd = EtcdProcess(root / "etcd").start()
    groups = [LocalGroup(root, etcd, name, replicas=1, args=["--replication", "async"]).start() for name in ("a", "b")]
    windows = [Window(), Window(), Window()]
    copies: list[dict] = []
    current = [windows[0]]
    stop = threading.Event()
    move_seconds: list[float] = []
    try:
        bootstrap = groups[0].endpoints
        with ClusterClient(bootstrap) as admin:
            admin.create_topic(TOPIC, 4)
            queues = [q.key for q in admin.queues(TOPIC)]
            admin.create_topic(HISTORY, 4)
            history = [q.key for q in admin.queues(HISTORY) if q.group == "a"]
        fill_history(groups[0], 2 * history_mib)  # group a holds 2 of its 4 queues

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
                mover.move_queues(topic=TOPIC, queue=f"{queue[0]}:{queue[1]}", to=to, keep_history=True)
                move_seconds.append(time.perf_counter() - t0)
                i += 1
                time.sleep(0.2)
            current[0] = Window()  # the last moves' readers catch up (their routes refresh) outside any window
            time.sleep(3.0)
            current[0] = windows[2]  # the throttled copy, then (outside any window) the unthrottled one
            for queue, limit in ((history[0], rate), (history[1], 0)):
                mover.move_queues(topic=HISTORY, queue=f"{queue[0]}:{queue[1]}", to="b", rate=limit,
                                  copy_wait_s=3600)
                copies.append(copy_record(etcd.client_port, queue))
                current[0] = Window()
        stop.set()
        for t in threads:
            t.join(30)
        return windows, move_seconds, copies
    finally:
        stop.set()
        for g in groups:
            g.stop()
        etcd.kill()


def main(argv: list[str] | None = None) -> int:
    from txmq.broker.cli import _rate

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--history-mb", type=int, default=32, help="MiB of history each copied queue holds")
    p.add_argument("--rate", default="8MiB", help="the throttled copy's byte rate")
    args = p.parse_args(argv)
    rate = _rate(args.rate)
    with tempfile.TemporaryDirectory(prefix="txmq-moves-bench-") as tmp:
        (without, moving, copying), moves, copies = run(args.seconds, args.producers, Path(tmp), args.history_mb,
                                                        rate)
    print(f"{'':>22} {'without':>10} {'moving':>10} {'ratio':>6} {'copying':>10} {'ratio':>6}")
    for label, a, b, c in (("sends", without.send, moving.send, copying.send),
                           ("reads (send to read)", without.read, moving.read, copying.read)):
        for p_ in (50, 99):
            x, y, z = percentile(a, p_), percentile(b, p_), percentile(c, p_)
            print(f"{label + f' p{p_} ms':>22} {x:>10.2f} {y:>10.2f} {y / x:>6.2f} {z:>10.2f} {z / x:>6.2f}")
        print(f"{label + ' count':>22} {len(a):>10} {len(b):>10} {len(b) / max(1, len(a)):>6.2f} {len(c):>10}")
    print(f"{'sends refused':>22} {without.refused:>10} {moving.refused:>10} {'':>6} {copying.refused:>10}")
    print(f"# {len(moves)} moves keeping their history in {args.seconds:.0f} s, each "
          f"{percentile([m * 1000 for m in moves], 50):.0f} ms (p50), {max(moves, default=0) * 1000:.0f} ms (max); "
          f"{args.producers} producers sending 1 KiB one at a time; {os.cpu_count()} cores shared by both groups, "
          f"etcd and the clients")
    for c, limit in zip(copies, (rate, 0)):
        mib_s = c.get("bytes_per_s", 0) / (1 << 20)
        against = f"{c.get('bytes_per_s', 0) / limit:.2f} of the limit" if limit else "unthrottled"
        print(f"# copy of {c.get('copied', 0)} messages, {c.get('bytes', 0) / (1 << 20):.1f} MiB in "
              f"{c.get('seconds', 0):.1f} s: {mib_s:.2f} MiB/s at limit "
              f"{(f'{limit / (1 << 20):.2f} MiB/s' if limit else 'none')} ({against})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
