"""Decode a pull's CommitLog records straight into its Arrow batch, in compiled passes.

The numpy path (`columnar_read.decode_columns`, then `pull_decode`) builds a
pull batch with a dozen array passes, gathers and Arrow takes per column; on a
Spark executor reading through local reads that costs more CPU per row than
Spark spends moving the row into the JVM. This module does the same work in
numba-compiled loops that look at each record once:

1. `scan` (pull_decode_numba.py) walks every record: checks its header against
   its queue entry (as decode_columns does), reads the fixed fields, copies the
   body into the body column's buffer, checks the property text is UTF-8 and made
   of `name \x01 value \x02` pairs, and notes where the tag, keys, message id,
   transaction id and user properties are;
2. `gather` copies those ranges back to back into Arrow offsets and value
   buffers; `message_ids` writes UNIQ_KEY or the offset message id.

Every pull takes these loops, whatever its size. Anything unusual (a damaged
record, a record of another topic, a malformed or non-UTF-8 property text, more
than 2 GiB of values) makes `pull_batch_compiled` return None: the caller takes
the numpy path, which raises the precise error or handles the rare case. So the
compiled path only ever produces a batch equal to the numpy path's
(tests/server/test_pull_columnar.py checks both against the per-record decode).
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from txmq.broker.protocol.native_arrow import PULL_SCHEMA, STRING_MAP, UTC_MICROS
from txmq.broker.store.commit_ref import SlotView
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_TRANSACTION_ID, PROP_UNIQ_KEY
from txmq.broker.store.property_names import SYSTEM_PROPERTIES

# what a property name is to a pull (pull_decode_numba classifies names into these)
USER, TAG, KEYS, UNIQ_KEY, TRANSACTION_ID, SYSTEM = range(6)
_SPECIAL = {PROP_TAGS: TAG, PROP_KEYS: KEYS, PROP_UNIQ_KEY: UNIQ_KEY, PROP_TRANSACTION_ID: TRANSACTION_ID}

# what the compiled scan says
_OK = 0
_FALLBACK = 1  # the numpy path decides (an error, or a case the compiled path leaves to it)
_MORE = 2  # more KEYS tokens or user properties than the scan was given room for


@functools.cache
def _compiled():
    """The compiled kernels' module, imported on the first pull so processes that never pull never
    import numba (compiled once, cached on disk)."""
    from txmq.broker.store import pull_decode_numba

    return pull_decode_numba


def pull_batch_compiled(data: np.ndarray, at: np.ndarray, phys: np.ndarray, sizes: np.ndarray,
                        topic: str, refs: SlotView | None = None) -> pa.RecordBatch | None:
    """The PULL_SCHEMA batch of the records at `at` in `data` (their queue entries' `phys` and
    `sizes`), all of `topic`; None when the numpy path must decide (see the module doc). With
    `refs` the records are the halves of messages committed by reference, decoded in place: the
    slots' columns give what the records they stand for take from elsewhere (queue id and offset,
    store time and host; the commit_ref.SlotView), so no final record is written."""
    n = len(at)
    k = _compiled()
    sizes = sizes.astype(np.int64, copy=False)
    in_place = None
    if refs is not None:
        in_place = _in_place(refs)
        if in_place is None:
            return None
        hosts, host_of, host_lens = in_place[1]
        in_place = (sizes, host_lens[refs.commit_of], *in_place[0], refs.drop_mask[refs.commit_of])
        phys, sizes = refs.half_phys, refs.half_size  # what each half's header is checked against
    # every column's values lie within the records (message ids too: 56 characters at most, a
    # record is longer), so one check keeps every Arrow offset within int32
    record_bytes = int(sizes.sum())
    if record_bytes >= 1 << 31 or not data.flags.c_contiguous:
        return None
    topic_raw = np.frombuffer(topic.encode(), dtype=np.uint8)
    body_offsets, bodies = _buffers(n, record_bytes)  # the bodies take less
    at, phys = at.astype(np.int64, copy=False), phys.astype(np.int64, copy=False)
    room = 4 * n
    while True:
        scan = k.scan_records(data, at, phys, sizes, topic_raw, _int32s(body_offsets), _bytes(bodies),
                              np.empty((room, 2), dtype=np.int64), np.empty((room, 4), dtype=np.int64), in_place)
        if scan[0] != _MORE:
            break
        room *= 4  # records with many keys or user properties
    (status, queue_id, queue_offset, born, stored, host_at, host_len,
     tag_at, tag_len, uniq_at, uniq_len, tx_at, tx_len, key_count, tokens, user_count, pairs) = scan
    if status != _OK:
        return None
    host_data = data
    if refs is not None:  # the fields a record takes from its slot and commit record, not from its half
        queue_id, queue_offset = refs.queue_id.astype(np.int32), refs.queue_offset
        stored = refs.store_ts[refs.commit_of] * 1000
        host_data, host_at, host_len = hosts, host_of[refs.commit_of], host_lens[refs.commit_of]
        phys = refs.address
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.array(queue_id, pa.int32()),
        pa.array(queue_offset, pa.int64()),
        _message_ids(k, data, uniq_at, uniq_len, host_data, host_at, host_len, phys),
        _strings(k, pa.string(), data, tag_at, tag_len),
        pa.ListArray.from_arrays(_row_offsets(key_count), _strings(k, pa.string(), data, tokens[:, 0], tokens[:, 1])),
        pa.Array.from_buffers(pa.binary(), n, [None, body_offsets, bodies]),
        _user_properties(k, data, user_count, pairs),
        pa.array(born, pa.int64()).view(UTC_MICROS),
        pa.array(stored, pa.int64()).view(UTC_MICROS),
        _strings(k, pa.string(), data, tx_at, tx_len),
    ], schema=PULL_SCHEMA)


def _buffers(n: int, total: int) -> tuple[pa.Buffer, pa.Buffer]:
    """Offsets and values buffers for n strings of `total` bytes, from Arrow's memory pool: it
    keeps freed memory for the next batch, where a fresh allocation would fault in new pages."""
    return pa.allocate_buffer(4 * (n + 1)), pa.allocate_buffer(max(total, 1))


def _int32s(buf: pa.Buffer) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.int32)


def _bytes(buf: pa.Buffer) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8)


def _strings(k, dtype: pa.DataType, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Values data[starts[i]:starts[i]+lengths[i]] as a string or binary array; null where lengths[i] < 0."""
    offsets, values = _buffers(len(starts), int(np.maximum(lengths, 0).sum()))
    k.gather(data, starts, lengths, _int32s(offsets), _bytes(values))
    missing = lengths < 0
    validity = pa.py_buffer(np.packbits(~missing, bitorder="little")) if missing.any() else None
    return pa.Array.from_buffers(dtype, len(starts), [validity, offsets, values])


