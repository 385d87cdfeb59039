"""Build the Arrow record batch a native pull returns (the Spark source's schema).

This is the hot path of Spark reads, so the columns are gathered in one pass
over the stored messages into flat Python lists and handed to Arrow once per
column (offsets arrays for `keys` and `properties`), never row by row through
Arrow's Python scalar API. Most of a pull's time is the store decoding
records; building the batch costs about 3 µs per message.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

from txmq.broker.protocol.native_arrow import PULL_SCHEMA, STRING_MAP, UTC_MICROS
from txmq.broker.server.property_names import SYSTEM_PROPERTIES
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_TRANSACTION_ID, PROP_UNIQ_KEY, StoredMessage


def message_id_of(message: StoredMessage) -> str:
    """The client's id (UNIQ_KEY) when it gave one, else the store's offset id."""
    return message.properties.get(PROP_UNIQ_KEY) or message.msg_id


def empty_pull_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=PULL_SCHEMA)


def build_pull_batch(messages: Sequence[StoredMessage]) -> pa.RecordBatch:
    """One record batch in PULL_SCHEMA for `messages` (from one queue or several)."""
    n = len(messages)
    if n == 0:
        return empty_pull_batch()
    # One comprehension per column: each is a tight loop; the properties pass
    # subtracts the system names as a C-level set operation per message.
    props_of = [m.properties for m in messages]
    topics = [m.topic for m in messages]
    queue_ids = [m.queue_id for m in messages]
    offsets = [m.queue_offset for m in messages]
    ids = [p.get(PROP_UNIQ_KEY) or m.msg_id for p, m in zip(props_of, messages)]
    tags = [p.get(PROP_TAGS) for p in props_of]
    bodies = [m.body for m in messages]
    born = [m.born_timestamp for m in messages]
    stored = [m.store_timestamp for m in messages]
    tx_ids = [p.get(PROP_TRANSACTION_ID) for p in props_of]
    key_values: list[str] = []
    key_offsets = [0]
    prop_keys: list[str] = []
    prop_values: list[str] = []
    prop_offsets = [0]
    system = SYSTEM_PROPERTIES
    for props in props_of:
        raw_keys = props.get(PROP_KEYS)
        if raw_keys:
            key_values.extend(k for k in raw_keys.split(" ") if k)
        key_offsets.append(len(key_values))
        extra = props.keys() - system
        if extra:
            for k in extra:
                if not k.startswith("__"):
                    prop_keys.append(k)
                    prop_values.append(props[k])
        prop_offsets.append(len(prop_keys))
    first_topic = topics[0]
    topic_col = (pa.repeat(pa.scalar(first_topic, pa.string()), n)
                 if topics.count(first_topic) == n else pa.array(topics, pa.string()))
    columns = [
        topic_col,
        pa.array(queue_ids, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(ids, pa.string()),
        pa.array(tags, pa.string()),
        pa.ListArray.from_arrays(pa.array(key_offsets, pa.int32()), pa.array(key_values, pa.string())),
        pa.array(bodies, pa.binary()),
        pa.MapArray.from_arrays(pa.array(prop_offsets, pa.int32()), pa.array(prop_keys, pa.string()),
                                pa.array(prop_values, pa.string())).cast(STRING_MAP),
        _micros(born),
        _micros(stored),
        pa.array(tx_ids, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=PULL_SCHEMA)


def _micros(millis: list[int]) -> pa.Array:
    return pa.array([ms * 1000 for ms in millis], pa.int64()).view(UTC_MICROS)
