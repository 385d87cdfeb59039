"""Decode a pull's CommitLog records straight into its Arrow batch, in compiled passes.

The numpy path (`columnar_read.decode_columns`, then `pull_columns`) builds a
pull batch with a dozen array passes, gathers and Arrow takes per column; on a
Spark executor reading through local reads that costs more CPU per row than
Spark spends moving the row into the JVM. This module does the same work in
numba-compiled loops that look at each record once:

1. `_scan` walks every record: checks its header against its queue entry (as
   decode_columns does), reads the fixed fields, checks the property text is
   UTF-8 and made of `name \\x01 value \\x02` pairs, and notes where the tag,
   keys, message id, transaction id and user properties are;
2. `_gather` copies ranges (bodies, values, names) back to back into Arrow
   offsets and value buffers; `_message_ids` writes UNIQ_KEY or the offset id.

Anything unusual (a damaged record, a record of another topic, a malformed or
non-UTF-8 property text, more than 2 GiB of values) makes `pull_batch_compiled`
return None: the caller takes the numpy path, which raises the precise error or
handles the rare case. So the compiled path only ever produces a batch equal to
the numpy path's (tests/server/test_pull_columnar.py checks both against the
per-record decode), and numba stays optional: without it every pull takes the
numpy path.

Small pulls take the numpy path too (`COMPILED_MIN_ROWS`): a process that only
ever pulls a few messages (a broker answering RocketMQ clients, a CLI tail)
never pays for importing numba or loading the compiled code.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from txmq.broker.protocol.native_arrow import PULL_SCHEMA, STRING_MAP, UTC_MICROS
from txmq.broker.protocol.property_names import SYSTEM_PROPERTIES
from txmq.broker.store.message import (
    PROP_KEYS,
    PROP_TAGS,
    PROP_TRANSACTION_ID,
    PROP_UNIQ_KEY,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
)
from txmq.broker.store.record import CRC_PREFIX, CRC_SUFFIX_LEN, MAGIC_CODE

COMPILED_MIN_ROWS = 256  # pulls of fewer records take the numpy path (see the module doc)

# what a property name is to a pull
USER, TAG, KEYS, UNIQ_KEY, TRANSACTION_ID, SYSTEM = range(6)
_SPECIAL = {PROP_TAGS: TAG, PROP_KEYS: KEYS, PROP_UNIQ_KEY: UNIQ_KEY, PROP_TRANSACTION_ID: TRANSACTION_ID}

_OK = 0
_FALLBACK = 1  # the numpy path decides (an error, or a case the compiled path leaves to it)
_MORE = 2  # more KEYS tokens or user properties than the scan was given room for


def name_hash(name: bytes) -> int:
    """The bucket of a property name in the system-name table (pull_kernel_numba._kind hashes alike)."""
    return (len(name) * 131 + name[0] * 31 + name[len(name) // 2] * 7 + name[-1]) & (_BUCKETS - 1)


_BUCKETS = 256


def _name_table() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The system property names as a hash table for compiled code: their bytes back to back,
    ordered by bucket, so a name is compared only with the one or two names of its bucket:
    (bytes, start of each name, first name of each bucket, one past its last, each name's kind)."""
    names = sorted((n.encode() for n in SYSTEM_PROPERTIES), key=lambda b: (name_hash(b), b))
    starts = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in names], out=starts[1:])
    first = np.zeros(_BUCKETS, dtype=np.int64)
    last = np.zeros(_BUCKETS, dtype=np.int64)
    for i, b in enumerate(names):
        h = name_hash(b)
        if last[h] == first[h]:
            first[h] = i
        last[h] = i + 1
    kinds = np.array([_SPECIAL.get(b.decode(), SYSTEM) for b in names], dtype=np.int64)
    return np.frombuffer(b"".join(names), dtype=np.uint8).copy(), starts, first, last, kinds


_NAMES = _name_table()
_CRC_NAME = np.frombuffer(CRC_PREFIX, dtype=np.uint8).copy()
_CRC_TAIL = len(CRC_PREFIX) + CRC_SUFFIX_LEN
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8).copy()

_kernels = None
_kernels_lock = threading.Lock()


def _compiled():
    """The compiled kernels, or None without numba (compiled once per process, cached on disk)."""
    global _kernels
    if _kernels is None:
        with _kernels_lock:
            if _kernels is None:
                try:
                    from txmq.broker.protocol import pull_kernel_numba
                except ImportError:
                    _kernels = False
                else:
                    _kernels = pull_kernel_numba
    return _kernels or None


def compiled_available() -> bool:
    return _compiled() is not None


