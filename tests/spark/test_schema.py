"""Schemas: the source's Arrow batches match Spark's exactly; sink input is validated before sending."""

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, MapType, StringType, StructField, StructType

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
])
def test_bad_sink_columns_are_refused_naming_them(fields, named):
    with pytest.raises(BadRequest, match=named):
        validate_sink_schema(schema(*fields), default_topic="t")


def test_sink_needs_a_topic_column_or_option():
    with pytest.raises(BadRequest, match="topic"):
        validate_sink_schema(schema(("body", BinaryType())), default_topic=None)
