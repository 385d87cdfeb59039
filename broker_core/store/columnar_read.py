"""Columnar queue reads: a queue range's CommitLog records as numpy/Arrow columns.

`MessageStore.read_queue` decodes every record into a StoredMessage (~7 µs per
message in Python), which caps a bulk reader such as the Spark source at about
100k rows/s per broker process. A bulk reader wants columns, not objects, so this
module reads the same bytes and never loops over records in Python:

1. the queue's 20-byte ConsumeQueue entries are read as one numpy record array;
2. the CommitLog segment holding those records is memory-mapped (read-only,
   cached per file) and the records are decoded straight from the map: a
   queue's records are interleaved with other queues' records, and a map lets a
   pull touch only its own records' bytes. A range spanning segments is copied
   record by record out of each segment's map; if a segment cannot be mapped,
   the bytes are read per *span* (a run of records of one segment with small
   gaps of other queues' records, one pread each) and joined;
3. every fixed header field is gathered with numpy at record start + field
   offset (IPv6 hosts shift the later fields per record, computed from SYSFLAG);
4. variable-length fields (body, topic, property text, offset message ids) become
   Arrow arrays gathered by Arrow's C++: ranges in ascending order (the usual
   case: a queue's records lie in CommitLog order) as every other piece of one
   binary array over the bytes (offsets only, then a take), others through
   *binary views* (length + buffer offset per row, built with numpy) cast to
   plain binary/string;
5. reads touch each record twice: its header (one fixed-width row per record,
   wide enough for IPv6 hosts) and its tail after the body (TOPICLEN to the end,
   gathered once into `RecordColumns.tail`, from which topic, properties and the
   CRC property's position are read). Each pass over mapped records costs a
   cache and TLB miss per record, so passes, not bytes, are what a pull pays for.

Checks are those of `record.decode_records` on the read path, done column-wise:
magic code, body/topic/property lengths against TOTALSIZE, the CRC property at
the record end, the record's PHYSICALOFFSET against its queue entry, UTF-8 of
topics and properties. CRCs are NOT recomputed, exactly like `read_queue`: reads
trust the recovered log (recovery CRC-checks the tail written before a crash, and
the log is append-only afterwards), so a per-read CRC would cost a full pass over
every body for no new guarantee.

The store internals this module touches are confined to the "store access"
section below (`_queue_for`, `_read_commitlog`, `_segment_end`, `_mapped_segment`),
until MessageStore offers public hooks for a queue's raw entries and a segment's
read-only view.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.lib.stride_tricks import sliding_window_view

from txmq.broker.errors import DataDeleted, IllegalOffset, StoreError
from txmq.broker.store.consume_queue import ENTRY_DTYPE, ENTRY_SIZE
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

SPAN_MAX = 4 << 20  # one CommitLog read covers neighbouring records up to this many bytes
GAP_MAX = 64 << 10  # ... skipping at most this many bytes of other queues' records
READ_BUFFER_MAX = 1 << 30  # bytes read per call; a longer range is returned short (offsets stay int32)

_CRC_PREFIX = np.frombuffer(CRC_PREFIX, dtype=np.uint8)
# byte -> its two uppercase hex digits, as two bytes in memory order (a uint16 per byte value)
_HEX_PAIRS = np.frombuffer(b"".join(b"%02X" % b for b in range(256)), dtype=np.uint16)
_INLINE = 12  # Arrow binary views keep values of up to 12 bytes inline
# Values this long on average are gathered through binary views even when in order: the
# cast copies them ~20% faster than a take of every other piece (measured with 1 KiB
# bodies); short values (topics, property texts) are faster with the take.
_VIEWS_FROM_MEAN_BYTES = 256


# --- store access (the only place that reaches into MessageStore's parts) ------------


def supports_columnar(store) -> bool:
    """Whether `store` has the files a columnar read needs (a MessageStore does; a stand-in
    that only implements the `read_queue` contract, e.g. a test stub, does not)."""
    return hasattr(store, "dispatcher") and hasattr(store, "commitlog")


def _queue_for(store, topic: str, queue_id: int):
    """The ConsumeQueue of (topic, queue id) or None; uses `store.dispatcher.queue`."""
    return store.dispatcher.queue(topic, queue_id)


def _read_commitlog(store, topic: str, queue_id: int, offset: int, size: int) -> bytes:
    """CommitLog bytes [offset, offset+size) of one segment; DataDeleted if retention removed them."""
    commitlog = store.commitlog
    if commitlog.segment_for(offset) is None or offset < commitlog.min_offset:
        cq = _queue_for(store, topic, queue_id)
        mn = cq.min_offset if cq is not None else 0
        raise DataDeleted(f"{topic}:{queue_id} points at physical offset {offset}, deleted by retention; "
                          f"the minimum offset is {mn}", min_offset=mn)
    return commitlog.read(offset, size)


def _segment_end(store, offset: int) -> int:
    seg = store.commitlog.segment_for(offset)
    return offset + SPAN_MAX if seg is None else seg.start + seg.capacity


_maps: dict[tuple[int, int], np.ndarray] = {}
_MAPS_KEPT = 8


def _mapped_segment(store, offset: int, end: int) -> tuple[int, np.ndarray] | None:
    """(segment start, the segment file as a read-only memory map) covering [offset, end), or None
    when the bytes are not mappable (then the caller reads them with pread).

    Why a map: a queue's records are interleaved with other queues' records, so
    reading spans copies several times the bytes a pull needs (twice: pread, then
    join). Gathering the records straight from a map copies only their bytes.
    Safe against retention: a map outlives the unlinked file, and the CommitLog is
    only ever truncated past its visible end (so mapped records never vanish).
    Uses the segment's `fd` (MappedFile internals).
    """
    seg = store.commitlog.segment_for(offset)
    if seg is None or seg.closed or end > seg.start + seg.capacity or seg.capacity >= 1 << 31:
        return None
    try:
        key = _file_key(seg.fd)  # a file, not a name: a recreated store must not see an old map
    except OSError:
        return None
    arr = _maps.get(key)
    if arr is None or end - seg.start > len(arr):
        try:
            mapped = mmap.mmap(seg.fd, 0, prot=mmap.PROT_READ)
        except (OSError, ValueError):
            return None
        arr = np.frombuffer(mapped, dtype=np.uint8)
        if len(_maps) >= _MAPS_KEPT:
            _maps.clear()
        _maps[key] = arr
        if end - seg.start > len(arr):
            return None
    return seg.start, arr


def forget_mapped(seg, lo: int, hi: int) -> None:
    """This process's map of a segment file (if any) forgets the pages of [lo, hi) (file offsets),
    so that the page cache can drop them (page_cache.PageCacheWindow). The map stays valid: a later
    read of those bytes faults them back in."""
    arr = _maps.get(_file_key(seg.fd))
    if arr is None:
        return
    lo, hi = -(-lo // mmap.PAGESIZE) * mmap.PAGESIZE, min(hi, len(arr)) // mmap.PAGESIZE * mmap.PAGESIZE
    if lo < hi:
        arr.base.obj.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def _file_key(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


# --- result types ------------------------------------------------------------------------


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


@dataclass
class RecordBytes:
    """Records of a queue read as CommitLog bytes, not decoded yet: record i starts at
    data[record_at[i]] and is, by its queue entry, at physical offset phys[i] with sizes[i] bytes."""

    data: np.ndarray  # uint8
    record_at: np.ndarray  # int64
    phys: np.ndarray
    sizes: np.ndarray
    next_offset: int
    min_offset: int
    max_offset: int


@dataclass
class ColumnarRead:
    """What `read_queue_columns` returns; offsets mean the same as in `QueueRead`."""

    records: RecordColumns
    next_offset: int
    min_offset: int
    max_offset: int


# --- Arrow helpers -----------------------------------------------------------------------


def byte_rows(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """An (n, width) copy of data[s:s+width] for every start s; bytes past the end of `data` read as 0.

    Indexing a sliding-window view copies each row as one block (~20 ns a row
    whatever the width); indexing `data` with an (n, width) matrix of positions
    looks every byte up on its own (~170 ns a row for a 48-byte header).
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


