"""Build a pull's Arrow batch (the Spark source's schema) from records read as columns.

Shared by the broker, which answers a pull with this batch, and the client,
which builds the very same batch itself when it reads the broker's CommitLog
files on the broker's host (client/local_read.py). Every column is derived with
numpy and pyarrow.compute: the property texts are split into pairs for the whole
batch at once (`pull_decode_properties`) and values are cut out with one Arrow take
each, so no Python object and no Arrow string is made per message beyond the
output columns' own.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txmq.broker.protocol.native_arrow import PULL_SCHEMA, STRING_MAP, UTC_MICROS
from txmq.broker.store.commit_ref import SlotView
from txmq.broker.store.pull_decode_kernel import pull_batch_compiled
from txmq.broker.store.pull_decode_properties import PropertyPairs, split_properties
from txmq.broker.store.record_columns import RecordColumns, decode_columns
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_TRANSACTION_ID, PROP_UNIQ_KEY


def decode_pull_batch(data: np.ndarray, at: np.ndarray, phys: np.ndarray, sizes: np.ndarray, topic: str,
                      queue_id: int, refs: SlotView | None = None) -> pa.RecordBatch:
    """The PULL_SCHEMA batch of a queue's records at `at` in `data` (CommitLog bytes; `phys`
    and `sizes` from their queue entries): compiled when it can (pull_decode_kernel.py), else
    decoded column by column here. Raises StoreError when a record disagrees with its entry.
    `refs` (a read `in_place`, columnar_read.RecordBytes.refs): `data` and `at` hold the halves of
    messages committed by reference, decoded in place; when the compiled pass cannot, the records
    they stand for are written (refs.finals) and decoded."""
    batch = pull_batch_compiled(data, at, phys, sizes, topic, refs)
    if batch is not None:
        return batch
    if refs is not None:
        data, at = refs.finals()
        return decode_pull_batch(data, at, phys, sizes, topic, queue_id)
    return build_pull_batch_columnar(decode_columns(data, at, phys, sizes, topic, queue_id), topic)


def empty_pull_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=PULL_SCHEMA)


def _keys_column(props: PropertyPairs, n: int) -> pa.ListArray:
    """KEYS split on spaces, empty keys dropped; an empty list where there is none."""
    hits = props.pairs_named(PROP_KEYS)
    counts = np.zeros(n, dtype=np.int64)
    if len(hits):
        lists = pc.split_pattern(props.values(hits), " ")
        owner = props.row[hits][pc.list_parent_indices(lists).to_numpy()]
        tokens = pc.list_flatten(lists)
        nonempty = pc.greater(pc.binary_length(tokens), 0)
        tokens = tokens.filter(nonempty)
        owner = owner[nonempty.to_numpy(zero_copy_only=False)]
        counts = np.bincount(owner, minlength=n)
    else:
        tokens = pa.array([], pa.string())
    return pa.ListArray.from_arrays(pa.array(_offsets(counts)), tokens)


def _user_properties_column(props: PropertyPairs, n: int) -> pa.MapArray:
    """Every property that is neither a system name nor starts with "__", per record."""
    user = props.user
    counts = np.bincount(props.row[user], minlength=n)
    names = props.names(user)
    return pa.MapArray.from_arrays(pa.array(_offsets(counts)), names, props.values(user), type=STRING_MAP)


def _message_ids(records: RecordColumns, props: PropertyPairs, n: int) -> pa.StringArray:
    """UNIQ_KEY where it is set and not empty, else the offset message id."""
    uniq = props.by_row(n, PROP_UNIQ_KEY)
    given = pc.fill_null(pc.greater(pc.binary_length(uniq), 0), False).to_numpy(zero_copy_only=False)
    if given.all():
        return uniq
    if not given.any():
        return records.offset_ids()
    missing = np.flatnonzero(~given)
    index = np.arange(n, dtype=np.int64)
    index[missing] = n + np.arange(len(missing))
    return pa.concat_arrays([uniq, records.offset_ids(missing)]).take(pa.array(index))


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=out[1:])
    return out


def build_pull_batch_columnar(records: RecordColumns, topic: str | None = None) -> pa.RecordBatch:
    """The PULL_SCHEMA batch of `records`, equal to build_pull_batch of the same messages.

    `topic` is the topic the records are expected to have (a queue's records all
    carry its topic); it lets the topic column be one repeated value.
    """
    n = records.count
    if n == 0:
        return empty_pull_batch()
    props = split_properties(records)
    columns = [
        records.topics(topic),
        pa.array(records.queue_id, pa.int32()),
        pa.array(records.queue_offset, pa.int64()),
        _message_ids(records, props, n),
        props.by_row(n, PROP_TAGS),
        _keys_column(props, n),
        records.bodies(),
        _user_properties_column(props, n),
        pa.array(records.born_ts * 1000, pa.int64()).view(UTC_MICROS),
        pa.array(records.store_ts * 1000, pa.int64()).view(UTC_MICROS),
        props.by_row(n, PROP_TRANSACTION_ID),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=PULL_SCHEMA)
