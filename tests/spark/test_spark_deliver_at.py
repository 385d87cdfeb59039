"""The sink's `deliverAt` column: a committed batch's rows are delivered at their time, exactly once;
a failed batch never; a broker killed between the COMMIT and the delivery still delivers once."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from pyspark.sql import functions as F

from tests.spark.crash_driver import sqlite_local_transaction
from tests.spark.support import send_plain
from tests.spark.test_spark_sink import pipe
from tests.support.broker_process import BrokerProcess
from txmq.spark import TransactionalBatch

pytestmark = pytest.mark.spark


def now_ms() -> int:
    return int(time.time() * 1000)


def delivered(client, topic: str) -> list[tuple[bytes, int]]:
    """(body, store time in ms) of every visible message of `topic`."""
    cut = client.snapshot_offsets([topic])[topic]
    out = []
    for q, end in sorted(cut.items()):
        for r in client.read_queue(topic, q, 0, end):
            cols = r.batch.to_pydict()
            out.extend((body, int(stored.timestamp() * 1000)) for body, stored in zip(cols["body"], cols["storeTimestamp"]))
    return out


def with_due_time(df, seconds: float, only=None):
    """`df` (a body column) with a deliverAt `seconds` after its micro-batch started (null where
    `only` is false), the time also appended to the body ("body@ms") for the test to check."""
    at = F.unix_millis(F.current_timestamp()) + int(seconds * 1000)
    if only is not None:
        at = F.when(only, at)
    body = F.col("body").cast("string")
    return df.select(F.when(at.isNull(), body).otherwise(F.concat_ws("@", body, at.cast("string")))
                     .cast("binary").alias("body"), at.alias("deliverAt"))


def due_of(body: bytes) -> int | None:
    return int(body.rsplit(b"@", 1)[1]) if b"@" in body else None


def wait_for_count(client, topic: str, count: int, timeout_s: float) -> list:
    deadline = time.monotonic() + timeout_s
    while True:
        got = delivered(client, topic)
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


@pytest.fixture
def out_topic(client) -> str:
    name = f"at-{uuid.uuid4().hex[:10]}"
    client.create_topic(name, 4)
    return name


def test_streamed_rows_with_deliver_at_arrive_not_before_it_and_exactly_once(spark, client, source_options, topic,
                                                                              out_topic, checkpoint):
    send_plain(client, topic, [b"late%d" % i for i in range(6)] + [b"now%d" % i for i in range(4)])
    transform = lambda df: with_due_time(df, 2.5, only=F.col("body").cast("string").startswith("late"))  # noqa: E731
    assert pipe(spark, source_options, topic, out_topic, checkpoint, transform=transform).exception() is None
    wait_for_count(client, out_topic, 10, 30)
    time.sleep(1.5)  # nothing more comes: each once
    got = delivered(client, out_topic)
    assert Counter(body.split(b"@")[0] for body, _ in got) == Counter([b"late%d" % i for i in range(6)] +
                                                                      [b"now%d" % i for i in range(4)])
    for body, stored in got:
        at = due_of(body)
        assert (at is not None) == body.startswith(b"late")
        if at is not None:
            assert stored >= at, f"{body!r} delivered {at - stored} ms before its time"


def test_batch_write_with_a_timestamp_deliver_at_holds_the_rows_until_then(spark, client, source_options,
                                                                          out_topic):
    at = (now_ms() // 1000 + 4) * 1000
    df = spark.createDataFrame([(f"r{i}", at if i % 2 else None) for i in range(6)], "body string, ms long") \
        .select("body", F.timestamp_millis("ms").alias("deliverAt"))
    df.write.format("txmq").options(**source_options, topic=out_topic).mode("append").save()
    if now_ms() < at - 300:  # Spark was quick enough to look before the time
        assert sorted(body for body, _ in delivered(client, out_topic)) == [b"r0", b"r2", b"r4"]
    wait_for_count(client, out_topic, 6, 20)
    time.sleep(1.0)
    got = delivered(client, out_topic)
    assert sorted(body for body, _ in got) == [b"r%d" % i for i in range(6)]
    assert all(stored >= at for body, stored in got if body in (b"r1", b"r3", b"r5"))


def test_a_failed_batch_with_deliver_at_is_never_delivered_even_after_its_time(spark, client, source_options, topic,
                                                                              out_topic, checkpoint):
    @F.udf("binary")
    def fail_on_poison(body):
        if body == b"poison":
            raise RuntimeError("injected task failure")
        return body

    send_plain(client, topic, [b"ok%d" % i for i in range(8)] + [b"poison"])
    transform = lambda df: with_due_time(df.select(fail_on_poison("body").alias("body")), 1.0)  # noqa: E731
    failed = pipe(spark, source_options, topic, out_topic, checkpoint, transform=transform)
    assert failed.exception() is not None
    time.sleep(3.0)  # well past the rows' time
    assert delivered(client, out_topic) == []


def test_a_deliver_at_past_the_horizon_fails_the_write_naming_the_value_and_commits_nothing(spark, client,
                                                                                          source_options, out_topic):
    far = now_ms() + 4 * 24 * 3600 * 1000  # the broker's default horizon is 72 h
    df = spark.createDataFrame([("near", now_ms() + 1000), ("far", far)], "body string, deliverAt long")
    with pytest.raises(Exception, match=rf"deliverAt was refused.*TIMER_DELIVER_MS={far}"):
        df.coalesce(1).write.format("txmq").options(**source_options, topic=out_topic).mode("append").save()
    time.sleep(2.0)
    assert delivered(client, out_topic) == []


def test_the_foreach_batch_helper_delivers_deliver_at_rows_at_their_time(spark, client, source_options, topic,
                                                                        checkpoint, tmp_path):
    dst = f"fb-at-{uuid.uuid4().hex[:8]}"
    client.create_topic(dst, 4)
    send_plain(client, topic, [b"f%d" % i for i in range(5)])
    local, check = sqlite_local_transaction(str(tmp_path / "db.sqlite"))

    df = with_due_time(spark.readStream.format("txmq").options(**source_options, topic=topic,
                                                               startingOffsets="earliest").load(), 2.0)
    with TransactionalBatch(broker=source_options["broker"], topic=dst, checkpoint_location=checkpoint,
                            local_transaction=local, check=check) as helper:
        query = df.writeStream.foreachBatch(helper).option("checkpointLocation", checkpoint) \
            .trigger(availableNow=True).start()
        query.awaitTermination(180)
        assert query.exception() is None
    wait_for_count(client, dst, 5, 20)
    time.sleep(1.0)
    got = delivered(client, dst)
    assert sorted(body.split(b"@")[0] for body, _ in got) == [b"f%d" % i for i in range(5)]
    assert all(due_of(body) is not None and stored >= due_of(body) for body, stored in got)


def test_a_broker_killed_between_commit_and_delivery_still_delivers_each_row_once(spark, tmp_path):
    from txmq.broker.client import NativeClient

    with BrokerProcess(tmp_path / "data", flush="sync") as broker:
        topic = f"kill-{uuid.uuid4().hex[:8]}"
        with NativeClient(broker.endpoint) as admin:
            admin.create_topic(topic, 4)
        # a first write starts the executors' Python workers and the sink, which would eat the wait
        spark.createDataFrame([("warm",)], "body string").write.format("txmq").option("broker", broker.endpoint) \
            .option("topic", topic + "-warm").mode("append").save()
        at = now_ms() + 8000  # room for the write on a busy host: the kill must come before it
        df = spark.createDataFrame([(f"k{i}", at) for i in range(20)], "body string, deliverAt long")
        df.write.format("txmq").option("broker", broker.endpoint).option("topic", topic).mode("append").save()
        assert now_ms() < at, "the COMMIT came after the rows' time: the kill would not fall between them"
        broker.kill()  # kill -9 after the COMMIT, before the rows are due
        broker.restart()
        with NativeClient(broker.endpoint) as reader:
            wait_for_count(reader, topic, 20, 30)
            time.sleep(1.5)
            got = delivered(reader, topic)
        assert Counter(body for body, _ in got) == Counter(b"k%d" % i for i in range(20))
        assert all(stored >= at for _, stored in got)