def pull_batch_compiled(data: np.ndarray, at: np.ndarray, phys: np.ndarray, sizes: np.ndarray,
                        topic: str) -> pa.RecordBatch | None:
    """The PULL_SCHEMA batch of the records at `at` in `data` (their queue entries' `phys` and
    `sizes`), all of `topic`; None when the numpy path must decide (see the module doc)."""
    n = len(at)
    if n < COMPILED_MIN_ROWS:
        return None
    k = _compiled()
    if k is None:
        return None
    topic_raw = np.frombuffer(topic.encode(), dtype=np.uint8)
    sizes = sizes.astype(np.int64, copy=False)
    record_bytes = int(sizes.sum())  # the bodies take less
    if record_bytes >= 1 << 31 or not data.flags.c_contiguous:
        return None
    body_offsets, bodies = _buffers(n, record_bytes)
    at, phys = at.astype(np.int64, copy=False), phys.astype(np.int64, copy=False)
    room = 4 * n
    while True:
        scan = k.scan(data, at, phys, sizes, topic_raw, *_NAMES, _CRC_NAME, _CRC_TAIL, MAGIC_CODE,
                      SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, _int32s(body_offsets), _bytes(bodies),
                      np.empty((room, 2), dtype=np.int64), np.empty((room, 4), dtype=np.int64))
        if scan[0] != _MORE:
            break
        room *= 4  # records with many keys or user properties
    (status, queue_id, queue_offset, born, stored, body_at, body_len, host_at, host_len,
     tag_at, tag_len, uniq_at, uniq_len, tx_at, tx_len, key_count, tokens, user_count, pairs) = scan
    if status != _OK:
        return None
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.array(queue_id, pa.int32()),
        pa.array(queue_offset, pa.int64()),
        _message_ids(k, data, uniq_at, uniq_len, host_at, host_len, phys),
        _strings(k, pa.string(), data, tag_at, tag_len),
        _lists(k, data, key_count, tokens),
        pa.Array.from_buffers(pa.binary(), n, [None, body_offsets, bodies]),
        _maps(k, data, user_count, pairs),
        pa.array(born, pa.int64()).view(UTC_MICROS),
        pa.array(stored, pa.int64()).view(UTC_MICROS),
        _strings(k, pa.string(), data, tx_at, tx_len),
    ]
    if any(c is None for c in columns):
        return None
    return pa.RecordBatch.from_arrays(columns, schema=PULL_SCHEMA)


def _strings(k, dtype: pa.DataType, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array | None:
    """Values data[starts[i]:starts[i]+lengths[i]] as a string or binary array; null where lengths[i] < 0."""
    total = int(np.maximum(lengths, 0).sum())
    if total >= 1 << 31:
        return None
    offsets, values = _buffers(len(starts), total)
    k.gather(data, starts, lengths, _int32s(offsets), _bytes(values))
    missing = lengths < 0
    validity = pa.py_buffer(np.packbits(~missing, bitorder="little")) if missing.any() else None
    return pa.Array.from_buffers(dtype, len(starts), [validity, offsets, values])


def _buffers(n: int, total: int) -> tuple[pa.Buffer, pa.Buffer]:
    """Offsets and values buffers for n strings of `total` bytes, from Arrow's memory pool: it
    keeps freed memory for the next batch, where a fresh allocation would fault in new pages."""
    return pa.allocate_buffer(4 * (n + 1)), pa.allocate_buffer(max(total, 1))


def _int32s(buf: pa.Buffer) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.int32)


def _bytes(buf: pa.Buffer) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8)


def _message_ids(k, data, uniq_at, uniq_len, host_at, host_len, phys) -> pa.StringArray | None:
    """UNIQ_KEY where it is set and not empty, else the offset message id (store host and
    physical offset in uppercase hex)."""
    fallback = np.where(uniq_len > 0, 0, 2 * (host_len + 8))
    total = int(np.where(uniq_len > 0, uniq_len, 0).sum() + fallback.sum())
    if total >= 1 << 31:
        return None
    offsets, values = _buffers(len(uniq_at), total)
    k.message_ids(data, uniq_at, uniq_len, host_at, host_len, phys.astype(np.int64, copy=False), _HEX_DIGITS,
                  _int32s(offsets), _bytes(values))
    return pa.Array.from_buffers(pa.string(), len(uniq_at), [None, offsets, values])


def _row_offsets(counts: np.ndarray) -> pa.Array:
    out = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=out[1:])
    return pa.array(out)


def _lists(k, data, counts: np.ndarray, tokens: np.ndarray) -> pa.ListArray | None:
    """The keys column: each record's KEYS tokens (an empty list where there are none)."""
    values = _strings(k, pa.string(), data, tokens[:, 0], tokens[:, 1])
    if values is None:
        return None
    return pa.ListArray.from_arrays(_row_offsets(counts), values)


def _maps(k, data, counts: np.ndarray, pairs: np.ndarray) -> pa.MapArray | None:
    """The properties column: each record's user properties, in their on-disk order."""
    names = _strings(k, pa.string(), data, pairs[:, 0], pairs[:, 1])
    values = _strings(k, pa.string(), data, pairs[:, 2], pairs[:, 3])
    if names is None or values is None:
        return None
    return pa.MapArray.from_arrays(_row_offsets(counts), names, values).cast(STRING_MAP)
