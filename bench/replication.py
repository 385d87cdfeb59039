"""A three-replica group with sync replication against a single broker with --flush sync.

Same run, same host, same client code: 1 KiB sends in batches of 100 and 100-message
transactions (prepare + COMMIT), each from a few concurrent client threads; then the
failover time, from a kill -9 of the leader to the first acknowledged write on the new
leader, over several rounds (p50, p99). Prints the group's throughput as a ratio of the
single broker's (issue #31's bar: >= 0.5; failover p99 <= 5 s), and the CPU the server
processes spent per message (the group's: its replicas and etcd), which a shared host's
noise moves less than throughput.

    .venv/bin/python bench/replication.py [--seconds 5] [--threads 4] [--rounds 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup
from txmq.broker.embedded import EmbeddedBroker
from txmq.broker.ports import free_port

BODY = b"x" * 1024
BATCH = 100


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU the processes used so far (Linux /proc)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def drive(threads: int, seconds: float, pids: list[int], step) -> tuple[float, float]:
    """Call `step(i)` (messages it got through) on `threads` threads for `seconds`: (messages per
    second, CPU microseconds the server processes `pids` spent per message)."""
    done = [0] * threads
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        while time.monotonic() < stop:
            done[i] += step(i)

    t0 = time.monotonic()
    cpu0 = cpu_seconds(pids)
    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(done) / (time.monotonic() - t0), (cpu_seconds(pids) - cpu0) * 1e6 / max(1, sum(done))


def rate(endpoints: str, seconds: float, threads: int, work, pids: list[int]) -> tuple[float, float]:
    """`drive` with a client per thread, each doing `work(client, n)` for n = 1, 2, ..."""
    clients = [NativeClient(endpoints, timeout_s=30) for _ in range(threads)]
    calls = [0] * threads
    try:
        for client in clients:
            work(client, 0)  # warm: topic creation, channels, the Flight location

        def step(i: int) -> int:
            calls[i] += 1
            return work(clients[i], calls[i])

        return drive(threads, seconds, pids, step)
    finally:
        for client in clients:
            client.close()


def sends(client: NativeClient, n: int) -> int:
    client.send([Message("bench-sends", BODY)] * BATCH, return_message_ids=False)
    return BATCH


def transactions(client: NativeClient, n: int) -> int:
    tx = client.prepare("", [Message("bench-tx", BODY)] * BATCH, return_message_ids=False).transaction_id
    client.end_transaction(tx, "COMMIT")
    return BATCH


def failover_times(group: LocalGroup, rounds: int) -> list[float]:
    """Seconds from a leader's kill -9 to the first write acknowledged after it."""
    times = []
    with NativeClient(group.endpoints, timeout_s=30) as client:
        for _ in range(rounds):
            group.wait_in_sync(len(group.replicas))
            old = group.wait_leader()
            client.send([Message("bench-failover", b"before")])
            victim = group.replica(old.endpoint)
            t0 = time.monotonic()
            victim.kill()
            while True:
                try:
                    client.send([Message("bench-failover", b"after")])
                    break
                except Exception:  # noqa: BLE001 - refused while the group elects
                    time.sleep(0.02)
            times.append(time.monotonic() - t0)
            victim.restart()
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--repeat", type=int, default=1,
                   help="measure each workload this many times, single broker and group alternating (a shared "
                        "host's noise hits both alike); prints each pair and the median ratio")
    p.add_argument("--skip-throughput", action="store_true", help="measure the failover time only")
    p.add_argument("--replica-flush", choices=("async", "sync"), default="sync",
                   help="the replicas' own --flush (default sync: the same disk guarantee as the single broker)")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="txmq-bench-repl-"))
    etcd = EtcdProcess(root / "etcd").start()
    single = EmbeddedBroker(root / "single", flush="sync")
    single.port = free_port()
    group = LocalGroup(root, etcd, "bench", flush=args.replica_flush, args=["--replication", "sync", "--min-insync", "1",
                                                                            "--log-level", "WARNING"])
    try:
        single.start()
        group.start()
        leader = group.wait_leader().endpoint
        # the client is given the leader first, as a client that found it through a route would
        endpoints = ";".join([leader] + [r.endpoint for r in group.replicas if r.endpoint != leader])
        results = {}
        workloads = (("1 KiB sends, batches of 100", sends), ("100-message transactions", transactions))
        for name, work in () if args.skip_throughput else workloads:
            ratios = []
            for _ in range(args.repeat):
                one, one_cpu = rate(single.endpoint, args.seconds, args.threads, work, [single.proc.pid])
                three, three_cpu = rate(endpoints, args.seconds, args.threads, work,
                                        [r.proc.pid for r in group.replicas] + [etcd.proc.pid])
                ratios.append(three / one)
                print(f"{name:32s} single broker (--flush sync) {one:10.0f} msg/s   3 replicas (sync) {three:10.0f} "
                      f"msg/s   ratio {three / one:.3f}   server CPU/msg {one_cpu:.0f} us vs {three_cpu:.0f} us",
                      flush=True)
            results[name] = statistics.median(ratios)
            if args.repeat > 1:
                print(f"{name:32s} median ratio over {args.repeat} runs: {results[name]:.3f}", flush=True)
        times = failover_times(group, args.rounds)
        if times:
            print(f"failover (kill -9 of the leader to the first acknowledged write), {len(times)} rounds: "
                  f"p50 {statistics.median(times):.2f} s, p99 {pct(times, 0.99):.2f} s, max {max(times):.2f} s "
                  f"({' '.join(f'{t:.2f}' for t in times)})", flush=True)
    finally:
        group.stop()
        single.stop()
        etcd.kill()
        shutil.rmtree(root, ignore_errors=True)  # preallocated segments: a few runs would fill /tmp
    return 0


if __name__ == "__main__":
    sys.exit(main())
