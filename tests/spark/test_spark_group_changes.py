"""The foreachBatch helper across a cluster whose groups change under a running query
(docs/spark.md, "foreachBatch"): it reads the groups a batch spans per batch, so a group added
later takes rows, and the query goes on once a group is drained and stopped for good."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter

import pytest

from tests.spark.crash_driver import sqlite_local_transaction
from tests.spark.support import start_sending, topic_bodies
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.native_client import NativeClient
from txmq.spark import TransactionalBatch

pytestmark = pytest.mark.spark

FAST = ["--replication", "async", "--transaction-timeout", "2s", "--check-interval", "1s"]


def committed_batches(db) -> list[int]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT batch_id FROM batches ORDER BY batch_id")]
    finally:
        con.close()


def db_rows(db) -> list[bytes]:
    con = sqlite3.connect(db)
    try:
        return [bytes(r[0]) for r in con.execute("SELECT body FROM rows")]
    finally:
        con.close()


def wait_for(what: str, pred, query, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert query.exception() is None, f"the query failed: {query.exception()}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f}s"
        time.sleep(0.5)


@pytest.mark.slow  # ~1-2 min: Spark's start, a group added, the first one drained and stopped
def test_foreach_batch_writes_to_a_group_added_mid_query_and_goes_on_once_the_first_is_drained_and_stopped(
        spark, group_factory, tmp_path):
    a = group_factory("fa", replicas=1, args=FAST)
    acked: list[bytes] = []
    with ClusterClient(a.endpoints) as client:
        client.create_topic("fsrc", 2)
        client.create_topic("fdst", 2)
    db = str(tmp_path / "db.sqlite")
    local, check = sqlite_local_transaction(db)
    # its only bootstrap broker is stopped later: it asks the others it knows
    stop_sending = start_sending(a.endpoints, "fsrc", "f", acked)
    helper = TransactionalBatch(broker=a.endpoints, topic="fdst", checkpoint_location=str(tmp_path / "cp"),
                                local_transaction=local, check=check)
    query = (spark.readStream.format("txmq").options(broker=a.endpoints, topic="fsrc", startingOffsets="earliest",
                                                     pollIntervalMs="50").load().select("body")
             .writeStream.foreachBatch(helper).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for("a first batch", lambda: committed_batches(db), query, 300)  # Spark's start on a loaded host
        b = group_factory("fb", replicas=1, args=FAST)
        with ClusterClient(a.endpoints) as client:
            client.create_topic("fdst", 4)  # grown: its new queues are dealt over fa and fb
            assert {q.group for q in client.queues("fdst")} == {"fa", "fb"}
        with NativeClient(b.endpoints) as on_b:
            wait_for("rows on the added group", lambda: sum(on_b.snapshot_offsets(["fdst"])["fdst"].values()) > 0,
                     query, 60)
            result = on_b.move_queues(drain="fa", wait_s=60)
        assert {m["state"] for m in result["moves"]} == {"done"}
        a.stop()
        stopped_at = max(committed_batches(db))
        wait_for(f"a batch after the stop (batch {stopped_at} was the last before; batch durations, ms: "
                 f"{[p['durationMs'].get('triggerExecution') for p in query.recentProgress]})",
                 lambda: max(committed_batches(db)) >= stopped_at + 2, query, 60)
        stop_sending()
        with ClusterClient(b.endpoints) as client:
            assert {q.current.group for q in client.queues("fdst")} == {"fb"}
            wait_for("every acknowledged message", lambda: set(acked) <= set(db_rows(db)), query, 90)
            written = topic_bodies(client, "fdst")
        assert query.isActive and query.exception() is None, "the query stopped"
    finally:
        stop_sending()
        query.stop()
        helper.close()
    rows = db_rows(db)
    assert not [x for x, n in Counter(rows).items() if n > 1], "a row was written twice to the database"
    assert Counter(written) == Counter(rows), "the topic and the database disagree"
