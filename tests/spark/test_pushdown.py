"""Which of Spark's pushed filters the source takes into its SQL92 filter, and as what.

A filter is taken only where the broker's SQL92 answer equals Spark's for every row,
missing tags included; the others are left to Spark.
"""

from __future__ import annotations

import pytest
from pyspark.sql.datasource import (EqualNullSafe, EqualTo, GreaterThan, In, IsNotNull, IsNull, Not,
                                    StringContains, StringEndsWith, StringStartsWith)

from txmq.spark.pushdown import combine, push, to_sql
from txmq.broker.store.sql92 import SqlFilter
from txmq.spark.options import SourceOptions
from txmq.spark.source import TxmqPushdownBatchReader

TAG = ("tag",)


@pytest.mark.parametrize("spark_filter, sql", [
    (EqualTo(TAG, "paid"), "TAGS = 'paid'"),
    (EqualTo(TAG, "it's"), "TAGS = 'it''s'"),
    (EqualNullSafe(TAG, "paid"), "TAGS = 'paid'"),
    (EqualNullSafe(TAG, None), "TAGS IS NULL"),
    (In(TAG, ("a", "b")), "TAGS IN ('a', 'b')"),
    (IsNull(TAG), "TAGS IS NULL"),
    (IsNotNull(TAG), "TAGS IS NOT NULL"),
    (StringStartsWith(TAG, "pa"), "TAGS STARTSWITH 'pa'"),
    (StringEndsWith(TAG, "id"), "TAGS ENDSWITH 'id'"),
    (StringContains(TAG, "ai"), "TAGS CONTAINS 'ai'"),
    (Not(EqualTo(TAG, "paid")), "NOT (TAGS = 'paid')"),
    (Not(StringStartsWith(TAG, "pa")), "TAGS NOT STARTSWITH 'pa'"),
])
def test_a_tag_predicate_becomes_a_sql92_condition(spark_filter, sql):
    assert to_sql(spark_filter) == sql
    SqlFilter.compile(sql)


@pytest.mark.parametrize("spark_filter", [
    EqualTo(("topic",), "t"),
    GreaterThan(TAG, "a"),
    Not(EqualNullSafe(TAG, "a")),
    StringStartsWith(TAG, ""),
    In(TAG, ("a", None)),
    EqualTo(TAG, 5),
])
def test_a_predicate_the_broker_cannot_answer_like_spark_stays_with_spark(spark_filter):
    assert to_sql(spark_filter) is None


def test_is_not_null_of_keys_or_properties_is_taken_as_always_true():
    taken: list[str] = []
    assert list(push([IsNotNull(("properties",)), IsNotNull(("keys",))], taken)) == [] and taken == []


def test_push_returns_the_filters_it_did_not_take():
    left = GreaterThan(TAG, "a")
    taken: list[str] = []
    assert list(push([EqualTo(TAG, "x"), left], taken)) == [left]
    assert taken == ["TAGS = 'x'"]


def test_the_filter_option_and_pushed_conditions_combine_with_and():
    combined = combine("amount > 1 -- big ones", ["TAGS = 'x'"])
    f = SqlFilter.compile(combined)
    assert f.accepts_properties({"amount": "2", "TAGS": "x"})
    assert not f.accepts_properties({"amount": "2", "TAGS": "y"})


def test_the_pushdown_reader_reads_with_the_pushed_conditions():
    reader = TxmqPushdownBatchReader(SourceOptions.parse({"broker": "h:1", "topic": "t", "pushFilters": "true"},
                                                         streaming=False))
    assert list(reader.pushFilters([EqualTo(TAG, "x")])) == []
    assert reader.options.filter == "(TAGS = 'x')"
