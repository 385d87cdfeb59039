"""The Arrow schemas the data plane's batches have (Flight streams carry them).

- a *send batch* (client → broker, DoPut): column `body` (binary, required) and the
  optional columns in `SEND_COLUMNS`;
- a *pull batch* (broker → client, DoGet): exactly `PULL_SCHEMA`, the schema the Spark
  source exposes, so the connector hands the batch to Spark without reshaping.

and the names of the service's Flight actions.
"""

from __future__ import annotations

import pyarrow as pa

from txmq.broker.errors import BadRequest

# The Flight action that ends a transaction: body a native EndTransactionRequest, one result, its
# EndTransactionResponse: the gRPC call's twin, with a cheaper round trip (a COMMIT's latency).
END_TRANSACTION_ACTION = "end-transaction"

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

# a records pull (PullRequest.records): each message's CommitLog record as stored, for a history copy
RECORDS_SCHEMA = pa.schema([pa.field("queueOffset", pa.int64()), pa.field("record", pa.binary())])

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
