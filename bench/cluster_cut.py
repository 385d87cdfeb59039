"""The cost of a cluster-wide consistent cut over a range full of cross-group transactions,
against reading that range (issue #27).

Two groups of one replica around their own etcd; a 4-queue topic spread over them is loaded
with N 1 KiB rows in transactions of 1,000 rows, each across both groups. Then, taking
turns, best of --repeat: the cut from the start to the groups' snapshots
(`ClusterClient.consistent_cut`: each group scans its range for cross-group records) and a
read of the same range over Flight (`read_queue`, every queue). The ratio is the cut's time
over the read's: what a Spark micro-batch over such a range pays on top of its read. A range
without cross-group transactions is not scanned at all (the same run prints that cut too).

    .venv/bin/python bench/cluster_cut.py [--rows 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.cross_group import CrossGroupTransaction
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

BODY = b"x" * 1024
TX_ROWS = 1_000


def load(client: ClusterClient, topic: str, rows: int, *, across: bool) -> None:
    names = sorted({q.group for q in client.queues(topic)})
    for _ in range(rows // TX_ROWS):
        if across:
            tx_id = uuid.uuid4().hex.upper()
            for name in names:
                client.group(name).prepare_stream(tx_id, [pa.table({"body": [BODY] * (TX_ROWS // len(names))})],
                                                  topic=topic, producer_group="bench", sender="s",
                                                  participants=names)
            CrossGroupTransaction({n: client.group(n) for n in names}, producer_group="bench",
                                  transaction_id=tx_id).commit()
        else:
            client.send_arrow(pa.table({"body": [BODY] * TX_ROWS}), topic=topic)


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="txmq-bench-cut-") as tmp:
        root = Path(tmp)
        etcd = EtcdProcess(root / "etcd").start()
        groups = [LocalGroup(root, etcd, f"k{i}", replicas=1, args=["--replication", "async"]).start()
                  for i in range(2)]
        try:
            with ClusterClient(";".join(g.endpoints for g in groups), timeout_s=60) as client:
                for topic, across in (("across", True), ("plain", False)):
                    client.create_topic(topic, 4)
                    load(client, topic, args.rows, across=across)
                results = {}
                for topic in ("across", "plain"):
                    start = {topic: {k: 0 for k in client.snapshot_offsets([topic])[topic]}}
                    snap = client.snapshot_offsets([topic])

                    def read(topic=topic, snap=snap) -> None:
                        for key, end in snap[topic].items():
                            for _ in client.read_queue(topic, key, 0, end):
                                pass

                    cut_s = read_s = float("inf")
                    for _ in range(args.repeat):
                        cut_s = min(cut_s, timed(lambda: client.consistent_cut([topic], start, snap)))
                        read_s = min(read_s, timed(read))
                    assert client.consistent_cut([topic], start, snap) == snap, "every transaction is whole"
                    results[topic] = (cut_s, read_s)
        finally:
            for g in groups:
                g.stop()
            etcd.kill()
    print(f"  {'range':<28}{'cut s':>8}{'read s':>8}{'cut/read':>10}")
    for topic, label in (("across", "cross-group transactions"), ("plain", "plain sends")):
        cut_s, read_s = results[topic]
        print(f"  {label:<28}{cut_s:>8.3f}{read_s:>8.3f}{cut_s / read_s:>10.3f}")
    print(f"({args.rows:,} rows of 1 KiB per range, 2 groups, 4 queues, best of {args.repeat}, this host)")


if __name__ == "__main__":
    main()
