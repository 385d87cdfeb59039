"""The txmq Spark source against a real broker process and a real local SparkSession."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from tests.spark.support import send_plain, send_transaction, topic_bodies

pytestmark = pytest.mark.spark


def read_stream(spark, options, **extra):
    reader = spark.readStream.format("txmq")
    for k, v in {**options, **extra}.items():
        reader = reader.option(k, str(v))
    return reader.load()


def run_available_now(df, checkpoint) -> list[tuple[int, list]]:
    """Run the query with Trigger.AvailableNow; return [(batch_id, rows)] in batch order."""
    batches: list[tuple[int, list]] = []
    query = (df.writeStream.foreachBatch(lambda d, i: batches.append((i, d.collect())))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    return batches


def bodies(batches) -> list[bytes]:
    return [r.body for _, rows in batches for r in rows]


def test_stream_reads_committed_messages_only(spark, client, source_options, topic, checkpoint):
    send_plain(client, topic, [b"plain-%d" % i for i in range(6)])
    send_transaction(client, topic, [b"commit-%d" % i for i in range(6)], "COMMIT")
    send_transaction(client, topic, [b"rollback-%d" % i for i in range(6)], "ROLLBACK")
    pending = send_transaction(client, topic, [b"later-%d" % i for i in range(6)], None)
    df = read_stream(spark, source_options, topic=topic, startingOffsets="earliest")

    first = bodies(run_available_now(df, checkpoint))
    assert sorted(first) == sorted([b"plain-%d" % i for i in range(6)] + [b"commit-%d" % i for i in range(6)])

    client.end_transaction(pending, "COMMIT", producer_group="tests")
    second = bodies(run_available_now(df, checkpoint))
    assert sorted(second) == sorted(b"later-%d" % i for i in range(6))


def test_rows_carry_the_documented_columns(spark, client, source_options, topic):
    tx = send_transaction(client, topic, [b"x"], "COMMIT", tag=["TagA"], keys=[["k1", "k2"]],
                          properties=pa.array([[("p", "v")]], pa.map_(pa.string(), pa.string())))
    row = spark.read.format("txmq").options(**source_options, topic=topic).load().collect()[0]
    assert (row.topic, row.body, row.tag, row.keys, row.transactionId) == (topic, b"x", "TagA", ["k1", "k2"], tx)
    assert row.properties.get("p") == "v" and row.storeTimestamp is not None and row.queueOffset == 0


def test_every_micro_batch_holds_whole_transactions_under_concurrent_commits(
        spark, client, source_options, topic, checkpoint):
    committed: list[str] = []

    def produce():
        for i in range(60):
            committed.append(send_transaction(client, topic, [b"%d-%d" % (i, j) for j in range(4)], "COMMIT"))
            time.sleep(0.01)

    seen: list[Counter] = []
    df = read_stream(spark, source_options, topic=topic, startingOffsets="earliest", maxOffsetsPerTrigger=18)
    query = (df.writeStream.foreachBatch(lambda d, i: seen.append(Counter(r.transactionId for r in d.collect())))
             .option("checkpointLocation", checkpoint).start())
    producer = threading.Thread(target=produce)
    producer.start()
    producer.join()
    deadline = time.time() + 90
    while sum(sum(c.values()) for c in seen) < 4 * len(committed) and time.time() < deadline:
        time.sleep(0.2)
    query.stop()
    per_tx = Counter()
    for counts in seen:
        for tx, n in counts.items():
            assert n == 4, f"transaction {tx} split: {n} of 4 rows in one batch"
            per_tx[tx] += 1
    assert sum(1 for c in seen if c) >= 3
    assert set(per_tx) == set(committed) and set(per_tx.values()) == {1}


def test_restart_from_checkpoint_neither_loses_nor_repeats(spark, client, source_options, topic, checkpoint, tmp_path):
    out = str(tmp_path / "out")
    df = read_stream(spark, source_options, topic=topic, startingOffsets="earliest", maxOffsetsPerTrigger=5)

    def run():
        q = (df.select("body").writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None

    send_plain(client, topic, [b"a%d" % i for i in range(12)])
    run()
    send_transaction(client, topic, [b"b%d" % i for i in range(9)])
    run()
    got = sorted(r.body for r in spark.read.parquet(out).collect())
    assert got == sorted([b"a%d" % i for i in range(12)] + [b"b%d" % i for i in range(9)])


def test_available_now_reads_what_was_there_in_batches_of_at_most_the_limit(
        spark, client, source_options, topic, checkpoint):
    for i in range(10):
        send_plain(client, topic, [b"m%d-%d" % (i, j) for j in range(5)])
        time.sleep(0.003)
    batches = run_available_now(read_stream(spark, source_options, topic=topic, startingOffsets="earliest",
                                            maxOffsetsPerTrigger=12), checkpoint)
    sizes = [len(rows) for _, rows in batches if rows]
    assert sum(sizes) == 50 and max(sizes) <= 12 and len(sizes) >= 5


def test_starting_latest_skips_existing_messages(spark, client, source_options, topic, checkpoint):
    send_plain(client, topic, [b"old"] * 4)
    assert bodies(run_available_now(read_stream(spark, source_options, topic=topic), checkpoint)) == []


def test_starting_offsets_json_picks_offsets_per_queue(spark, client, source_options, topic):
    send_plain(client, topic, [b"q%d-%d" % (i % 4, i // 4) for i in range(16)])  # round robin: 4 per queue
    spec = f'{{"{topic}": {{"0": 3, "1": -1, "2": -2}}}}'
    got = spark.read.format("txmq").options(**source_options, topic=topic, startingOffsets=spec).load()
    assert sorted((r.queueId, r.queueOffset) for r in got.collect()) == \
        [(0, 3)] + [(2, i) for i in range(4)] + [(3, i) for i in range(4)]


def test_starting_timestamp_skips_older_messages(spark, client, source_options, topic):
    send_plain(client, topic, [b"before"] * 4)
    time.sleep(0.05)
    ts = int(time.time() * 1000)
    time.sleep(0.05)
    send_plain(client, topic, [b"after"] * 3)
    got = spark.read.format("txmq").options(**source_options, topic=topic, startingTimestamp=str(ts)).load()
    assert [r.body for r in got.collect()] == [b"after"] * 3


def test_batch_read_stops_at_ending_offsets(spark, client, source_options, topic):
    send_plain(client, topic, [b"x"] * 12)
    spec = f'{{"{topic}": {{"0": 1, "1": 2, "2": -1, "3": 0}}}}'
    got = spark.read.format("txmq").options(**source_options, topic=topic, endingOffsets=spec).load()
    assert Counter(r.queueId for r in got.collect()) == Counter({0: 1, 1: 2, 2: 3})


def test_batch_read_equals_expected_dataframe(spark, client, source_options, topic):
    send_plain(client, topic, [b"one", b"two"])
    got = spark.read.format("txmq").options(**source_options, topic=topic).load().select("body")
    expected = spark.createDataFrame([(b"one",), (b"two",)], "body binary")
    assert_df_equality(got, expected, ignore_row_order=True)


def test_tag_filter_keeps_matching_messages(spark, client, source_options, topic):
    send_plain(client, topic, [b"a", b"b", b"c", b"d"], tag=["A", "B", "C", None])
    got = spark.read.format("txmq").options(**source_options, topic=topic, tags="A || C").load()
    assert sorted(r.body for r in got.collect()) == [b"a", b"c"]


def test_topic_pattern_picks_up_new_topics(spark, client, source_options, checkpoint):
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    client.create_topic(f"{prefix}-a", 2)
    send_plain(client, f"{prefix}-a", [b"first"])
    df = read_stream(spark, source_options, topicPattern=f"{prefix}-.*", startingOffsets="earliest",
                     topicRefreshMs=0)
    assert bodies(run_available_now(df, checkpoint)) == [b"first"]
    client.create_topic(f"{prefix}-b", 2)
    send_plain(client, f"{prefix}-b", [b"second"])
    assert bodies(run_available_now(df, checkpoint)) == [b"second"]


@pytest.mark.parametrize("option, value", [("maxOffsetsPerTrigger", "lots"), ("startingOffsets", "oldest"),
                                           ("failOnDataLoss", "perhaps")])
def test_bad_option_fails_the_query_naming_the_option(spark, source_options, topic, option, value):
    with pytest.raises(Exception, match=option):
        spark.read.format("txmq").options(**source_options, topic=topic, **{option: value}).load().collect()


def test_consumer_group_records_processed_offsets(spark, client, source_options, topic, checkpoint):
    send_plain(client, topic, [b"x"] * 8)
    group = f"g{uuid.uuid4().hex[:8]}"
    run_available_now(read_stream(spark, source_options, topic=topic, startingOffsets="earliest",
                                  consumerGroup=group), checkpoint)
    lag = client.group_lag(group, [topic])
    assert sum(v.committed for v in lag[topic].values()) == 8


def start_recording(df, checkpoint) -> tuple[object, list[tuple[float, int]]]:
    """Start a streaming query that records (monotonic time, row count) of every non-empty micro-batch."""
    seen: list[tuple[float, int]] = []

    def record(batch_df, _batch_id):
        n = batch_df.count()
        if n:
            seen.append((time.monotonic(), n))

    query = df.writeStream.foreachBatch(record).option("checkpointLocation", checkpoint).start()
    return query, seen


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    return predicate()


def test_min_offsets_per_trigger_holds_back_a_batch_until_enough_rows_arrive(
        spark, client, source_options, topic, checkpoint):
    df = read_stream(spark, source_options, topic=topic, startingOffsets="earliest",
                     minOffsetsPerTrigger=10, maxTriggerDelay="10m", pollIntervalMs=100)
    query, seen = start_recording(df, checkpoint)
    try:
        send_plain(client, topic, [b"early-%d" % i for i in range(4)])
        time.sleep(3)  # many triggers plan here: each must hold the 4 rows back
        assert seen == []
        send_plain(client, topic, [b"late-%d" % i for i in range(6)])
        assert wait_until(lambda: seen, 60)
        assert [n for _, n in seen] == [10]
    finally:
        query.stop()


def test_max_trigger_delay_releases_a_batch_smaller_than_min_offsets(
        spark, client, source_options, topic, checkpoint):
    delay_s = 4
    df = read_stream(spark, source_options, topic=topic, startingOffsets="earliest",
                     minOffsetsPerTrigger=1000, maxTriggerDelay=f"{delay_s}s", pollIntervalMs=100)
    started = time.monotonic()
    query, seen = start_recording(df, checkpoint)
    try:
        send_plain(client, topic, [b"few-%d" % i for i in range(5)])
        sent = time.monotonic()
        assert wait_until(lambda: seen, 60)
        released_at, rows = seen[0]
        assert rows == 5
        # held back until maxTriggerDelay since the query started, not read as soon as sent
        assert released_at - started >= delay_s and released_at - sent >= 1
    finally:
        query.stop()


def test_spark_reads_and_writes_a_broker_whose_files_it_cannot_see(spark, spark_broker, client, source_options,
                                                                    topic, checkpoint):
    if not spark_broker.hidden:
        pytest.skip("hiding the broker's files needs root (unshare)")
    send_plain(client, topic, [b"seen-%d" % i for i in range(20)])
    assert list(spark_broker.data_dir.iterdir()) == []  # the broker's CommitLog is not visible here
    rows = spark.read.format("txmq").options(**source_options, topic=topic).load().collect()
    assert sorted(r.body for r in rows) == sorted(b"seen-%d" % i for i in range(20))
    copy = f"{topic}-copy"
    client.create_topic(copy, 2)
    query = (spark.readStream.format("txmq").options(**source_options, topic=topic, startingOffsets="earliest")
             .load().selectExpr("body").writeStream.format("txmq").options(**source_options, topic=copy)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert sorted(topic_bodies(client, copy)) == sorted(b"seen-%d" % i for i in range(20))
