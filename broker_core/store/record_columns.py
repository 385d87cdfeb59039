"""A read's records decoded column-wise with numpy and Arrow (no loop over records in Python).

The numpy decoder pulls fall back to when the compiled pass (store/pull_decode_kernel.py)
leaves a read to it: it names what is wrong with a record, and handles rare cases.

1. every fixed header field is gathered with numpy at record start + field
   offset (IPv6 hosts shift the later fields per record, computed from SYSFLAG);
2. variable-length fields (body, topic, property text, offset message ids) become
   Arrow arrays gathered by Arrow's C++: ranges in ascending order (the usual
   case: a queue's records lie in CommitLog order) as every other piece of one
   binary array over the bytes (offsets only, then a take), others through
   *binary views* (length + buffer offset per row, built with numpy) cast to
   plain binary/string;
3. reads touch each record twice: its header (one fixed-width row per record,
   wide enough for IPv6 hosts) and its tail after the body (TOPICLEN to the end,
   gathered once into `RecordColumns.tail`, from which topic, properties and the
   CRC property's position are read), since each pass over mapped records costs
   a cache and TLB miss per record.

Checks are those of `record.decode_records` on the read path, done column-wise:
magic code, body/topic/property lengths against TOTALSIZE, the CRC property at
the record end, the record's PHYSICALOFFSET against its queue entry, UTF-8 of
topics and properties. CRCs are NOT recomputed, exactly like `read_queue`: reads
trust the recovered log (recovery CRC-checks the tail written before a crash, and
the log is append-only afterwards).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.lib.stride_tricks import sliding_window_view

from txmq.broker.errors import StoreError
from txmq.broker.store.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from txmq.broker.store.record_layout import (
    BODY_LEN_AT,
    CRC_PREFIX,
    CRC_TAIL_LEN,
    FIXED_HEAD_DTYPE,
    HEADER_MAX_SIZE,
    HOST_V4_SIZE,
    HOST_V6_EXTRA,
    MAGIC_CODE,
    PHYS_AT,
    STORE_HOST_AT,
    STORE_TS_AT,
)

_CRC_PREFIX = np.frombuffer(CRC_PREFIX, dtype=np.uint8)
# byte -> its two uppercase hex digits, as two bytes in memory order (a uint16 per byte value)
_HEX_PAIRS = np.frombuffer(b"".join(b"%02X" % b for b in range(256)), dtype=np.uint16)
_INLINE = 12  # Arrow binary views keep values of up to 12 bytes inline
# Long values (bodies) copy faster through binary views than by a take of every other piece,
# even when in order; short values (topics, property texts) are faster with the take.
_VIEWS_FROM_MEAN_BYTES = 256


@dataclass
class RecordColumns:
    """The records of one read: fixed fields as numpy arrays (one element per record) and
    positions of the variable-length fields: of bodies and store hosts in `data` (the
    CommitLog bytes), of topics and properties in `tail` (the records' tails back to back)."""

    data: np.ndarray  # uint8
    queue_id: np.ndarray  # int32
    queue_offset: np.ndarray  # int64
    phys: np.ndarray  # int64
    sys_flag: np.ndarray  # int32
    born_ts: np.ndarray  # int64, ms
    store_ts: np.ndarray  # int64, ms
    size: np.ndarray  # int64, TOTALSIZE
    record_at: np.ndarray  # int64 positions in data
    store_host_at: np.ndarray
    store_host_len: np.ndarray  # 8 (IPv4) or 20 (IPv6)
    body_at: np.ndarray
    body_len: np.ndarray
    tail: np.ndarray  # uint8: every record's tail (TOPICLEN through its end) back to back
    topic_at: np.ndarray  # positions in tail
    topic_len: np.ndarray
    props_at: np.ndarray  # in tail: property text without the CRC property and its separator
    props_len: np.ndarray

    @property
    def count(self) -> int:
        return len(self.phys)

    def bodies(self) -> pa.BinaryArray:
        return gather_binary(self.data, self.body_at, self.body_len)

    def topics(self, expected: str | None = None) -> pa.StringArray:
        """The topic of every record; when all equal `expected`, a repeat of it (no gather)."""
        n = self.count
        if expected is not None:
            raw = np.frombuffer(expected.encode(), dtype=np.uint8)
            if (self.topic_len == len(raw)).all() and (
                    len(raw) == 0 or (byte_rows(self.tail, self.topic_at, len(raw)) == raw).all()):
                return pa.repeat(pa.scalar(expected, pa.string()), n)
        return as_utf8(gather_binary(self.tail, self.topic_at, self.topic_len), "topic")

    def property_text(self) -> pa.StringArray:
        """RocketMQ's property string of every record (name \\x01 value \\x02 ..., no final \\x02)."""
        return as_utf8(gather_binary(self.tail, self.props_at, self.props_len), "properties")

    def offset_ids(self, rows: np.ndarray | None = None) -> pa.StringArray:
        """Offset message ids (store host + port + physical offset, uppercase hex) of `rows` (all if None).

        The id's bytes are in the record itself (STOREHOST and PHYSICALOFFSET), so they
        are gathered and hex-formatted as one (rows x 28) byte matrix.
        """
        at = self.record_at if rows is None else self.record_at[rows]
        host_at = self.store_host_at if rows is None else self.store_host_at[rows]
        host_len = self.store_host_len if rows is None else self.store_host_len[rows]
        k = len(at)
        if k and (host_len == 8).all():
            hosts = byte_rows(self.data, host_at, 8)
            if (hosts == hosts[0]).all():  # one store host (the usual case): only the offsets differ
                return _offset_ids_of_one_host(hosts[0], self.phys if rows is None else self.phys[rows])
        width = int(host_len.max()) + 8 if k else 16
        cols = np.arange(width)
        # host bytes then the 8 PHYSICALOFFSET bytes; columns past a row's width are junk, cut below
        in_host = cols < host_len[:, None]
        src = np.where(in_host, host_at[:, None] + cols, at[:, None] + PHYS_AT + cols - host_len[:, None])
        hexed = _hex(self.data[np.minimum(src, len(self.data) - 1)])
        lengths = 2 * (host_len + 8)
        if k and (lengths == 2 * width).all():
            return _fixed_width_strings(hexed)
        return gather_binary(hexed.reshape(-1), np.arange(k, dtype=np.int64) * 2 * width, lengths).cast(pa.string())


def _offset_ids_of_one_host(host: np.ndarray, phys: np.ndarray) -> pa.StringArray:
    """Offset message ids of records stored by one IPv4 host: its 16 hex digits, then each
    physical offset's (PHYSICALOFFSET, already decoded and checked against the queue
    entry), as one (records x 32) digit matrix: one table lookup per byte, no gather."""
    k = len(phys)
    hexed = np.empty((k, 32), dtype=np.uint8)
    hexed[:, :16] = _hex(host)
    hexed[:, 16:] = _hex(phys.astype(">i8").view(np.uint8).reshape(k, 8))
    return _fixed_width_strings(hexed)


def _hex(raw: np.ndarray) -> np.ndarray:
    """Uppercase hex digits of a uint8 array (the last axis doubles): one table lookup per byte."""
    return _HEX_PAIRS[raw].view(np.uint8)


def _fixed_width_strings(rows: np.ndarray) -> pa.StringArray:
    """Each row of a (k x width) ASCII byte matrix as a string, without a copy."""
    k, width = rows.shape
    offsets = np.arange(0, (k + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), k, [None, pa.py_buffer(offsets), pa.py_buffer(rows)])


# --- Arrow helpers -----------------------------------------------------------------------


def byte_rows(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """An (n, width) copy of data[s:s+width] for every start s; bytes past the end of `data` read as 0.

    Indexing a sliding-window view copies each row as one block, where an (n, width)
    matrix of positions would look every byte up on its own.
    """
    n = len(starts)
    size = len(data)
    if n == 0 or size < width:
        return _byte_rows_at_the_end(data, starts, width)
    fits = int(starts.max()) <= size - width
    windows = sliding_window_view(data, width)
    if fits:
        return windows[starts]
    inside = starts <= size - width
    out = np.empty((n, width), dtype=np.uint8)
    out[inside] = windows[starts[inside]]
    out[~inside] = _byte_rows_at_the_end(data, starts[~inside], width)  # only the rows near the end
    return out


def _byte_rows_at_the_end(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """byte_rows the slow way: position by position, zero past the end."""
    at = starts[:, None] + np.arange(width)
    inside = at < len(data)
    out = np.zeros(at.shape, dtype=np.uint8)
    out[inside] = data[at[inside]]
    return out


def gather_binary(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.BinaryArray:
    """A BinaryArray whose row i is data[starts[i]:starts[i]+lengths[i]], without a Python loop.

    Builds Arrow binary views (16 bytes per row: int32 length, then either the
    value inline when <= 12 bytes, or a 4-byte prefix, buffer index 0 and int32
    offset) with numpy, and lets Arrow's cast to binary copy the values into one
    buffer. `data` must be smaller than 2 GiB (view offsets are int32).
    """
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    if _in_order(starts, lengths) and int(lengths.sum()) < _VIEWS_FROM_MEAN_BYTES * n:
        return _gather_in_order(data, starts, lengths)
    views = binary_views(data, 0, starts, lengths)
    arr = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(data)])
    return arr.cast(pa.binary())


def binary_views(data: np.ndarray, buffer_index: int, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Arrow binary views (an (n, 4) int32 array, 16 bytes a row) of data[starts[i]:starts[i]+lengths[i]],
    `data` being the view array's variadic buffer number `buffer_index`.

    A view is the int32 length, then either the value inline (up to 12 bytes,
    zero-padded) or its first 4 bytes, the buffer index and the int32 offset.
    Values are read only for those prefixes and inline values (one gather each).
    """
    lengths = lengths.astype(np.int32, copy=False)
    views = np.empty((len(starts), 4), dtype="<i4")
    views[:, 0] = lengths
    views[:, 1] = byte_rows(data, starts, 4).view("<i4")[:, 0]
    views[:, 2] = buffer_index
    views[:, 3] = starts
    short = np.flatnonzero(lengths <= _INLINE)
    if len(short):  # inline values, zero-padded
        inline = byte_rows(data, starts[short], _INLINE)
        inline[np.arange(_INLINE)[None, :] >= lengths[short, None]] = 0
        views[short, 1:] = inline.view("<i4")
    return views


def _in_order(starts: np.ndarray, lengths: np.ndarray) -> bool:
    """Whether the ranges follow each other in `data` without overlapping (a queue's records,
    and every field of them, lie in ascending CommitLog order)."""
    return bool((starts[1:] >= starts[:-1] + lengths[:-1]).all()) and bool((lengths >= 0).all())


def _gather_in_order(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.BinaryArray:
    """gather_binary for ascending, non-overlapping ranges, with no read of the values in Python.

    The ranges and the gaps between them tile data[starts[0]:], so they are the
    pieces of one binary array over `data` itself (offsets start, end, start, end,
    ...; no copy), and Arrow's take of every other piece copies the values back to
    back. Unlike binary views, nothing is read from the values to build the offsets.
    """
    n = len(starts)
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + lengths
    pieces = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(data)])
    return pieces.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))


def values_and_offsets(arr: pa.BinaryArray) -> tuple[np.ndarray, np.ndarray]:
    """A binary array's values back to back as one uint8 array (no copy), and where each
    row begins in it (len + 1 positions, int64)."""
    _, offsets_buf, values_buf = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=4 * arr.offset) if n else np.zeros(1, np.int32)
    base, top = int(offsets[0]), int(offsets[-1])
    values = np.frombuffer(values_buf, dtype=np.uint8) if values_buf is not None else np.zeros(0, dtype=np.uint8)
    return values[base:top], offsets.astype(np.int64) - base


def as_utf8(arr: pa.BinaryArray, what: str) -> pa.StringArray:
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid as exc:
        raise StoreError(f"a record's {what} is not valid UTF-8: {exc}") from None


def decode_columns(data: np.ndarray, at: np.ndarray, phys: np.ndarray, sizes: np.ndarray,
                    topic: str, queue_id: int) -> RecordColumns:
    """Gather and check the header fields of the records at `at` in `data`."""
    n = len(at)
    if n == 0:
        return _no_records()
    bad = None
    if int(at.max()) + FIXED_HEAD_DTYPE.itemsize > len(data):
        bad = "truncated record header"
    else:
        block = byte_rows(data, at, HEADER_MAX_SIZE)  # one pass over the records' headers, whatever their hosts
        head = np.ascontiguousarray(block[:, :FIXED_HEAD_DTYPE.itemsize]).view(FIXED_HEAD_DTYPE)[:, 0]
        size = head["size"].astype(np.int64)
        sys_flag = head["sys_flag"].astype(np.int32)
        born_extra = np.where(sys_flag & SYSFLAG_BORNHOST_V6, HOST_V6_EXTRA, 0).astype(np.int64)
        store_extra = np.where(sys_flag & SYSFLAG_STOREHOST_V6, HOST_V6_EXTRA, 0).astype(np.int64)
        end = at + size
        body_len_at = at + BODY_LEN_AT + born_extra + store_extra
        if (head["magic"] != MAGIC_CODE).any():
            bad = "bad magic code"
        elif (head["phys"] != phys).any():
            bad = "queue entry does not point at a record start"
        elif (size != sizes).any() or int(end.max()) > len(data) or (body_len_at + 4 > end).any():
            bad = "record size disagrees with its queue entry"
    if bad is None:
        store_ts_at = at + STORE_TS_AT + born_extra
        store_ts = _be_column(block, store_ts_at - at, 8)
        body_len = _be_column(block, body_len_at - at, 4)
        body_at = body_len_at + 4
        tail_at = body_at + body_len
        if (body_len < 0).any() or (tail_at + 3 > end).any():
            bad = "body length does not fit the record size"
    if bad is None:
        # one in-order gather of the tails; every later field is read from that compact copy
        tail, tail_pos = values_and_offsets(gather_binary(data, tail_at, end - tail_at))
        tail_at, end = tail_pos[:-1], tail_pos[1:]
        topic_len = tail[tail_at].astype(np.int64)
        props_at = tail_at + 3 + topic_len
        if (props_at > end).any():
            bad = "topic does not fit the record"
    if bad is None:
        props_field_len = _be_int(tail, props_at - 2, 2)
        crc_name_at = end - CRC_TAIL_LEN
        if ((props_field_len != end - props_at).any() or (crc_name_at < props_at).any()
                or (byte_rows(tail, crc_name_at, len(_CRC_PREFIX)) != _CRC_PREFIX).any()):
            bad = "properties length or CRC property position disagree with the record size"
    if bad is not None:
        raise StoreError(f"queue {topic}:{queue_id} entry at physical offset {int(phys[0])} "
                         f"does not match the CommitLog: {bad}")
    return RecordColumns(
        data=data, queue_id=head["queue_id"].astype(np.int32), queue_offset=head["queue_offset"].astype(np.int64),
        phys=phys, sys_flag=sys_flag, born_ts=head["born_ts"].astype(np.int64), store_ts=store_ts, size=size,
        record_at=at, store_host_at=at + STORE_HOST_AT + born_extra, store_host_len=HOST_V4_SIZE + store_extra,
        body_at=body_at, body_len=body_len, tail=tail, topic_at=tail_at + 1, topic_len=topic_len,
        props_at=props_at, props_len=np.maximum(crc_name_at - 1 - props_at, 0))


def _be_column(block: np.ndarray, column: np.ndarray, width: int) -> np.ndarray:
    """The big-endian signed integers of `width` bytes at column[i] of row i of `block`, as int64.

    The column differs per row only by the host families (a few distinct values),
    so each distinct column is decoded as one strided slice.
    """
    if len(column) and (column == column[0]).all():  # one host family throughout: no sort to find it
        col = int(column[0])
        return np.ascontiguousarray(block[:, col:col + width]).view(f">i{width}")[:, 0].astype(np.int64)
    out = np.empty(len(column), dtype=np.int64)
    for col in np.unique(column).tolist():
        rows = column == col
        out[rows] = np.ascontiguousarray(block[rows, col:col + width]).view(f">i{width}")[:, 0]
    return out


def _be_int(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The big-endian signed integers of `width` bytes at positions `at`, as int64."""
    return byte_rows(data, at, width).view(f">i{width}")[:, 0].astype(np.int64)


def _no_records() -> RecordColumns:
    e64 = np.zeros(0, dtype=np.int64)
    return RecordColumns(np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int32), e64, e64,
                         np.zeros(0, dtype=np.int32), e64, e64, e64, e64, e64, e64, e64, e64,
                         np.zeros(0, dtype=np.uint8), e64, e64, e64, e64)