# --- the read ----------------------------------------------------------------------------


def read_queue_columns(store, topic: str, queue_id: int, offset: int, max_count: int, *,
                       max_bytes: int | None = None) -> ColumnarRead:
    """Records of a queue from `offset`, like `MessageStore.read_queue` without a tag filter.

    Same bounds and errors (IllegalOffset, DataDeleted, StoreError when an entry does
    not match the CommitLog) and the same `max_bytes` rule: records are returned
    while their sizes add up to at most max_bytes, but always at least one.
    """
    read = read_queue_bytes(store, topic, queue_id, offset, max_count, max_bytes=max_bytes)
    records = decode_columns(read.data, read.record_at, read.phys, read.sizes, topic, queue_id)
    return ColumnarRead(records, read.next_offset, read.min_offset, read.max_offset)


def read_queue_bytes(store, topic: str, queue_id: int, offset: int, max_count: int, *,
                     max_bytes: int | None = None) -> "RecordBytes":
    """The undecoded records of `read_queue_columns` (same bounds, errors and `max_bytes` rule)."""
    cq, lo, hi = _bounded_queue(store, topic, queue_id, offset)
    if cq is None or max_count <= 0 or offset >= hi:
        e64 = np.zeros(0, dtype=np.int64)
        return RecordBytes(np.zeros(0, dtype=np.uint8), e64, e64, e64, offset, lo, hi)
    phys, sizes = _entries_within(cq, offset, max_count, max_bytes)
    gathered = gather_records(store, topic, queue_id, phys, sizes)
    if gathered is not None:
        data, record_at, read_count = gathered
    else:
        data, record_at, read_count = read_spans(store, topic, queue_id, phys, sizes)
    if read_count < len(phys):  # the read buffer is full: a short read
        phys, sizes = phys[:read_count], sizes[:read_count]
    return RecordBytes(data, record_at, phys, sizes, offset + len(phys), cq.min_offset, cq.max_offset)


