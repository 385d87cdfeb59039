"""The txmq Spark sink (streaming and batch) against a real broker and a real SparkSession."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.spark.support import send_plain, topic_bodies
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.spark


def pipe(spark, source_options, src: str, dst: str, checkpoint: str, *, transform=None, **sink_options):
    """src topic → (transform) → dst topic, Trigger.AvailableNow; returns the finished query."""
    df = (spark.readStream.format("txmq").options(**source_options, topic=src, startingOffsets="earliest",
                                                  maxOffsetsPerTrigger="10").load()
          .select("body", "tag"))
    if transform is not None:
        df = transform(df)
    query = (df.writeStream.format("txmq").options(**source_options, topic=dst, **sink_options)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
    except Exception:  # the caller looks at query.exception()
        pass
    finally:
        if query.isActive:
            query.stop()
    return query


@pytest.fixture
def out_topic(client) -> str:
    name = f"out-{uuid.uuid4().hex[:10]}"
    client.create_topic(name, 4)
    return name


def test_stream_sink_writes_every_row_once_across_runs(spark, client, source_options, topic, out_topic, checkpoint):
    send_plain(client, topic, [b"a%d" % i for i in range(15)])
    assert pipe(spark, source_options, topic, out_topic, checkpoint).exception() is None
    send_plain(client, topic, [b"b%d" % i for i in range(7)])
    assert pipe(spark, source_options, topic, out_topic, checkpoint).exception() is None
    assert sorted(topic_bodies(client, out_topic)) == sorted([b"a%d" % i for i in range(15)] +
                                                           [b"b%d" % i for i in range(7)])


def test_a_batch_replayed_after_restart_is_not_written_twice(spark, client, source_options, topic, out_topic,
                                                             checkpoint):
    send_plain(client, topic, [b"r%d" % i for i in range(24)])
    assert pipe(spark, source_options, topic, out_topic, checkpoint).exception() is None
    commits = sorted(Path(checkpoint, "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    for p in commits[-2:]:  # Spark forgets it finished the last two batches: they run again
        p.unlink()
        Path(p.parent, f".{p.name}.crc").unlink(missing_ok=True)
    assert pipe(spark, source_options, topic, out_topic, checkpoint).exception() is None
    got = Counter(topic_bodies(client, out_topic))
    assert set(got) == {b"r%d" % i for i in range(24)} and set(got.values()) == {1}


def test_a_failing_batch_shows_nothing_and_commits_once_when_retried(spark, client, source_options, topic,
                                                                     out_topic, checkpoint, tmp_path):
    marker = tmp_path / "fail"
    marker.write_text("1")

    @F.udf("binary")
    def maybe_fail(body, path=str(marker)):  # raises on the last row while the marker exists
        import os

        if body == b"poison" and os.path.exists(path):
            raise RuntimeError("injected task failure")
        return body

    send_plain(client, topic, [b"ok%d" % i for i in range(8)] + [b"poison"])
    transform = lambda df: df.select(maybe_fail("body").alias("body"))  # noqa: E731
    failed = pipe(spark, source_options, topic, out_topic, checkpoint, transform=transform)
    assert failed.exception() is not None
    assert topic_bodies(client, out_topic) == []
    marker.unlink()
    assert pipe(spark, source_options, topic, out_topic, checkpoint, transform=transform).exception() is None
    assert sorted(topic_bodies(client, out_topic)) == sorted([b"ok%d" % i for i in range(8)] + [b"poison"])


def test_complete_mode_sends_each_batch_result(spark, client, source_options, topic, out_topic, checkpoint):
    send_plain(client, topic, [b"x", b"y", b"x"], tag=["x", "y", "x"])

    def counts(df):
        return df.groupBy("tag").count().select(F.concat_ws("=", "tag", F.col("count").cast("string")).alias("body"))

    df = (spark.readStream.format("txmq").options(**source_options, topic=topic, startingOffsets="earliest").load())
    query = (counts(df).writeStream.format("txmq").outputMode("complete")
             .options(**source_options, topic=out_topic).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert sorted(topic_bodies(client, out_topic)) == [b"x=2", b"y=1"]


def test_batch_write_sends_all_rows_in_one_transaction(spark, client, source_options, out_topic):
    df = spark.createDataFrame([(f"w{i}", ["k"], {"p": "1"}) for i in range(20)],
                               "body string, keys array<string>, properties map<string,string>").repartition(3)
    df.write.format("txmq").options(**source_options, topic=out_topic).mode("append").save()
    assert sorted(topic_bodies(client, out_topic)) == sorted(b"w%d" % i for i in range(20))
    rows = spark.read.format("txmq").options(**source_options, topic=out_topic).load().collect()
    assert len({r.transactionId for r in rows}) == 1 and rows[0].keys == ["k"]


def test_rows_can_name_their_topic(spark, client, source_options, out_topic):
    df = spark.createDataFrame([("to-column", out_topic)], "body string, topic string")
    df.write.format("txmq").options(**source_options).mode("append").save()
    assert topic_bodies(client, out_topic) == [b"to-column"]


@pytest.mark.parametrize("ddl, error", [
    ("value string", "no 'body' column"),
    ("body int", "'body' has type int"),
    ("body string, keys array<int>", "'keys' has type array<int>"),
    ("body string, tags string", "unknown column"),
])
def test_bad_input_columns_are_refused_before_anything_is_sent(spark, client, source_options, out_topic, ddl, error):
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=error):
        df.write.format("txmq").options(**source_options, topic=out_topic).mode("append").save()
    assert topic_bodies(client, out_topic) == []


def test_streaming_sink_without_checkpoint_option_or_sink_id_is_refused(spark, source_options, topic, out_topic,
                                                                        tmp_path):
    # with the session-wide checkpoint conf, the sink sees no checkpointLocation option
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "session-ckpt"))
    try:
        df = spark.readStream.format("txmq").options(**source_options, topic=topic).load().select("body")
        query = df.writeStream.format("txmq").options(**source_options, topic=out_topic).start()
        try:
            with pytest.raises(Exception, match="sinkId"):
                query.processAllAvailable()
        finally:
            query.stop()
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")


def test_unknown_topic_with_auto_create_off_fails_clearly(spark, tmp_path):
    with BrokerProcess(tmp_path / "b", extra_args=["--no-auto-create-topics"]) as broker:
        df = spark.createDataFrame([("x",)], "body string")
        with pytest.raises(Exception, match="no-such-topic"):
            df.write.format("txmq").options(broker=broker.endpoint, topic="no-such-topic").mode("append").save()
