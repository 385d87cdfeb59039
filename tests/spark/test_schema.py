"""Schemas: the source's Arrow batches match Spark's exactly; sink input is validated before sending."""

import pyarrow as pa
import pytest
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, MapType, StringType, StructField,
                               StructType, TimestampType)

from txmq.broker.errors import BadRequest
from txmq.spark.schema import conform_source_batch, sink_arrow_batch, source_arrow_schema, validate_sink_schema


def test_source_arrow_schema_has_the_documented_columns():
    assert source_arrow_schema().names == ["topic", "queueId", "queueOffset", "messageId", "tag", "keys", "body",
                                           "properties", "bornTimestamp", "storeTimestamp", "transactionId", "group"]


def test_a_batch_missing_columns_and_with_ms_timestamps_is_conformed():
    raw = pa.RecordBatch.from_pydict({"topic": ["t"], "body": [b"x"], "storeTimestamp": pa.array([1000], pa.int64()),
                                      "queueId": pa.array([1], pa.int64())})
    out = conform_source_batch(raw)
    assert out.schema.equals(source_arrow_schema())
    assert out.column("storeTimestamp").cast(pa.int64())[0].as_py() == 1_000_000
    assert out.column("transactionId").null_count == 1


def schema(*fields):
    return StructType([StructField(n, t) for n, t in fields])


def test_sink_accepts_string_body_and_string_keys():
    validate_sink_schema(schema(("body", StringType()), ("keys", StringType())), default_topic="t")
    out = sink_arrow_batch(pa.RecordBatch.from_pydict({"body": ["a", None], "keys": ["k", None]}))
    assert out.column("body").type == pa.binary() and out.column("keys").to_pylist() == [["k"], None]


@pytest.mark.parametrize("fields, named", [
    ([("value", BinaryType())], "no 'body'"),
    ([("body", IntegerType())], "'body' has type int"),
    ([("body", BinaryType()), ("keys", ArrayType(IntegerType()))], "'keys'"),
    ([("body", BinaryType()), ("properties", MapType(StringType(), IntegerType()))], "'properties'"),
    ([("body", BinaryType()), ("tags", StringType())], "unknown column"),
    ([("body", BinaryType()), ("deliverAt", StringType())], "'deliverAt' has type string"),
])
def test_bad_sink_columns_are_refused_naming_them(fields, named):
    with pytest.raises(BadRequest, match=named):
        validate_sink_schema(schema(*fields), default_topic="t")


def test_sink_needs_a_topic_column_or_option():
    with pytest.raises(BadRequest, match="topic"):
        validate_sink_schema(schema(("body", BinaryType())), default_topic=None)


@pytest.mark.parametrize("dtype", [TimestampType(), LongType()])
def test_sink_accepts_a_deliver_at_timestamp_or_epoch_ms_column(dtype):
    validate_sink_schema(schema(("body", BinaryType()), ("deliverAt", dtype)), default_topic="t")


def test_deliver_at_becomes_the_timer_property_and_null_means_now():
    at = pa.array([1_800_000_000_123_400, None], pa.timestamp("us", tz="UTC"))  # .1234 ms: rounded up
    out = sink_arrow_batch(pa.RecordBatch.from_pydict({"body": [b"a", b"b"], "deliverAt": at}))
    assert out.schema.names == ["body", "properties"]
    assert out.column("properties").to_pylist() == [[("TIMER_DELIVER_MS", "1800000000124")], None]


def test_deliver_at_epoch_ms_is_added_to_the_rows_own_properties():
    props = pa.array([[("k", "v")], None], pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_pydict({"body": [b"a", b"b"], "properties": props,
                                        "deliverAt": pa.array([None, 1_800_000_000_000], pa.int64())})
    assert sink_arrow_batch(batch).column("properties").to_pylist() == [
        [("k", "v")], [("TIMER_DELIVER_MS", "1800000000000")]]


def test_a_batch_whose_deliver_at_is_all_null_is_sent_without_properties():
    batch = pa.RecordBatch.from_pydict({"body": [b"a"], "deliverAt": pa.array([None], pa.int64())})
    assert sink_arrow_batch(batch).schema.names == ["body"]


def test_a_row_giving_its_delivery_time_twice_is_refused_naming_it():
    props = pa.array([[("TIMER_DELIVER_MS", "1")]], pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_pydict({"body": [b"a"], "properties": props, "deliverAt": pa.array([5], pa.int64())})
    with pytest.raises(BadRequest, match="row 0 has both a deliverAt"):
        sink_arrow_batch(batch)
