"""The Spark sink over a cluster of 2 groups (its batch transaction spanning both) against 1
group (issue #27), in rows/s.

Two clusters on this host, each around its own etcd: one group, and two groups, every group
one replica (`--replication async`). Each gets a 4-queue topic (spread over its groups).
`df.write.format("txmq")` writes N rows of 1 KiB from 4 partitions in one local[2]
SparkSession, the two clusters taking turns, best of --repeat. Over two groups each task
writes its halves to one group, and the commit records the decision (with the tasks'
senders) at the transaction's coordinator group before both groups apply it. The groups
share this machine's 2 cores with Spark, so the ratio shows the cost of the transaction
across groups, not the scale-out that groups on hosts of their own give.

    .venv/bin/python bench/cluster_spark_sink.py [--rows 400000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

from cluster_spark_source import clusters  # noqa: I001
from spark_common import spark_session  # noqa: I001
from spark_sink import interleaved_best_rates, rows_df  # noqa: I001

from txmq.broker.client.cluster_client import ClusterClient

QUEUES = 4


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="txmq-cluster-sink-") as tmp, \
            clusters(Path(tmp), {"1 group": ("one", 1), "2 groups": ("two", 2)}) as endpoints:
        for ep in endpoints.values():
            with ClusterClient(ep, timeout_s=60) as client:
                client.create_topic("bench-sink", QUEUES)
        spark = spark_session({"spark.ui.showConsoleProgress": "false"})
        df = rows_df(spark, args.rows).cache()
        df.count()

        def writer(ep: str):
            return lambda: df.write.format("txmq").option("broker", ep).option("topic", "bench-sink") \
                .mode("append").save()

        rates, _ = interleaved_best_rates({name: writer(ep) for name, ep in endpoints.items()}, args.rows,
                                          args.repeat)
        groups_written = {}
        for name, ep in endpoints.items():
            with ClusterClient(ep, timeout_s=60) as client:
                cut = client.snapshot_offsets(["bench-sink"])["bench-sink"]
            groups_written[name] = Counter({g: 0 for g, _ in cut})
            for (g, _), end in cut.items():
                groups_written[name][g] += end
            assert sum(groups_written[name].values()) == args.rows * args.repeat, f"{name}: rows lost or doubled"
        spark.stop()
    print(f"{'cluster':>9} {'rows/s':>10}  rows per group")
    for name, r in rates.items():
        print(f"{name:>9} {r:>10,.0f}  {dict(groups_written[name])}")
    print(f"2 groups / 1 group: {rates['2 groups'] / rates['1 group']:.3f}  ({args.rows:,} rows of 1 KiB, "
          f"{QUEUES} queues, 4 partitions, local[2], every group and Spark on this host's cores)")


if __name__ == "__main__":
    main()