@dataclass(frozen=True)
class SegmentFile:
    """A CommitLog segment file, named so that a reader elsewhere can tell it opened that very file."""

    path: str
    start: int  # physical offset of the file's first byte
    device: int  # st_dev
    inode: int  # st_ino


@dataclass
class ReadPlan:
    """Where the records of a queue range are: what `plan_queue_read` returns. The records
    (`phys`, `sizes`: int64 arrays) all lie in `segment`; offsets mean the same as in QueueRead."""

    phys: np.ndarray
    sizes: np.ndarray
    segment: SegmentFile
    next_offset: int
    min_offset: int
    max_offset: int


def plan_queue_read(store, topic: str, queue_id: int, offset: int, max_count: int, *,
                    max_bytes: int | None = None) -> ReadPlan | None:
    """Where the records of a queue from `offset` are, for a reader that decodes them itself
    (a client on this host reading the segment file; see client/local_read.py).

    Same bounds, errors and `max_bytes` rule as read_queue_columns, and the plan
    stops at the end of the first record's segment (the next plan starts in the
    next one). None when there is nothing to read from `offset` (the caller answers
    as it would without a plan) or the segment cannot be named (it was closed).
    """
    cq, _, hi = _bounded_queue(store, topic, queue_id, offset)
    if cq is None or max_count <= 0 or offset >= hi:
        return None
    phys, sizes = _entries_within(cq, offset, max_count, max_bytes)
    if len(phys) == 0:
        return None
    commitlog = store.commitlog
    first = int(phys[0])
    seg = commitlog.segment_for(first)
    if seg is None or first < commitlog.min_offset:
        _read_commitlog(store, topic, queue_id, first, 0)  # raises DataDeleted
    if seg.closed:
        return None
    keep = int(np.searchsorted(phys + sizes, seg.start + seg.capacity, side="right"))
    if keep == 0 or int(phys[keep - 1] + sizes[keep - 1]) > commitlog.write_end:
        raise StoreError(f"queue {topic}:{queue_id} entry at physical offset {first} "
                         f"does not match the CommitLog: the record crosses its segment or the log's end")
    try:
        st = os.fstat(seg.fd)
    except OSError:
        return None
    segment = SegmentFile(os.path.abspath(seg.path), seg.start, st.st_dev, st.st_ino)  # no syscall per pull
    return ReadPlan(phys[:keep], sizes[:keep], segment, offset + keep, cq.min_offset, cq.max_offset)


