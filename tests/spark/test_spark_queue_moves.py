"""A Spark streaming query reads across a queue's move between groups (docs/cluster.md, "Moving
queues"): its checkpoint stays valid, each acknowledged message is read once, in queue order."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.spark.support import start_sending, topic_bodies, two_groups_with_a_queue_to_move
from txmq.broker import errors
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.spark import faults

pytestmark = pytest.mark.spark


def copy_query(spark, endpoints: str, source: str, target: str, checkpoint):
    """A txmq -> txmq streaming query copying `source`'s bodies to `target`."""
    return (spark.readStream.format("txmq").options(broker=endpoints, topic=source, startingOffsets="earliest",
                                                    pollIntervalMs="50").load().select("body")
            .writeStream.format("txmq").options(broker=endpoints, topic=target)
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="200 milliseconds").start())


def wait_first_batch(query) -> None:
    deadline = time.monotonic() + 300  # Spark's start: minutes on a loaded host
    while not [p for p in query.recentProgress if p["numInputRows"]]:
        assert query.exception() is None and time.monotonic() < deadline, f"no batch: {query.exception()}"
        time.sleep(0.5)


@pytest.mark.slow  # ~1 min: two groups, a query stopped and restarted from its checkpoint across the move
def test_a_streaming_query_reads_across_a_queue_move_and_restarts_from_its_checkpoint(spark, group_factory, tmp_path):
    fast = ["--replication", "async", "--transaction-timeout", "2s", "--check-interval", "1s"]
    a, b = (group_factory(name, replicas=1, args=fast) for name in ("sa", "sb"))
    endpoints = f"{a.endpoints};{b.endpoints}"
    acked: list[bytes] = []
    stop = threading.Event()
    rows: list[tuple[str, int, int, bytes]] = []

    def produce() -> None:
        with ClusterClient(endpoints) as client:
            i = 0
            while not stop.is_set():
                bodies = [f"s-{i}-{k}".encode() for k in range(2)]
                try:
                    tx = client.prepare("", [Message("smove", x) for x in bodies], producer_group="sp")
                    client.end_transaction(tx.transaction_id, "COMMIT")
                    acked.extend(bodies)
                except errors.TxmqError:
                    time.sleep(0.05)
                i += 1
                time.sleep(0.05)

    def collect(df, batch_id: int) -> None:
        rows.extend((r["group"], r["queueId"], r["queueOffset"], r["body"]) for r in df.collect())

    def start():
        return (spark.readStream.format("txmq").options(broker=endpoints, topic="smove", startingOffsets="earliest",
                                                        pollIntervalMs="50").load()
                .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(processingTime="100 milliseconds").start())

    with ClusterClient(endpoints) as client:
        client.create_topic("smove", 4)
        moving = next(q.key for q in client.queues("smove") if q.group == "sa")
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    query = start()
    try:
        time.sleep(4)
        with NativeClient(b.endpoints) as admin:
            result = admin.move_queues(topic="smove", queue=f"{moving[0]}:{moving[1]}", to="sb",
                                        wait_s=60)
        assert [m["state"] for m in result["moves"]] == ["done"]
        time.sleep(3)
        query.stop()  # a restart after the move: the checkpoint's offsets of the moved queue still hold
        time.sleep(2)
        query = start()
        time.sleep(3)
        stop.set()
        producer.join(30)
        deadline = time.monotonic() + 90
        while not set(acked) <= {r[3] for r in rows}:
            assert time.monotonic() < deadline, f"{len(set(acked) - {r[3] for r in rows})} messages never read"
            time.sleep(0.5)
    finally:
        stop.set()
        query.stop()
    counts = Counter(r[3] for r in rows)
    assert not [x for x, n in counts.items() if n > 1], "a message was read twice"
    base = result["moves"][0]["base"]
    offsets = sorted(r[2] for r in rows if (r[0], r[1]) == moving)
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "the moved queue skipped offsets"
    assert offsets[0] < base < offsets[-1], "the moved queue was not read on both sides of the move"


