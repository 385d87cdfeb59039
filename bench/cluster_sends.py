"""Aggregate sends over a cluster of 1, 2 and 3 broker groups (issue #27).

Each group is one replica (`--replication async`, `--flush async`) around one etcd, all on
this host. A topic of 6 queues is spread over the groups, and `--threads` ClusterClients send
1 KiB messages in batches of 100 through one bootstrap endpoint for `--seconds`. The groups
share this machine's cores, so besides msg/s the report gives messages per busy broker core
(CPU seconds of the broker processes, from /proc), and both as ratios to one group in the
same run.

    .venv/bin/python bench/cluster_sends.py [--seconds 5] [--threads 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

BODY = b"x" * 1024
BATCH = 100
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of `pids` so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def run(n_groups: int, seconds: float, threads: int, root: Path) -> tuple[float, float]:
    """(msg/s, messages per broker CPU second) for `n_groups` groups."""
    etcd = EtcdProcess(root / f"etcd-{n_groups}").start()
    groups = [LocalGroup(root, etcd, f"n{n_groups}g{i}", replicas=1, args=["--replication", "async"]).start()
              for i in range(n_groups)]
    try:
        with ClusterClient(groups[0].endpoints) as admin:
            admin.create_topic("bench-cluster", 6)
        pids = [r.proc.pid for g in groups for r in g.replicas]
        done = [0] * threads
        ready = threading.Barrier(threads + 1)
        stop = [0.0]

        def work(i: int) -> None:
            with ClusterClient(groups[0].endpoints, timeout_s=30) as client:
                for _ in range(2 * n_groups):  # warm every group's channel and Flight location
                    client.send([Message("bench-cluster", BODY)] * BATCH, topic="bench-cluster")
                ready.wait()
                while time.monotonic() < stop[0]:
                    client.send([Message("bench-cluster", BODY)] * BATCH, topic="bench-cluster")
                    done[i] += BATCH

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        stop[0] = time.monotonic() + 1e9
        ready.wait()
        cpu0, t0 = cpu_seconds(pids), time.monotonic()
        stop[0] = t0 + seconds
        for w in workers:
            w.join()
        elapsed, cpu = time.monotonic() - t0, cpu_seconds(pids) - cpu0
        total = sum(done)
        return total / elapsed, total / max(cpu, 1e-9)
    finally:
        for g in groups:
            g.stop()
        etcd.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--groups", type=int, nargs="+", default=[1, 2, 3])
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="txmq-cluster-bench-") as tmp:
        results = {n: run(n, args.seconds, args.threads, Path(tmp)) for n in args.groups}
    base_rate, base_per_core = results[args.groups[0]]
    print(f"{'groups':>6} {'msg/s':>10} {'ratio':>6} {'msg/core-s':>11} {'ratio':>6}")
    for n, (r, per_core) in results.items():
        print(f"{n:>6} {r:>10,.0f} {r / base_rate:>6.2f} {per_core:>11,.0f} {per_core / base_per_core:>6.2f}")
    print(f"# 1 KiB sends, batches of {BATCH}, {args.threads} client threads, {os.cpu_count()} cores shared by "
          f"every group, etcd and the clients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
