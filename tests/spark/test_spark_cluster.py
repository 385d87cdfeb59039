"""A Spark pipeline (txmq source → txmq sink) on a three-replica broker group stays exactly-once
while the group's leader is killed under it."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from tests.spark.support import topic_bodies
from txmq.broker import errors
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message

# Spark pipelines over groups through a leader kill: make test-faults, not the default suite
pytestmark = [pytest.mark.spark, pytest.mark.faults]


def run_until_caught_up(spark, options: dict, src: str, dst: str, checkpoint: str, expected: int,
                        client, timeout_s: float = 240) -> int:
    """Run the pipeline (Trigger.AvailableNow) again and again, as a scheduler would after a failed
    run, until the sink topic holds `expected` rows; returns how many runs failed."""
    failed = 0
    deadline = time.monotonic() + timeout_s
    while True:
        df = (spark.readStream.format("txmq").options(**options, topic=src, startingOffsets="earliest",
                                                      maxOffsetsPerTrigger="40").load().select("body"))
        query = (df.writeStream.format("txmq").options(**options, topic=dst)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            query.awaitTermination(120)
        except Exception:  # noqa: BLE001 - a run that failed during the failover: run again
            pass
        finally:
            if query.isActive:
                query.stop()
        if query.exception() is not None:
            failed += 1

        try:
            if len(topic_bodies(client, dst)) >= expected:
                return failed
        except errors.TxmqError:
            pass  # the group is electing: look again after the next run
        assert time.monotonic() < deadline, f"the pipeline did not catch up: {len(topic_bodies(client, dst))}"
        time.sleep(0.5)


@pytest.mark.slow  # ~20 s; the two-group pipeline below kills a three-replica group's leader too
def test_a_pipeline_stays_exactly_once_across_a_leader_kill(spark, group_factory, tmp_path):
    group = group_factory(args=["--replication", "sync"])
    options = {"broker": group.endpoints}
    bodies = [b"e%d" % i for i in range(600)]
    with NativeClient(group.endpoints, timeout_s=30) as client:
        client.create_topic("events", 4)
        client.create_topic("copies", 4)
        sent: list[bytes] = []

        def produce():
            for body in bodies:
                while True:
                    try:
                        client.send([Message("events", body)], return_message_ids=False)
                        sent.append(body)
                        break
                    except errors.TxmqError:
                        time.sleep(0.05)  # a write the group may not hold: nothing was acknowledged
                time.sleep(0.002)

        producer = threading.Thread(target=produce)
        producer.start()
        while len(sent) < 200:
            time.sleep(0.05)
        killer = threading.Thread(target=lambda: (time.sleep(3), group.leader_replica().kill()))
        killer.start()
        checkpoint = str(tmp_path / "checkpoint")
        run_until_caught_up(spark, options, "events", "copies", checkpoint, 150, client)
        killer.join()
        producer.join(120)
        source = Counter(topic_bodies(client, "events"))
        run_until_caught_up(spark, options, "events", "copies", checkpoint, sum(source.values()), client)
        copies = Counter(topic_bodies(client, "copies"))
    assert all(source[b] >= 1 for b in sent), "an acknowledged source write was lost"
    assert copies == source, "the sink wrote a row twice or lost one across the failover"


def test_a_pipeline_over_two_groups_reads_every_group_and_stays_exactly_once_across_a_leader_kill(
        spark, group_factory, tmp_path):
    from txmq.broker.client.cluster_client import ClusterClient

    # a lone replica and a group of three, whose leader dies mid-run
    groups = [group_factory("sg1", replicas=1, args=["--replication", "async"]),
              group_factory("sg2", replicas=3, args=["--replication", "sync"])]
    endpoints = ";".join(g.endpoints for g in groups)
    options = {"broker": endpoints}
    bodies = [b"c%d" % i for i in range(400)]
    with ClusterClient(endpoints, timeout_s=30) as client:
        client.create_topic("cevents", 4)
        client.create_topic("ccopies", 4)
        sent: list[bytes] = []

        def produce():
            for body in bodies:
                while True:
                    try:
                        client.send([Message("cevents", body)], topic="cevents")
                        sent.append(body)
                        break
                    except errors.TxmqError:
                        time.sleep(0.05)
                time.sleep(0.002)

        producer = threading.Thread(target=produce)
        producer.start()
        while len(sent) < 150:
            time.sleep(0.05)
        killer = threading.Thread(target=lambda: (time.sleep(3), groups[1].leader_replica().kill()))
        killer.start()
        checkpoint = str(tmp_path / "checkpoint")

        def caught_up(expected: int) -> None:
            run_until_caught_up(spark, options, "cevents", "ccopies", checkpoint, expected, client)

        caught_up(100)
        killer.join()
        producer.join(120)
        source = Counter(topic_bodies(client, "cevents"))
        caught_up(sum(source.values()))
        copies = Counter(topic_bodies(client, "ccopies"))
        seen_groups = {r["group"] for r in spark.read.format("txmq").options(**options, topic="cevents").load()
                       .select("group").distinct().collect()}
        written_groups = {r["group"] for r in spark.read.format("txmq").options(**options, topic="ccopies").load()
                          .select("group").distinct().collect()}
    assert all(source[b] >= 1 for b in sent), "an acknowledged source write was lost"
    assert copies == source, "the sink wrote a row twice or lost one across the failover"
    assert seen_groups == {"sg1", "sg2"}
    assert written_groups == {"sg1", "sg2"}, "each batch's transaction spans both groups"


def test_each_transaction_across_groups_falls_whole_into_one_micro_batch(spark, group_factory, tmp_path):
    """Both groups apply each transaction, the second 0.2 s after the first: the source's
    micro-batches still end at cluster-wide consistent cuts, so no batch holds half of one."""
    from txmq.broker.client.cluster_client import ClusterClient
    from txmq.broker.client.cross_group import CrossGroupTransaction

    slow_checks = ["--replication", "async", "--transaction-timeout", "120s", "--check-interval", "60s"]
    groups = [group_factory(name, replicas=1, args=slow_checks) for name in ("xg1", "xg2")]
    endpoints = ";".join(g.endpoints for g in groups)
    transactions = 12
    batches: list[tuple[int, list[bytes]]] = []
    with ClusterClient(endpoints, timeout_s=30) as client:
        client.create_topic("xevents", 4)

        def write() -> None:
            for i in range(transactions):
                tx = CrossGroupTransaction({g.name: client.group(g.name) for g in groups}, producer_group="x")
                for g in groups:
                    tx.prepare(g.name, [Message("xevents", b"x%d-%s-%d" % (i, g.name.encode(), k)) for k in range(2)])
                first, second = (groups if i % 2 else groups[::-1])
                tx.decide("COMMIT")
                tx.end_on(first.name, "COMMIT")
                client.group(first.name).send([Message("xevents", b"plain-%d" % i)], topic="xevents")
                time.sleep(0.2)
                tx.end_on(second.name, "COMMIT")

        def collect(df, batch_id: int) -> None:
            batches.append((batch_id, [r["body"] for r in df.select("body").collect()]))

        query = (spark.readStream.format("txmq").options(broker=endpoints, topic="xevents",
                                                         startingOffsets="earliest", pollIntervalMs="50").load()
                 .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(processingTime="50 milliseconds").start())
        try:
            deadline = time.monotonic() + 60
            while query.lastProgress is None:  # the query runs: the writes come while it reads
                assert time.monotonic() < deadline, "the query made no progress"
                time.sleep(0.1)
            writer = threading.Thread(target=write)
            writer.start()
            writer.join(120)
            deadline = time.monotonic() + 60
            while sum(1 for _, rows in batches for b in rows if b.startswith(b"x")) < transactions * 4:
                assert time.monotonic() < deadline, f"not every message was read: {batches}"
                time.sleep(0.2)
        finally:
            query.stop()
    where: dict[int, set[int]] = {}
    for batch_id, rows in batches:
        for body in rows:
            if body.startswith(b"x"):
                where.setdefault(int(body.split(b"-")[0][1:]), set()).add(batch_id)
    assert len([b for _, rows in batches for b in rows if b.startswith(b"x")]) == transactions * 4, "read twice"
    assert all(len(ids) == 1 for ids in where.values()), f"a transaction was split over batches: {where}"
    assert len({batch_id for batch_id, rows in batches if rows}) > 1, "the transactions all fell in one batch"
