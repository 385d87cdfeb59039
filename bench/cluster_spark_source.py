"""The Spark source over a cluster of 3 groups against 1 group (issue #27), in rows/s.

Two clusters on this host, each around its own etcd: one group, and three groups, every
group one replica (`--replication async`). Each gets a 6-queue topic (spread over its
groups) loaded with the same N committed 1 KiB messages in transactions of 10,000, which
land in the group their id hashes to. Then `SELECT count(*), sum(length(body))` in one
local[2] SparkSession reads each topic through `format("txmq")` with every replica as the
broker list, the two queries taking turns, best of --repeat rounds. The groups share this
machine's 2 cores with Spark, so the ratio shows the cost of the cluster's routing and
per-group cuts, not the scale-out a cluster of hosts gives.

    .venv/bin/python bench/cluster_spark_source.py [--rows 600000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from spark_common import spark_session  # noqa: I001
from spark_source import count_and_sum, interleaved_best_rates  # noqa: I001

from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

BODY = b"x" * 1024
TX_ROWS = 10_000
QUEUES = 6


def start_cluster(root: Path, name: str, n_groups: int) -> tuple[EtcdProcess, list[LocalGroup]]:
    etcd = EtcdProcess(root / f"etcd-{name}").start()
    groups = [LocalGroup(root, etcd, f"{name}{i}", replicas=1, args=["--replication", "async"]).start()
              for i in range(n_groups)]
    return etcd, groups


@contextmanager
def clusters(root: Path, sizes: dict[str, tuple[str, int]]) -> Iterator[dict[str, str]]:
    """Clusters by label, each (name prefix, groups) around its own etcd: yields each one's
    endpoints (every replica), and stops them all."""
    started: list[tuple[EtcdProcess, list[LocalGroup]]] = []
    try:
        endpoints = {}
        for label, (name, n_groups) in sizes.items():
            started.append(start_cluster(root, name, n_groups))
            endpoints[label] = ";".join(g.endpoints for g in started[-1][1])
        yield endpoints
    finally:
        for etcd, groups in started:
            for g in groups:
                g.stop()
            etcd.kill()


def load(endpoints: str, topic: str, rows: int) -> None:
    bodies = pa.array([BODY] * TX_ROWS, pa.binary())
    with ClusterClient(endpoints, timeout_s=60) as client:
        client.create_topic(topic, QUEUES)
        sent = 0
        while sent < rows:
            n = min(TX_ROWS, rows - sent)
            tx = f"bench-{uuid.uuid4().hex}"
            client.prepare_stream(tx, [pa.RecordBatch.from_arrays([bodies.slice(0, n)], names=["body"])],
                                  topic=topic, producer_group="bench", sender="loader")
            client.end_transaction(tx, "COMMIT", producer_group="bench")
            sent += n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=600_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="txmq-cluster-spark-") as tmp, \
            clusters(Path(tmp), {"1 group": ("one", 1), "3 groups": ("three", 3)}) as endpoints:
        for ep in endpoints.values():
            load(ep, "bench-spread", args.rows)
        spark = spark_session({"spark.ui.showConsoleProgress": "false"})
        frames = {name: spark.read.format("txmq").option("broker", ep).option("topic", "bench-spread").load()
                  for name, ep in endpoints.items()}
        for name, df in frames.items():
            n, _ = count_and_sum(df)
            assert n == args.rows, f"{name}: read {n} rows of {args.rows}"
        rates = interleaved_best_rates(frames, args.rows, args.repeat)
        spark.stop()
    one, three = rates["1 group"], rates["3 groups"]
    print(f"{'cluster':>9} {'rows/s':>10}")
    for name, r in rates.items():
        print(f"{name:>9} {r:>10,.0f}")
    print(f"3 groups / 1 group: {three / one:.3f}  ({args.rows:,} rows of 1 KiB, 6 queues, local[2], "
          f"every group and Spark on this host's cores)")


if __name__ == "__main__":
    main()