@pytest.mark.slow  # ~1 min: two groups, a txmq -> txmq query running while one group is drained
def test_a_streaming_sink_keeps_committing_exactly_once_while_one_of_its_groups_is_drained(spark, group_factory,
                                                                                           tmp_path):
    """The sink reads the groups a batch spans when the batch runs, not when the query started:
    after `txmq group drain`, its batches commit on the group the queues moved to."""
    fast = ["--replication", "async", "--transaction-timeout", "2s", "--check-interval", "1s"]
    a, b = (group_factory(name, replicas=1, args=fast) for name in ("da", "db"))
    endpoints = f"{a.endpoints};{b.endpoints}"
    acked: list[bytes] = []
    with ClusterClient(endpoints) as client:
        client.create_topic("dsrc", 4)
        client.create_topic("ddst", 4)
        assert {q.group for q in client.queues("ddst")} == {"da", "db"}
    stop_sending = start_sending(endpoints, "dsrc", "d", acked)
    query = copy_query(spark, endpoints, "dsrc", "ddst", tmp_path / "cp")
    try:
        wait_first_batch(query)  # the drain comes mid-query
        with NativeClient(b.endpoints) as admin:
            result = admin.move_queues(drain="da", wait_s=60)
        assert {m["state"] for m in result["moves"]} == {"done"} and len(result["moves"]) == 4
        time.sleep(5)
        stop_sending()
        with ClusterClient(endpoints) as client:
            assert {q.current.group for q in client.queues("ddst")} == {"db"}
            deadline = time.monotonic() + 90
            while not set(acked) <= set(written := topic_bodies(client, "ddst")):
                assert query.exception() is None, f"the query failed: {query.exception()}"
                assert time.monotonic() < deadline, f"{len(set(acked) - set(written))} messages never written"
                time.sleep(0.5)
        assert query.isActive and query.exception() is None, "the query stopped"
    finally:
        stop_sending()
        query.stop()
    counts = Counter(written)
    assert not [x for x, n in counts.items() if n > 1], "a message was written twice"
    assert set(written) == set(acked)


@pytest.mark.slow  # ~1-2 min: two groups, a txmq -> txmq query; one group drained between batches, then stopped
def test_a_streaming_sink_keeps_committing_exactly_once_after_one_of_its_groups_is_drained_and_stopped(
        spark, group_factory, tmp_path):
    """Once a drained group is stopped for good, each batch's lookup of its new transaction does not
    wait on it: batches go on at their pace (the drain comes between batches: one during a batch's
    writes fails the query, docs/cluster.md "Not yet")."""
    fast = ["--replication", "async", "--transaction-timeout", "2s", "--check-interval", "1s"]
    a, b = (group_factory(name, replicas=1, args=fast) for name in ("sa", "sb"))
    endpoints = f"{a.endpoints};{b.endpoints}"
    acked: list[bytes] = []

    def wait_written(client, timeout_s: float) -> list[bytes]:
        deadline = time.monotonic() + timeout_s
        while not set(acked) <= set(written := topic_bodies(client, "sdst")):
            assert query.exception() is None, f"the query failed: {query.exception()}"
            assert time.monotonic() < deadline, f"{len(set(acked) - set(written))} messages never written"
            time.sleep(0.5)
        return written

    with ClusterClient(endpoints) as client:
        client.create_topic("ssrc", 4)
        client.create_topic("sdst", 4)
    stop_sending = start_sending(endpoints, "ssrc", "s", acked)
    query = copy_query(spark, endpoints, "ssrc", "sdst", tmp_path / "cp")
    try:
        wait_first_batch(query)
        stop_sending()
        with ClusterClient(b.endpoints) as client:
            wait_written(client, 90)  # the query is idle: the drain comes between batches
        with NativeClient(b.endpoints) as admin:
            result = admin.move_queues(drain="sa", wait_s=60)
        assert {m["state"] for m in result["moves"]} == {"done"} and len(result["moves"]) == 4
        a.stop()  # for good
        stopped_at = query.lastProgress["batchId"]
        stop_sending = start_sending(endpoints, "ssrc", "s", acked, first=len(acked) + 1_000_000)
        deadline = time.monotonic() + 60
        while query.lastProgress["batchId"] < stopped_at + 3:
            assert query.exception() is None, f"the query failed: {query.exception()}"
            assert time.monotonic() < deadline, f"no 3 batches within 60s of the stop: {query.lastProgress}"
            time.sleep(0.5)
        stop_sending()
        with ClusterClient(b.endpoints) as client:
            assert {q.current.group for q in client.queues("sdst")} == {"sb"}
            written = wait_written(client, 90)
        assert query.isActive and query.exception() is None, "the query stopped"
    finally:
        stop_sending()
        query.stop()
    counts = Counter(written)
    assert not [x for x, n in counts.items() if n > 1], "a message was written twice"
    assert set(written) == set(acked)



