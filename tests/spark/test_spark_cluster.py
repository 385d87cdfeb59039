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

pytestmark = pytest.mark.spark


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
    assert all(source[b] >= 1 for b in sent), "an acknowledged source write was lost"
    assert copies == source, "the sink wrote a row twice or lost one across the failover"
    assert seen_groups == {"sg1", "sg2"}
