"""The row shapes the txmq connector reads and writes.

The source's schema is fixed (like Kafka's): one row per committed message. The
Arrow form of that schema is derived with pyspark's own converter, because
Spark compares the record batches a Python data source yields with
`to_arrow_schema(schema, timezone="UTC")` field by field and refuses any
difference (a millisecond timestamp, a non-nullable flag, a map's field names).

The sink accepts a small set of optional columns next to the required `body`;
`sink_arrow_batch` turns Spark's input batches into the column layout the
client's `send_arrow` / `prepare_arrow` take.
"""

from __future__ import annotations

from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from txmq.broker.errors import BadRequest
from txmq.broker.protocol.native_arrow import STRING_MAP
from txmq.broker.store.message import PROP_TIMER_DELIVER_MS

SOURCE_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("queueId", IntegerType()),
        StructField("queueOffset", LongType()),
        StructField("messageId", StringType()),
        StructField("tag", StringType()),
        StructField("keys", ArrayType(StringType())),
        StructField("body", BinaryType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("bornTimestamp", TimestampType()),
        StructField("storeTimestamp", TimestampType()),
        StructField("transactionId", StringType()),
        StructField("group", StringType()),  # the broker group holding the queue ("" outside a cluster)
    ]
)

SOURCE_COLUMNS = tuple(SOURCE_SCHEMA.fieldNames())


@lru_cache(maxsize=1)
def _schema_without_group() -> pa.Schema:
    schema = source_arrow_schema()
    return schema.remove(schema.get_field_index("group"))