def _bounded_queue(store, topic: str, queue_id: int, offset: int):
    """(the queue or None, its min offset, its max offset), after the bounds checks every read makes."""
    if offset < 0:
        raise IllegalOffset(f"offset {offset} is negative")
    cq = _queue_for(store, topic, queue_id)
    lo, hi = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
    if offset < lo:
        raise DataDeleted(f"offset {offset} of {topic}:{queue_id} was deleted by retention; "
                          f"the minimum offset is {lo}", min_offset=lo)
    if offset > hi:
        raise IllegalOffset(f"offset {offset} of {topic}:{queue_id} is beyond the maximum offset {hi}")
    return cq, lo, hi


_FIRST_ENTRIES = 1024  # queue entries _entries_within reads first


def _entries_within(cq, offset: int, max_count: int, max_bytes: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(physical offsets, sizes) of the queue's entries from `offset`: at most max_count of them,
    whose sizes add up to at most max_bytes (but at least one) and to at most READ_BUFFER_MAX.

    A Spark partition asks for a whole queue range (max_count of hundreds of thousands) a
    few thousand records at a time (max_bytes): the entries are read 1,024 first, then three
    times as many again (four times the total) until their sizes pass the byte limit, not up
    to max_count every time (5.5 ms for a 16 MiB plan at the start of a 500k-entry range,
    against 0.16 at its end)."""
    limit = READ_BUFFER_MAX if max_bytes is None else min(max_bytes, READ_BUFFER_MAX)
    asked = min(max_count, _FIRST_ENTRIES)
    parts = [_read_entries(cq, offset, asked)]
    read, total = len(parts[0]), int(parts[0]["size"].sum(dtype=np.int64))
    while read == asked < max_count and total <= limit:  # all came back, and more may be wanted
        asked = min(max_count, 4 * read)
        more = _read_entries(cq, offset + read, asked - read)
        parts.append(more)
        read, total = read + len(more), total + int(more["size"].sum(dtype=np.int64))
    entries = parts[0] if len(parts) == 1 else np.concatenate(parts)
    phys = entries["phys"].astype(np.int64)
    sizes = entries["size"].astype(np.int64)
    if max_bytes is not None and len(sizes):
        keep = max(1, int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right")))
        phys, sizes = phys[:keep], sizes[:keep]
    total = np.cumsum(sizes)
    if len(total) and int(total[-1]) > READ_BUFFER_MAX:  # a short read: offsets stay int32
        keep = max(1, int(np.searchsorted(total, READ_BUFFER_MAX, side="right")))
        phys, sizes = phys[:keep], sizes[:keep]
    return phys, sizes


def _read_entries(cq, offset: int, max_count: int) -> np.ndarray:
    """Up to max_count ConsumeQueue entries from `offset` (across queue files) as ENTRY_DTYPE."""
    parts = []
    q, remaining = offset, max_count
    while remaining > 0:
        raw = cq.read_raw(q, remaining)
        n = len(raw) // ENTRY_SIZE
        if n == 0:
            break
        parts.append(np.frombuffer(raw, dtype=ENTRY_DTYPE, count=n))
        q += n
        remaining -= n
    if not parts:
        return np.zeros(0, dtype=ENTRY_DTYPE)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def gather_records(store, topic: str, queue_id: int, phys: np.ndarray, sizes: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The records' bytes from mapped segments (None: not mappable): the map itself when
    they are all in one segment, else copied back to back out of each segment's map.

    Returns (bytes, each record's position in them, records covered).
    """
    n = len(phys)
    if n == 0:
        return None
    commitlog = store.commitlog
    lo, hi = int(phys.min()), int((phys + sizes).max())
    if commitlog.segment_for(lo) is not None and lo >= commitlog.min_offset and hi <= _segment_end(store, lo):
        mapped = _mapped_segment(store, lo, hi)
        if mapped is not None:  # the common case, one segment: decode straight from the map, no copy
            return mapped[1], phys - mapped[0], n
    pieces: list[np.ndarray] = []
    i = 0
    while i < n:
        lo = int(phys[i])
        if commitlog.segment_for(lo) is None or lo < commitlog.min_offset:
            _read_commitlog(store, topic, queue_id, lo, 0)  # raises DataDeleted
        seg_end = _segment_end(store, lo)
        j = i + int(np.searchsorted(phys[i:], seg_end, side="left"))
        mapped = _mapped_segment(store, lo, int(phys[j - 1] + sizes[j - 1]))
        if mapped is None:
            return None
        seg_start, arr = mapped
        records = gather_binary(arr, phys[i:j] - seg_start, sizes[i:j])
        _, offsets, values = records.buffers()
        first = np.frombuffer(offsets, dtype=np.int32)[records.offset]
        pieces.append(np.frombuffer(values, dtype=np.uint8)[first:first + int(sizes[i:j].sum())])
        i = j
    data = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
    record_at = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1], out=record_at[1:])
    return data, record_at, n


