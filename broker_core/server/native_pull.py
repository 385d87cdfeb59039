"""A queue range as the Arrow record batch of the Spark source's schema: what the Flight
service's DoGet streams; or, for a same-host client that asked, where its records are
(`read_plan`, see client/local_read.py).

This is the hot path of Spark reads. Two builders make the same batch:

- `pull_batch` (what DoGet streams) reads the queue range as columns
  (`store.columnar_read`) and derives every column at once
  (`store.pull_decode`, shared with the client's same-host reads). With a SQL92
  filter, only the records it selects are decoded (`store.filter_read`: the
  properties it names are found in the raw records and evaluated as columns).
  Pulls filtered by tag alone take the object path below (the filter is skipped
  on queue entries' tag hashes and confirmed on decoded tags by
  `MessageStore.read_queue`, bounded by the filter's scan limit), and so does a
  store that only implements the `read_queue` contract.
- `build_pull_batch(messages)` builds the batch from decoded StoredMessages (one
  comprehension per column). It is the reference the columnar path is tested
  against and serves the pulls filtered by tag alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

from txmq.broker.protocol.native_arrow import PULL_SCHEMA, RECORDS_SCHEMA, STRING_MAP, UTC_MICROS
from txmq.broker.store.property_names import SYSTEM_PROPERTIES
from txmq.broker.store.pull_decode import decode_pull_batch, empty_pull_batch
from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.store.columnar_read import ReadPlan, plan_queue_read, read_queue_bytes, supports_columnar
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_TRANSACTION_ID, PROP_UNIQ_KEY, StoredMessage
from txmq.broker.store.filter_read import filtered_pull_batch
from txmq.broker.store.message_filter import MessageFilter


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
        if props.keys() - system:  # in insertion (= on-disk) order, like the columnar path
            for k, v in props.items():
                if k not in system and not k.startswith("__"):
                    prop_keys.append(k)
                    prop_values.append(v)
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
                                pa.array(prop_values, pa.string()), type=STRING_MAP),
        _micros(born),
        _micros(stored),
        pa.array(tx_ids, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=PULL_SCHEMA)


def _micros(millis: list[int]) -> pa.Array:
    return pa.array([ms * 1000 for ms in millis], pa.int64()).view(UTC_MICROS)


# --- the columnar path ---------------------------------------------------------------


@dataclass
class PullBatch:
    """A pull's batch and the queue offsets its PullProgress reports."""

    batch: pa.RecordBatch
    next_offset: int
    min_offset: int
    max_offset: int


def pull_batch(store, topic: str, queue_id: int, start: int, count: int, *, max_bytes: int | None = None,
               message_filter: MessageFilter | None = None) -> PullBatch:
    """Up to `count` messages of a queue from `start` as one PULL_SCHEMA batch (see module doc);
    with a filter, the messages of the entries read that pass it."""
    filtered = message_filter is not None and not message_filter.matches_all
    columnar = supports_columnar(store)
    if not columnar or (filtered and message_filter.sql is None):
        read = store.read_queue(topic, queue_id, start, count, max_bytes=max_bytes,
                                tag_filter=message_filter if filtered else None)
        return PullBatch(build_pull_batch(read.messages), read.next_offset, read.min_offset, read.max_offset)
    read = read_queue_bytes(store, topic, queue_id, start, count, max_bytes=max_bytes, one_kind=True,
                            in_place=not filtered)
    if filtered:
        store.filter_bits.register(topic, message_filter)
        bits = store.filter_bits.may_pass(topic, queue_id, start, len(read.phys), message_filter)
        batch = filtered_pull_batch(read, topic, queue_id, message_filter, bits)
    else:
        batch = decode_pull_batch(read.data, read.record_at, read.phys, read.sizes, topic, queue_id, read.refs)
    return PullBatch(batch, read.next_offset, read.min_offset, read.max_offset)


def records_batch(store, topic: str, queue_id: int, start: int, count: int, *, max_bytes: int) -> PullBatch:
    """Up to `count` records of a queue from `start`, undecoded, as one RECORDS_SCHEMA batch."""
    read = read_queue_bytes(store, topic, queue_id, start, count, max_bytes=max_bytes)
    data = read.data
    records = [data[at:at + size].tobytes() for at, size in zip(read.record_at.tolist(), read.sizes.tolist())]
    return PullBatch(records_arrays(range(start, start + len(records)), records), read.next_offset,
                     read.min_offset, read.max_offset)


def records_arrays(offsets, records) -> pa.RecordBatch:
    """A RECORDS_SCHEMA batch (an empty one for a records pull of an empty range)."""
    return pa.RecordBatch.from_arrays([pa.array(offsets, pa.int64()), pa.array(records, pa.binary())],
                                      schema=RECORDS_SCHEMA)


def read_plan(store, topic: str, queue_id: int, start: int, count: int, *, max_bytes: int,
              message_filter: MessageFilter | None) -> ReadPlan | None:
    """Where the next records of a read are, for a client decoding the CommitLog itself; None when
    the step is answered with a batch instead (a filter is applied here, the store has no segment
    files, or the segment cannot be named)."""
    if (message_filter is not None and not message_filter.matches_all) or not supports_columnar(store):
        return None
    return plan_queue_read(store, topic, queue_id, start, count, max_bytes=max_bytes)


def plan_message(plan: ReadPlan) -> pb.LocalReadPlan:
    """PullProgress.plan for `plan`."""
    seg = plan.segment
    return pb.LocalReadPlan(
        physical_offsets=plan.phys.astype("<i8").tobytes(), sizes=plan.sizes.astype("<i4").tobytes(),
        segment=pb.CommitLogSegment(path=seg.path, start=seg.start, device=seg.device, inode=seg.inode))
