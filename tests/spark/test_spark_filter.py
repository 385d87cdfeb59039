"""The Spark source's SQL92 filter: the option `filter`, and Spark's pushed filters on `tag`
(option `pushFilters=true`), against a real broker process and a local SparkSession."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.spark.support import send_plain
from tests.spark.test_spark_source import bodies, read_stream, run_available_now
from txmq.broker.protocol.native_arrow import STRING_MAP

pytestmark = pytest.mark.spark

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def send_orders(client, topic: str, count: int) -> None:
    send_plain(client, topic, [f"order-{i}".encode() for i in range(count)],
               tag=["paid" if i % 2 else "new" for i in range(count)],
               properties=pa.array([[("amount", str(i)), ("region", "eu" if i % 3 == 0 else "us")]
                                    for i in range(count)], STRING_MAP))


def expected(count: int, predicate) -> list[bytes]:
    return sorted(f"order-{i}".encode() for i in range(count) if predicate(i))


def test_a_batch_read_with_filter_returns_only_matching_messages(spark, client, source_options, topic):
    send_orders(client, topic, 40)
    df = spark.read.format("txmq").options(**source_options, topic=topic,
                                           filter="region = 'eu' AND amount BETWEEN 10 AND 30").load()
    assert sorted(r.body for r in df.collect()) == expected(40, lambda i: i % 3 == 0 and 10 <= i <= 30)


def test_a_stream_with_filter_returns_only_matching_messages(spark, client, source_options, topic, checkpoint):
    send_orders(client, topic, 20)
    df = read_stream(spark, source_options, topic=topic, startingOffsets="earliest", filter="amount >= 15")
    assert sorted(bodies(run_available_now(df, checkpoint))) == expected(20, lambda i: i >= 15)


def test_a_bad_filter_fails_the_query_naming_the_option_and_position(spark, source_options, topic):
    with pytest.raises(Exception, match=r"option 'filter'.*position 9"):
        spark.read.format("txmq").options(**source_options, topic=topic, filter="amount >").load().collect()


def test_push_filters_is_refused_for_a_stream(spark, source_options, topic, checkpoint):
    with pytest.raises(Exception, match="pushFilters"):
        df = read_stream(spark, source_options, topic=topic, pushFilters="true")
        run_available_now(df, checkpoint)


def test_pushed_tag_predicates_and_the_filter_option_select_together(spark, client, source_options, topic):
    send_orders(client, topic, 30)
    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        df = spark.read.format("txmq").options(**source_options, topic=topic, pushFilters="true",
                                               filter="amount < 20").load()
        got = df.where("tag = 'paid' AND properties['region'] = 'us'").collect()
    finally:
        spark.conf.unset(PUSHDOWN_CONF)
    assert sorted(r.body for r in got) == expected(30, lambda i: i < 20 and i % 2 and i % 3 != 0)