def read_spans(store, topic: str, queue_id: int, phys: np.ndarray, sizes: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """Read the CommitLog bytes of the records at `phys` with one read per span.

    Returns (joined bytes, each record's position in them, records covered): the
    count is short only when READ_BUFFER_MAX would be exceeded.
    """
    n = len(phys)
    if n == 0:
        return np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64), 0
    ends = phys + sizes
    gaps = phys[1:] - ends[:-1]
    breaks = (np.flatnonzero((gaps < 0) | (gaps > GAP_MAX)) + 1).tolist() + [n]
    chunks: list[bytes] = []
    span_first: list[int] = []  # index of each span's first record
    span_base: list[int] = []  # (position in the joined buffer) - (physical offset) per span
    total = 0
    i = 0
    for region_end in breaks:
        while i < region_end:
            lo = int(phys[i])
            limit = min(lo + SPAN_MAX, _segment_end(store, lo))
            j = max(i + 1, i + int(np.searchsorted(ends[i:region_end], limit, side="right")))
            span_hi = int(ends[j - 1])
            if total + span_hi - lo > READ_BUFFER_MAX and chunks:
                return (*_joined(chunks, phys[:i], span_first, span_base), i)
            buf = _read_commitlog(store, topic, queue_id, lo, span_hi - lo)
            if len(buf) != span_hi - lo:
                raise StoreError(f"queue {topic}:{queue_id} entry at physical offset {lo} "
                                 f"does not match the CommitLog: the log ends before the record")
            chunks.append(buf)
            span_first.append(i)
            span_base.append(total - lo)
            total += len(buf)
            i = j
    return (*_joined(chunks, phys, span_first, span_base), n)


def _joined(chunks: list[bytes], phys: np.ndarray, span_first: list[int], span_base: list[int]):
    data = np.frombuffer(chunks[0] if len(chunks) == 1 else b"".join(chunks), dtype=np.uint8)
    counts = np.diff(np.append(np.asarray(span_first, dtype=np.int64), len(phys)))
    record_at = phys + np.repeat(np.asarray(span_base, dtype=np.int64), counts)
    return data, record_at


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
