"""A filtered columnar read: skip the records a SQL92 filter rejects without decoding them.

The nearest thing to seed 003's dispatch-time bit map that leaves the write path
alone (see docs/rocketmq-protocol.md, "SQL92 filters"): instead of a Bloom filter
per registered expression written beside each ConsumeQueue entry, the pull that
reads the records finds only the properties the filter names in each record's
property text (filter_read_numba.py, compiled, no Python per record), evaluates the
filter over those values as columns (sql92/columnar.py: once per distinct value),
and decodes just the records that pass. A match is then confirmed on the decoded
batch, tags included, by the same filter; a record whose layout the scan cannot
follow is handed to the full decode, which names what is wrong with it.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from txmq.broker.errors import StoreError
from txmq.broker.store.columnar_read import RecordBytes, read_queue_bytes
from txmq.broker.store.filter_read_numba import find_property_values, gather_values
from txmq.broker.store.message_filter import MessageFilter, visible_to_sql
from txmq.broker.store.pull_decode import decode_pull_batch, empty_pull_batch
from txmq.broker.store.sql92 import Columns


class RecordColumnsOf(Columns):
    """Named property values of raw records, as the filter's columns."""

    def __init__(self, n: int, arrays: dict[str, pa.Array]) -> None:
        super().__init__(n)
        self.arrays = arrays

    def strings(self, name: str) -> pa.Array:
        found = self.arrays.get(name)
        return found if found is not None else pa.nulls(self.n, pa.string())


def _value_array(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The values as a string array (null where the property is missing); raises ArrowInvalid on bad UTF-8."""
    n = len(lengths)
    present = lengths >= 0
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(present, lengths, 0), out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    gather_values(data, starts, lengths, offsets, out)
    validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    binary = pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(out)])
    return binary.cast(pa.string())


def property_columns(read: RecordBytes, names: Sequence[str]) -> tuple[dict[str, pa.Array], np.ndarray]:
    """The first value of each of `names` in every record of `read`, as string arrays (null where
    absent), and which records the scan could not follow (left to the full decode). Raises
    ArrowInvalid when a value is not UTF-8."""
    n = len(read.phys)
    encoded = [name.encode() for name in names]
    name_len = np.array([len(b) for b in encoded], dtype=np.int64)
    name_at = np.zeros(len(encoded), dtype=np.int64)
    if len(encoded) > 1:
        np.cumsum(name_len[:-1], out=name_at[1:])
    name_bytes = np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8)
    value_at = np.zeros((n, len(names)), dtype=np.int64)
    value_len = np.zeros((n, len(names)), dtype=np.int64)
    unreadable = np.zeros(n, dtype=np.bool_)
    data = np.asarray(read.data)
    find_property_values(data, read.record_at, read.sizes.astype(np.int64, copy=False), name_bytes, name_at,
                         name_len, value_at, value_len, unreadable)
    arrays = {name: _value_array(data, np.ascontiguousarray(value_at[:, k]), np.ascontiguousarray(value_len[:, k]))
              for k, name in enumerate(names)}
    return arrays, unreadable


def prefilter(read: RecordBytes, message_filter: MessageFilter) -> np.ndarray | None:
    """Which records may pass (the filter selects them, or the scan could not read them); None when
    the scan cannot decide for this read (a value is not UTF-8): then every record is decoded."""
    names = sorted(name for name in message_filter.sql.names if visible_to_sql(name))
    try:
        arrays, unreadable = property_columns(read, names)
    except pa.ArrowInvalid:
        return None
    return message_filter.sql.mask_columns(RecordColumnsOf(len(read.phys), arrays)) | unreadable


def records_with_property(store, topic: str, queue_id: int, start: int, end: int, names: Sequence[str], *,
                          batch: int = 65536) -> Iterator[tuple[np.ndarray, dict[str, pa.Array]]]:
    """Chunks of (queue offsets, {name: values}) of the records in [start, end) of a queue that
    carry the property names[0], found by the compiled scan without decoding the others. A
    record the scan cannot follow raises StoreError naming it: a caller relying on the answer
    must not take an unreadable record for one without the property."""
    pos = start
    while pos < end:
        read = read_queue_bytes(store, topic, queue_id, pos, min(batch, end - pos))
        if not len(read.phys):
            return
        arrays, unreadable = property_columns(read, names)
        if unreadable.any():
            bad = pos + int(np.flatnonzero(unreadable)[0])
            raise StoreError(f"record {topic}/{queue_id}@{bad} cannot be scanned for properties {list(names)}")
        rows = np.flatnonzero(np.asarray(arrays[names[0]].is_valid().to_numpy(zero_copy_only=False)))
        if len(rows):
            taken = pa.array(rows)
            yield pos + rows, {name: values.take(taken) for name, values in arrays.items()}
        pos = read.next_offset


def filtered_pull_batch(read: RecordBytes, topic: str, queue_id: int, message_filter: MessageFilter,
                        may_pass: np.ndarray | None = None) -> pa.RecordBatch:
    """The PULL_SCHEMA batch of the records of `read` that pass `message_filter` (which has a SQL part).
    `may_pass`: the records' filter bits (filter_bits.py), when they cover the read: no scan then."""
    if len(read.phys) == 0:
        return empty_pull_batch()
    keep = may_pass if may_pass is not None else prefilter(read, message_filter)
    if keep is None:
        rows = slice(None)
    else:
        rows = np.flatnonzero(keep)
        if not len(rows):
            return empty_pull_batch()
    batch = decode_pull_batch(read.data, read.record_at[rows], read.phys[rows], read.sizes[rows], topic, queue_id)
    return message_filter.apply(batch)