def _in_place(refs: SlotView):
    """((drop name table, name lengths), (store hosts back to back, each commit record's host
    there, its length)) for decoding `refs`' halves in place; None when a dropped property is one
    a pull shows (the final records decide then: pull_decode_numba.scan does not cut properties)."""
    if any(_kind_of(name) != SYSTEM for name in refs.drop_names):
        return None
    raws = [d.encode() for d in refs.drop_names]
    table = np.zeros((len(raws), max([1, *map(len, raws)])), dtype=np.uint8)
    for j, raw in enumerate(raws):
        table[j, :len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    lens = np.fromiter(map(len, refs.store_hosts), dtype=np.int64, count=len(refs.store_hosts))
    host_of = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(lens[:-1], out=host_of[1:])
    hosts = np.frombuffer(b"".join(refs.store_hosts) or b"\0", dtype=np.uint8)
    return (table, np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))), (hosts, host_of, lens)


def _kind_of(name: str) -> int:
    """What a property name is to a pull (pull_decode_numba._kind's rule)."""
    if name in SYSTEM_PROPERTIES:
        return _SPECIAL.get(name, SYSTEM)
    return SYSTEM if name.startswith("__") else USER


def _message_ids(k, data, uniq_at, uniq_len, hosts, host_at, host_len, phys) -> pa.StringArray:
    """UNIQ_KEY where it is set and not empty, else the offset message id (store host, in `hosts`,
    and physical offset in uppercase hex)."""
    total = int(np.where(uniq_len > 0, uniq_len, 2 * (host_len + 8)).sum())
    offsets, values = _buffers(len(uniq_at), total)
    k.message_ids_of(data, uniq_at, uniq_len, hosts, host_at, host_len, phys, _int32s(offsets), _bytes(values))
    return pa.Array.from_buffers(pa.string(), len(uniq_at), [None, offsets, values])


def _row_offsets(counts: np.ndarray) -> pa.Array:
    out = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=out[1:])
    return pa.Array.from_buffers(pa.int32(), len(out), [None, pa.py_buffer(out)])


def _user_properties(k, data, counts: np.ndarray, pairs: np.ndarray) -> pa.MapArray:
    """The properties column: each record's user properties, in their on-disk order."""
    names = _strings(k, pa.string(), data, pairs[:, 0], pairs[:, 1])
    values = _strings(k, pa.string(), data, pairs[:, 2], pairs[:, 3])
    return pa.MapArray.from_arrays(_row_offsets(counts), names, values, type=STRING_MAP)
