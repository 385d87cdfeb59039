"""Cross-group transactions against single-group ones, on the same two broker groups, same run.

Two groups of one replica each (etcd-coordinated, `--replication async`, `--flush sync`).
A single-group transaction puts 100 x 1 KiB halves on one group (alternating between the
two) and commits: prepare + EndTransaction. A cross-group transaction puts 50 halves on
each group (prepared in parallel), commits on its coordinator group (which records the
decision first), then on the other group, which asks the coordinator before it commits. Both run from the same client threads, in alternating 1 s slices (so that
load from elsewhere on a shared host falls on both alike), for the same total time.
Prints messages per second of each and the ratio cross / single (issue #27's bar: >= 0.5).

    .venv/bin/python bench/cross_group_tx.py [--seconds 10] [--threads 4] [--rounds 1]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from txmq.broker.client.cross_group import CrossGroupTransaction
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

BODY = b"x" * 1024
MESSAGES = 100
GROUPS = ("bench-a", "bench-b")
SLICE_S = 1.0


def rate(thread_clients: list[dict[str, NativeClient]], seconds: float, work) -> tuple[float, list[float]]:
    """(messages per second, per-transaction latencies) that one thread per entry of
    `thread_clients` gets through `work(clients, n)` in `seconds`."""
    done = [0] * len(thread_clients)
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        n = i
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            done[i] += work(thread_clients[i], n)
            latencies.append(time.perf_counter() - t0)
            n += 1

    t0 = time.monotonic()
    workers = [threading.Thread(target=run, args=(i,)) for i in range(len(thread_clients))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(done) / (time.monotonic() - t0), latencies


def single_group(clients: dict[str, NativeClient], n: int) -> int:
    group = GROUPS[n % 2]
    tx = CrossGroupTransaction({group: clients[group]}, producer_group="bench")
    tx.prepare(group, [Message(f"tx-{group}", BODY)] * MESSAGES)
    tx.commit()
    return MESSAGES


def cross_group(clients: dict[str, NativeClient], n: int) -> int:
    tx = CrossGroupTransaction(clients, producer_group="bench")
    half = MESSAGES // len(GROUPS)
    tx.prepare_many({g: [Message(f"tx-{g}", BODY)] * half for g in GROUPS})
    result = tx.commit()
    assert not result.unsettled, result.unsettled
    return MESSAGES


def p50(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0, help="per kind of transaction, in 1 s slices")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--rounds", type=int, default=1, help="alternate single/cross this many times")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="txmq-bench-xtx-"))
    etcd = EtcdProcess(root / "etcd").start()
    groups = [LocalGroup(root, etcd, name, replicas=1, flush="sync",
                         args=["--replication", "async", "--log-level", "WARNING"]) for name in GROUPS]
    try:
        for g in groups:
            g.start()
        thread_clients = [{g.name: NativeClient(g.endpoints, timeout_s=30) for g in groups}
                          for _ in range(args.threads)]
        for i, clients in enumerate(thread_clients):  # warm: topic creation, channels
            single_group(clients, i)
            cross_group(clients, i)
        for r in range(args.rounds):
            totals = {single_group: [0.0, []], cross_group: [0.0, []]}
            slices = max(1, int(round(args.seconds / SLICE_S)))
            for _ in range(slices):
                for work, total in totals.items():
                    got, lat = rate(thread_clients, args.seconds / slices, work)
                    total[0] += got / slices
                    total[1] += lat
            (one, one_lat), (cross, cross_lat) = totals[single_group], totals[cross_group]
            print(f"round {r + 1}: 100-message transactions, {args.threads} threads: "
                  f"single-group {one:8.0f} msg/s (p50 {p50(one_lat) * 1000:.1f} ms)   "
                  f"cross-group over 2 groups {cross:8.0f} msg/s (p50 {p50(cross_lat) * 1000:.1f} ms)   "
                  f"ratio {cross / one:.3f}", flush=True)
        for clients in thread_clients:
            for c in clients.values():
                c.close()
    finally:
        for g in groups:
            g.stop()
        etcd.kill()
        shutil.rmtree(root, ignore_errors=True)  # segments are preallocated: a few GB per run
    return 0


if __name__ == "__main__":
    sys.exit(main())
