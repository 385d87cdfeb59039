"""A queue range as the Arrow record batch of the Spark source's schema: what the Flight
service's DoGet streams; or, for a same-host client that asked, where its records are
(`read_plan`, see client/local_read.py).

This is the hot path of Spark reads. Two builders make the same batch:

- `pull_batch` (what DoGet streams) reads the queue range as columns
  (`store.columnar_read`) and derives every column at once
  (`store.pull_decode`, shared with the client's same-host reads). With a SQL92
  filter, only the records it selects are decoded (`store.filter_read`: the
  properties it names are found in the raw records and evaluated as columns).
  Pulls of one or two messages, and pulls filtered by tag alone, take the object
  path below (for a tag filter, the filter is skipped
  on queue entries' tag hashes and confirmed on decoded tags by
  `MessageStore.read_queue`, bounded by the filter's scan limit), and so does a
  store that only implements the `read_queue` contract.
- `build_pull_batch(messages)` builds the batch from decoded StoredMessages (one
  struct conversion of their rows). It is the reference the columnar path is tested
  against and serves the pulls filtered by tag alone and the smallest ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

from txmq.broker.protocol.native_arrow import PULL_SCHEMA, RECORDS_SCHEMA
from txmq.broker.store.property_names import SYSTEM_PROPERTIES
from txmq.broker.store.pull_decode import decode_pull_batch, empty_pull_batch
from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.store.columnar_read import ReadPlan, plan_queue_read, read_queue_bytes, supports_columnar
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_TRANSACTION_ID, PROP_UNIQ_KEY, StoredMessage
from txmq.broker.store.filter_read import filtered_pull_batch
from txmq.broker.store.message_filter import MessageFilter


def build_pull_batch(messages: Sequence[StoredMessage]) -> pa.RecordBatch:
    """One record batch in PULL_SCHEMA for `messages` (from one queue or several)."""
    if not messages:
        return empty_pull_batch()
    # One conversion of every row as a struct: this path serves the smallest pulls, whose cost
    # is mostly pyarrow's per call, so a call per column would cost several times the batch.
    system = SYSTEM_PROPERTIES
    rows = []
    for m in messages:
        props = m.properties
        raw_keys = props.get(PROP_KEYS)
        rows.append((
            m.topic, m.queue_id, m.queue_offset, props.get(PROP_UNIQ_KEY) or m.msg_id, props.get(PROP_TAGS),
            [k for k in raw_keys.split(" ") if k] if raw_keys else [],
            m.body,
            # in insertion (= on-disk) order, like the columnar path
            [(k, v) for k, v in props.items() if k not in system and not k.startswith("__")]
            if props.keys() - system else [],
            m.born_timestamp * 1000, m.store_timestamp * 1000, props.get(PROP_TRANSACTION_ID)))
    return pa.RecordBatch.from_struct_array(pa.array(rows, type=_PULL_ROW))


_PULL_ROW = pa.struct(list(PULL_SCHEMA))


# --- the columnar path ---------------------------------------------------------------


@dataclass
class PullBatch:
    """A pull's batch and the queue offsets its PullProgress reports."""

    batch: pa.RecordBatch
    next_offset: int
    min_offset: int
    max_offset: int


# Pulls of at most this many messages (a subscriber tailing a queue) take the object path: its cost
# grows with the messages, the columnar path's is mostly fixed (crossover: docs/benchmarks.md).
OBJECT_PATH_MAX_COUNT = 2


def pull_batch(store, topic: str, queue_id: int, start: int, count: int, *, max_bytes: int | None = None,
               message_filter: MessageFilter | None = None) -> PullBatch:
    """Up to `count` messages of a queue from `start` as one PULL_SCHEMA batch (see module doc);
    with a filter, the messages of the entries read that pass it."""
    filtered = message_filter is not None and not message_filter.matches_all
    columnar = supports_columnar(store) and (count > OBJECT_PATH_MAX_COUNT or filtered)
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
