"""Arrow schemas and IPC framing shared by the native service and its client.

Two shapes travel as Arrow IPC streams:
- a *send batch* (client → broker): column `body` (binary, required) and the
  optional columns in `SEND_COLUMNS`;
- a *pull batch* (broker → client): exactly `PULL_SCHEMA`, the schema the Spark
  source exposes, so the connector hands the batch to Spark without reshaping.
"""

from __future__ import annotations

import pyarrow as pa

from txmq.broker.errors import BadRequest

UTC_MICROS = pa.timestamp("us", tz="UTC")
STRING_MAP = pa.map_(pa.string(), pa.string())

PULL_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("queueId", pa.int32()),
    pa.field("queueOffset", pa.int64()),
    pa.field("messageId", pa.string()),
    pa.field("tag", pa.string()),
    pa.field("keys", pa.list_(pa.string())),
    pa.field("body", pa.binary()),
    pa.field("properties", STRING_MAP),
    pa.field("bornTimestamp", UTC_MICROS),
    pa.field("storeTimestamp", UTC_MICROS),
    pa.field("transactionId", pa.string()),
])

# Send-batch columns and the Arrow types each accepts (first one is canonical).
SEND_COLUMNS: dict[str, tuple[pa.DataType, ...]] = {
    "body": (pa.binary(), pa.large_binary()),
    "topic": (pa.string(), pa.large_string()),
    "tag": (pa.string(), pa.large_string()),
    "keys": (pa.list_(pa.string()), pa.large_list(pa.string())),
    "properties": (STRING_MAP,),
    "shardingKey": (pa.string(), pa.large_string()),
    "messageId": (pa.string(), pa.large_string()),
}


def to_ipc(data: pa.RecordBatch | pa.Table) -> bytes:
    """Serialize a batch or table as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        if isinstance(data, pa.Table):
            writer.write_table(data)
        else:
            writer.write_batch(data)
    return sink.getvalue().to_pybytes()


def table_from_ipc(payload: bytes) -> pa.Table:
    """Read an Arrow IPC stream; a payload that is not one is a BadRequest."""
    try:
        return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise BadRequest(f"arrow_ipc is not a readable Arrow IPC stream: {exc}") from None


def batch_from_ipc(payload: bytes, schema: pa.Schema = PULL_SCHEMA) -> pa.RecordBatch:
    """Read a pull payload back as one record batch (empty payload → empty batch)."""
    if not payload:
        return pa.RecordBatch.from_pylist([], schema=schema)
    table = table_from_ipc(payload)
    if table.num_rows == 0:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    batches = table.combine_chunks().to_batches()
    return batches[0]


def check_send_schema(schema: pa.Schema) -> None:
    """Refuse a send batch whose columns are unknown, mistyped or lack `body`."""
    if "body" not in schema.names:
        raise BadRequest("Arrow send batch has no 'body' column (required, binary)")
    for field in schema:
        accepted = SEND_COLUMNS.get(field.name)
        if accepted is None:
            raise BadRequest(f"Arrow send batch has unknown column {field.name!r}; "
                             f"expected some of {sorted(SEND_COLUMNS)}")
        if not any(field.type.equals(t) for t in accepted):
            raise BadRequest(f"Arrow send batch column {field.name!r} has type {field.type}, "
                             f"expected {accepted[0]}")
