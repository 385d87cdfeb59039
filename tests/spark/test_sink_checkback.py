"""SinkCheckback answers the broker's check-backs for a streaming sink from the query's checkpoint.

A dead run can leave a pending transaction behind for a batch. If Spark's commit
log already holds that batch, another generation committed it and the leftover
must roll back; if not, the restarted query will replay the batch, so the
answer is IN_PROGRESS and the transaction stays pending, past the broker's
--max-checks (which IN_PROGRESS answers do not count towards). Real broker
(check-back after 1 s), real streaming query, real checkpoint.
"""

from __future__ import annotations

import time

import pytest

from tests.support.broker_process import BrokerProcess
from txmq.broker import errors
from txmq.broker.client import Message, NativeClient, PullConsumer
from txmq.spark import SinkCheckback
from txmq.spark.options import SinkOptions
from txmq.spark.transactions import transaction_id


@pytest.fixture(scope="module")
def checking_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("checking-broker"),
                       extra_args=["--transaction-timeout", "1s", "--check-interval", "200ms",
                                   "--max-checks", "3"]) as proc:
        yield proc


def run_one_batch(spark, broker: str, checkpoint: str) -> None:
    """Copy topic cb-in to cb-out with the transactional sink; Spark's commit log then holds batch 0."""
    with NativeClient(broker) as client:
        client.create_topic("cb-in", 2)
        client.create_topic("cb-out", 2)
        client.send([Message("cb-in", b"row-%d" % i) for i in range(5)])
    query = (spark.readStream.format("txmq").option("broker", broker).option("topic", "cb-in")
             .option("startingOffsets", "earliest").load().select("body")
             .writeStream.format("txmq").option("broker", broker).option("topic", "cb-out")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()


def wait_for_state(client: NativeClient, tx: str, state: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while (current := client.get_transaction(tx).state) != state and time.monotonic() < deadline:
        time.sleep(0.2)
    return current


def test_leftovers_of_finished_batches_roll_back_and_unfinished_ones_wait(spark, checking_broker, tmp_path):
    broker = checking_broker.endpoint
    checkpoint = str(tmp_path / "checkpoint")
    run_one_batch(spark, broker, checkpoint)
    sink_id = SinkOptions.parse({"broker": broker, "checkpointLocation": checkpoint, "topic": "cb-out"}).sink_id
    group = f"spark-sink-{sink_id}"
    stale = transaction_id(sink_id, 0, 7)  # a dead run's generation of batch 0, which Spark finished
    unfinished = transaction_id(sink_id, 7, 0)  # a batch Spark has not finished
    with NativeClient(broker) as client:
        for tx in (stale, unfinished):
            client.prepare(tx, [Message("cb-out", b"leftover-" + tx.encode())], producer_group=group,
                           sender="p0.a0.deadrun")
        with SinkCheckback(checkpoint, broker=broker, topics=["cb-out"]):
            assert wait_for_state(client, stale, "ROLLED_BACK", timeout_s=30) == "ROLLED_BACK"
            time.sleep(1.5)  # several more check rounds: more than --max-checks
            info = client.get_transaction(unfinished)
            assert info.state == "PENDING" and info.check_times < 3
        bodies = []
        with PullConsumer(client, ["cb-out"], start="earliest") as consumer:
            for batch in consumer.poll(timeout_ms=0):
                bodies += batch.column("body").to_pylist()
        assert sorted(bodies) == sorted(b"row-%d" % i for i in range(5)), "the copy once, no leftover"
        client.end_transaction(unfinished, "ROLLBACK", producer_group=group)
        with pytest.raises(errors.TransactionConflict):
            client.end_transaction(stale, "COMMIT", producer_group=group)