@lru_cache(maxsize=1)
def source_arrow_schema() -> pa.Schema:
    """The exact Arrow schema Spark expects from the source's `read()`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SOURCE_SCHEMA, timezone="UTC")


def _conform_column(column: pa.Array, target: pa.DataType) -> pa.Array:
    """Cast one pulled column to the Spark type (timestamps in ms or naive, map field names...)."""
    if column.type.equals(target):
        return column
    if pa.types.is_timestamp(target) and pa.types.is_integer(column.type):
        # epoch milliseconds
        column = pc.cast(column, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    elif pa.types.is_timestamp(target) and pa.types.is_timestamp(column.type) and column.type.tz is None:
        column = column.cast(pa.timestamp(column.type.unit, tz="UTC"))
    return column.cast(target)


def conform_source_batch(batch: pa.RecordBatch, group: str = "") -> pa.RecordBatch:
    """Return `batch` of queues of `group` with exactly the source schema: its columns in order,
    Spark's types.

    The client's pull returns "the Spark schema" but the group by contract (a broker knows
    nothing of the cluster's routes), and the checks Spark runs are strict, so every batch
    passes through here: a column the broker did not fill (e.g. no transactionId on plain
    messages) becomes nulls.
    """
    schema = source_arrow_schema()
    if batch.schema.equals(schema):
        return batch
    if batch.num_columns == len(schema) - 1 and batch.schema.equals(_schema_without_group()):
        return pa.RecordBatch.from_arrays([*batch.columns, pa.repeat(pa.scalar(group, pa.string()), batch.num_rows)],
                                          schema=schema)
    names = set(batch.schema.names)
    arrays = []
    for field in schema:
        if field.name == "group" and "group" not in names:
            arrays.append(pa.repeat(pa.scalar(group, pa.string()), batch.num_rows))
        elif field.name in names:
            arrays.append(_conform_column(batch.column(field.name), field.type))
        else:
            arrays.append(pa.nulls(batch.num_rows, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --- sink input ------------------------------------------------------------------

SINK_COLUMNS = ("body", "topic", "tag", "keys", "properties", "shardingKey", "deliverAt")


def _accepts(name: str, dtype: DataType) -> bool:
    if name == "body":
        return isinstance(dtype, (BinaryType, StringType))
    if name in ("topic", "tag", "shardingKey"):
        return isinstance(dtype, StringType)
    if name == "deliverAt":
        return isinstance(dtype, (TimestampType, LongType))
    if name == "keys":
        return isinstance(dtype, StringType) or (
            isinstance(dtype, ArrayType) and isinstance(dtype.elementType, StringType)
        )
    if name == "properties":
        return (
            isinstance(dtype, MapType)
            and isinstance(dtype.keyType, StringType)
            and isinstance(dtype.valueType, StringType)
        )
    return False


_EXPECTED = {
    "body": "binary or string",
    "topic": "string",
    "tag": "string",
    "keys": "array<string> or string",
    "properties": "map<string,string>",
    "shardingKey": "string",
    "deliverAt": "timestamp or long (epoch milliseconds)",
}


def validate_sink_schema(schema: StructType, *, default_topic: str | None) -> None:
    """Refuse a DataFrame the sink cannot write, before anything is sent.

    Unknown columns are refused too: a misspelt `tags` silently dropped would
    lose data the user meant to send.
    """
    by_name = {f.name: f.dataType for f in schema.fields}
    if "body" not in by_name:
        raise BadRequest(
            f"txmq sink: the DataFrame has no 'body' column (columns: {sorted(by_name)}); "
            "select the message payload as 'body' (binary or string)"
        )
    unknown = sorted(set(by_name) - set(SINK_COLUMNS))
    if unknown:
        raise BadRequest(
            f"txmq sink: unknown column(s) {unknown}; the sink accepts {list(SINK_COLUMNS)}"
        )
    for name, dtype in by_name.items():
        if not _accepts(name, dtype):
            raise BadRequest(
                f"txmq sink: column '{name}' has type {dtype.simpleString()}, "
                f"expected {_EXPECTED[name]}"
            )
    if "topic" not in by_name and not default_topic:
        raise BadRequest("txmq sink: no 'topic' column and no 'topic' option: say where to send")


def _deliver_ms(column: pa.Array) -> pa.Array:
    """A deliverAt column as epoch ms (int64, nulls kept): a timestamp rounded up to the next
    millisecond, so a row is never delivered before the time it names."""
    if not pa.types.is_timestamp(column.type):
        return column.cast(pa.int64())
    ticks = column.cast(pa.int64())
    if column.type.unit == "s":
        return pc.multiply(ticks, 1000)
    per_ms = {"ms": 1, "us": 1000, "ns": 1_000_000}[column.type.unit]
    return pc.divide(pc.add(ticks, per_ms - 1), per_ms)


def _with_delivery_times(properties: pa.Array | None, deliver_at: pa.Array) -> pa.Array | None:
    """The rows' properties with each non-null deliverAt added as TIMER_DELIVER_MS (the broker's
    timer property: a transaction's COMMIT schedules such a row instead of publishing it).
    None when no row has properties or a delivery time (the sink's fast path: no property column)."""
    times = _deliver_ms(deliver_at).to_pylist()
    if properties is None and all(t is None for t in times):
        return None
    rows = properties.to_pylist() if properties is not None else [None] * len(times)
    out = []
    for row, (props, at) in enumerate(zip(rows, times)):
        pairs = list(props or ())
        if at is not None:
            if any(k == PROP_TIMER_DELIVER_MS for k, _ in pairs):
                raise BadRequest(f"txmq sink: row {row} has both a deliverAt ({at}) and a "
                                 f"{PROP_TIMER_DELIVER_MS} property: give the delivery time once")
            pairs.append((PROP_TIMER_DELIVER_MS, str(at)))
        out.append(pairs or None)
    return pa.array(out, type=STRING_MAP)


def sink_arrow_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Spark's input batch → the client's send layout (body binary, keys list<string>, deliverAt
    folded into the properties as TIMER_DELIVER_MS, as the native client sends a deliver_at_ms)."""
    if "deliverAt" in batch.schema.names:
        props = batch.column("properties") if "properties" in batch.schema.names else None
        merged = _with_delivery_times(props, batch.column("deliverAt"))
        kept = [n for n in batch.schema.names if n not in ("deliverAt", "properties")]
        arrays = [batch.column(n) for n in kept] + ([merged] if merged is not None else [])
        batch = pa.RecordBatch.from_arrays(arrays, names=kept + (["properties"] if merged is not None else []))
    arrays, names = [], []
    for name in batch.schema.names:
        col = batch.column(name)
        if name == "body" and not pa.types.is_binary(col.type):
            col = col.cast(pa.binary())
        elif name == "keys" and pa.types.is_string(col.type):
            # a string column holds one key per row
            col = pa.array([None if v is None else [v] for v in col.to_pylist()], type=pa.list_(pa.string()))
        elif name in ("topic", "tag", "shardingKey") and pa.types.is_large_string(col.type):
            col = col.cast(pa.string())
        arrays.append(col)
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)