@pytest.mark.slow  # ~1-2 min: three groups, a txmq -> txmq query whose batch's tasks straddle a queue move
def test_a_streaming_sink_commits_a_batch_exactly_once_and_goes_on_when_a_queue_moves_between_two_of_its_tasks(
        spark, group_factory, tmp_path):
    """The batch's first two tasks read the sink topic's groups before one of its queues moves to a
    third group, the other two after: the batch commits in two parts under one decision, and the
    query goes on."""
    fast = ["--replication", "async", "--transaction-timeout", "2s", "--check-interval", "1s"]
    endpoints, moving = two_groups_with_a_queue_to_move(group_factory, ("ma", "mb"), fast, "msrc", "mdst")
    c = group_factory("mc", replicas=1, args=fast)  # takes writes of mdst once the queue moves there
    pauses = Path(os.environ[faults.ENV_PAUSE_DIR])
    point = pauses / "sink.before_halves"
    release = pauses / "sink.before_halves.release"
    query = (spark.readStream.format("txmq").options(broker=endpoints, topic="msrc", startingOffsets="earliest",
                                                     pollIntervalMs="50").load()
             .select("body").repartition(4)  # four tasks on two cores: two run first, two after them
             .writeStream.format("txmq").options(broker=endpoints, topic="mdst")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start())
    sent: list[bytes] = []

    def send(prefix: str, n: int) -> None:
        bodies = [f"{prefix}-{i}".encode() for i in range(n)]
        with ClusterClient(endpoints) as client:
            client.send([Message("msrc", x) for x in bodies], topic="msrc")
        sent.extend(bodies)

    def wait_written(timeout_s: float) -> list[bytes]:
        deadline = time.monotonic() + timeout_s
        with ClusterClient(f"{endpoints};{c.endpoints}") as client:
            while not set(sent) <= set(written := topic_bodies(client, "mdst")):
                assert query.exception() is None, f"the query failed: {query.exception()}"
                assert time.monotonic() < deadline, f"{len(set(sent) - set(written))} messages never written"
                time.sleep(0.5)
        return written

    try:
        send("warm", 8)
        wait_written(300)  # Spark's start: minutes on a loaded host
        point.touch()  # the next batch's first tasks wait, having read the groups, before their halves
        send("hold", 16)
        deadline = time.monotonic() + 120
        while len(held := list(pauses.glob("sink.before_halves.p*"))) < 2:
            assert query.exception() is None and time.monotonic() < deadline, f"no task held: {query.exception()}"
            time.sleep(0.2)
        with NativeClient(c.endpoints) as admin:
            result = admin.move_queues(topic="mdst", queue=f"{moving[0]}:{moving[1]}", to="mc", wait_s=60)
        assert [m["state"] for m in result["moves"]] == ["done"]
        time.sleep(2)  # the brokers' cached routes (up to 0.5 s old) show the move to the tasks that start next
        release.touch()
        wait_written(120)
        decision = json.loads((tmp_path / "cp" / "txmq-sink" / "decision.json").read_bytes())
        send("after", 8)  # the query goes on
        written = wait_written(120)
        assert query.isActive and query.exception() is None, "the query stopped"
    finally:
        release.touch()
        query.stop()
        for f in [point, release, *pauses.glob("sink.before_halves.p*")]:
            f.unlink(missing_ok=True)
    assert len(held) == 2
    assert sorted(tuple(p["participants"]) for p in decision["parts"]) == [("ma", "mb"), ("ma", "mb", "mc")]
    counts = Counter(written)
    assert not [x for x, n in counts.items() if n > 1], "a message was written twice"
    assert set(written) == set(sent)
