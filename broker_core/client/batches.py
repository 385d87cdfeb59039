"""Build the Arrow send batch (the native service's many-messages payload) from Python values."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pyarrow as pa

from txmq.broker.client.types import Message, send_properties
from txmq.broker.protocol.native_arrow import SEND_COLUMNS


def _field(m: Any, name: str, attr: str) -> Any:
    if isinstance(m, Mapping):
        return m.get(name, m.get(attr))
    return getattr(m, attr)  # a Message has every send column's attribute


def to_arrow_table(messages: Iterable[Message | Mapping[str, Any] | bytes]) -> pa.Table:
    """An Arrow table with the send columns from Messages, dicts (Arrow or attribute names) or bare bodies.

    Only columns some message uses are included, so a batch of bodies stays a
    one-column payload.
    """
    rows = [Message(topic=None, body=m) if isinstance(m, (bytes, bytearray, memoryview)) else m for m in messages]
    columns: dict[str, list] = {
        "body": [bytes(_field(m, "body", "body")) for m in rows],
        "topic": [_field(m, "topic", "topic") for m in rows],
        "tag": [_field(m, "tag", "tag") for m in rows],
        "keys": [list(_field(m, "keys", "keys") or ()) or None for m in rows],
        "properties": [list(send_properties(m).items()) or None for m in rows],
        "shardingKey": [_field(m, "shardingKey", "sharding_key") for m in rows],
        "messageId": [_field(m, "messageId", "message_id") for m in rows],
    }
    arrays, names = [], []
    for name, values in columns.items():
        if name != "body" and all(v is None for v in values):
            continue
        arrays.append(pa.array(values, SEND_COLUMNS[name][0]))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)
