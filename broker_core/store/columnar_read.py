"""Columnar queue reads: a queue range's CommitLog records as bytes, then as columns.

A bulk reader (the Spark source) wants columns, not one StoredMessage per record,
so this module reads a range's bytes without a loop over records in Python:

1. the queue's 20-byte ConsumeQueue entries are read as one numpy record array;
2. the CommitLog segment holding those records is memory-mapped (read-only,
   cached per file) and the records are read straight from the map: a queue's
   records are interleaved with other queues' records, and a map lets a pull
   touch only its own records' bytes. A range spanning segments is copied
   record by record out of each segment's map; if a segment cannot be mapped,
   the bytes are read per *span* (a run of records of one segment with small
   gaps of other queues' records, one pread each) and joined.

The bytes are decoded by store/pull_decode.py (compiled) or record_columns.py.
The store internals this module touches are confined to the "store access"
section below (`_queue_for`, `_read_commitlog`, `_segment_end`, `_mapped_segment`),
behind the ColumnarStore protocol.
"""

from __future__ import annotations

import mmap
import os
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from txmq.broker.errors import DataDeleted, IllegalOffset, MessageNotFound, StoreError
from txmq.broker.store.commit_ref import (
    SLOT_MAGIC,
    SLOT_SIZE,
    SlotView,
    final_records,
    is_slot,
    resolve_many,
    slot_view,
)
from txmq.broker.store.commitlog import CommitLog
from txmq.broker.store.consume_queue import ENTRY_DTYPE, ENTRY_SIZE
from txmq.broker.store.dispatch import Dispatcher
from txmq.broker.store.record_columns import gather_binary
from txmq.broker.store.record_layout import MAGIC_AT, PREFIX

if TYPE_CHECKING:
    from txmq.broker.store.filter_bits import FilterBitmaps

SPAN_MAX = 4 << 20  # one CommitLog read covers neighbouring records up to this many bytes
GAP_MAX = 64 << 10  # ... skipping at most this many bytes of other queues' records
READ_BUFFER_MAX = 1 << 30  # bytes read per call; a longer range is returned short (offsets stay int32)



# --- store access (the only place that reaches into MessageStore's parts) ------------


@runtime_checkable
class ColumnarStore(Protocol):
    """What a columnar read needs of a store: its queues and its CommitLog (a MessageStore has
    them; a stand-in that only implements the `read_queue` contract, e.g. a test stub, does not)."""

    dispatcher: Dispatcher
    commitlog: CommitLog
    filter_bits: "FilterBitmaps"


_COLUMNAR: "weakref.WeakKeyDictionary[object, bool]" = weakref.WeakKeyDictionary()


def supports_columnar(store) -> bool:
    # remembered per store: a protocol's isinstance walks its members each time, and every pull asks
    known = _COLUMNAR.get(store)
    if known is None:
        known = _COLUMNAR[store] = isinstance(store, ColumnarStore)
    return known


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
    # set only for a read asked `in_place` whose entries are all slots: then data and record_at hold the
    # halves (record i's half at data[record_at[i]:]) and `refs` the columns that override their fields
    refs: SlotView | None = None


# --- the read ----------------------------------------------------------------------------


def read_queue_bytes(store, topic: str, queue_id: int, offset: int, max_count: int, *,
                     max_bytes: int | None = None, one_kind: bool = False, in_place: bool = False) -> "RecordBytes":
    """The records of a queue from `offset`, undecoded, with `MessageStore.read_queue`'s bounds and
    errors (IllegalOffset, DataDeleted) and its `max_bytes` rule: records are returned while
    their sizes add up to at most max_bytes, but always at least one. `one_kind`: stop before the
    first entry of the other kind than the first (records, or slots of messages committed by
    reference), as plan_queue_read does: a pull's batches then end at the same offsets whether
    the broker or a client on its host builds them. `in_place` (a pull's decode, which takes
    `refs`: pull_decode.decode_pull_batch): a read of slots only returns the halves as they lie and
    the slots' columns (RecordBytes.refs) instead of the records they stand for."""
    cq, lo, hi = _bounded_queue(store, topic, queue_id, offset)
    if cq is None or max_count <= 0 or offset >= hi:
        e64 = np.zeros(0, dtype=np.int64)
        return RecordBytes(np.zeros(0, dtype=np.uint8), e64, e64, e64, offset, lo, hi)
    phys, sizes = _entries_within(cq, offset, max_count, max_bytes)
    slots = _slots_among(store, topic, queue_id, phys)
    if one_kind:
        kind = _same_kind(slots)
        phys, sizes, slots = phys[:kind], sizes[:kind], slots[:kind]
    if in_place and len(slots) and slots.all():  # a pull decodes the halves as they lie
        view = _slot_view(store, topic, queue_id, phys, sizes)
        if view is not None:
            view.finals = lambda: _resolved(store, topic, queue_id, phys, sizes, slots)[:2]
            return RecordBytes(view.halves, view.half_at, phys, sizes, offset + len(phys), cq.min_offset,
                               cq.max_offset, view)
    if slots.any():  # messages committed by reference: their records are made from their halves
        data, record_at, read_count = _resolved(store, topic, queue_id, phys, sizes, slots)
        return RecordBytes(data, record_at, phys, sizes, offset + len(phys), cq.min_offset, cq.max_offset)
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

    Same bounds, errors and `max_bytes` rule as read_queue_bytes, and the plan
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
    slots = _slots_among(store, topic, queue_id, phys)
    if slots[0]:
        return None  # a client cannot follow a slot itself: the read is answered with a batch
    kind = _same_kind(slots)
    phys, sizes = phys[:kind], sizes[:kind]
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
    times as many again (four times the total) until their sizes pass the byte limit, so a
    read costs what it returns, not what the range holds."""
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


_SLOT_MAGIC_BYTES = np.frombuffer(SLOT_MAGIC.to_bytes(4, "big"), dtype=np.uint8)


def _slots_among(store, topic: str, queue_id: int, phys: np.ndarray) -> np.ndarray:
    """Which of the queue entries at `phys` (in log order) point at a slot, not at a record: the
    bytes where a record has its MAGICCODE say (a slot is never read past its 8-byte prefix, its
    queue entry's size is the record's it stands for)."""
    out = np.zeros(len(phys), dtype=bool)
    i = 0
    while i < len(phys):
        lo = int(phys[i])
        if store.commitlog.segment_for(lo) is None or lo < store.commitlog.min_offset:
            _read_commitlog(store, topic, queue_id, lo, 0)  # raises DataDeleted
        j = i + int(np.searchsorted(phys[i:], _segment_end(store, lo), side="left"))
        mapped = _mapped_segment(store, lo, int(phys[j - 1]) + PREFIX.size)
        if mapped is not None:
            at = phys[i:j] - mapped[0] + MAGIC_AT
            arr = mapped[1]
            out[i:j] = ((arr[at] == _SLOT_MAGIC_BYTES[0]) & (arr[at + 1] == _SLOT_MAGIC_BYTES[1])
                        & (arr[at + 2] == _SLOT_MAGIC_BYTES[2]) & (arr[at + 3] == _SLOT_MAGIC_BYTES[3]))
        else:
            out[i:j] = [is_slot(_read_commitlog(store, topic, queue_id, int(p), PREFIX.size)) for p in phys[i:j]]
        i = j
    return out


def _same_kind(slots: np.ndarray) -> int:
    """How many entries from the first are all slots or all records."""
    change = np.flatnonzero(slots != slots[0]) if len(slots) else ()
    return int(change[0]) if len(change) else len(slots)


def _resolved(store, topic: str, queue_id: int, phys: np.ndarray, sizes: np.ndarray, slots: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, int]:
    """The records of a read some of whose entries are slots, back to back: each slot's record
    made by commit_ref.final_records in one compiled pass (else commit_ref.resolve_many), each
    other record copied as it is."""
    record_at = np.zeros(len(phys), dtype=np.int64)
    np.cumsum(sizes[:-1], out=record_at[1:])
    out = np.frombuffer(pa.allocate_buffer(max(int(sizes.sum()), 1)), dtype=np.uint8)  # the pool's pages
    view = _slot_view(store, topic, queue_id, phys[slots], sizes[slots])
    if view is None or not final_records(view, out, record_at[slots]):
        return _resolved_one_by_one(store, topic, queue_id, phys, sizes, slots)
    if not slots.all():
        records = ~slots
        got = _bytes_at(store, topic, queue_id, phys[records], sizes[records])
        if got is None:
            return _resolved_one_by_one(store, topic, queue_id, phys, sizes, slots)
        data, at = got
        for o, a, n in zip(record_at[records].tolist(), at.tolist(), sizes[records].tolist()):  # rare: a read across kinds
            out[o:o + n] = data[a:a + n]
    return out, record_at, len(phys)


def _slot_view(store, topic: str, queue_id: int, phys: np.ndarray, sizes: np.ndarray) -> SlotView | None:
    """commit_ref.slot_view of the slots at `phys` (their entries' `sizes`), read from the maps or by
    spans; None when the compiled readers leave them to resolve_many."""
    found = _bytes_at(store, topic, queue_id, phys, np.full(len(phys), SLOT_SIZE, dtype=np.int64))
    if found is None:
        return None
    try:
        return slot_view(found[0], found[1], phys, sizes, store.commitlog.read,
                         lambda p, n: _bytes_at(store, topic, queue_id, p, n))
    except (MessageNotFound, StoreError) as exc:
        raise StoreError(f"queue {topic}:{queue_id}: a slot does not match the CommitLog: {exc}") from exc


def _bytes_at(store, topic: str, queue_id: int, phys: np.ndarray, sizes: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray] | None:
    """(bytes, each one's position in them) of the log's [phys[i], phys[i] + sizes[i]), from the maps
    or read by spans; None when they do not all fit one read. `phys` need not be in order (the halves
    of transactions committed in another order than prepared): both reads walk them in log order."""
    order = None
    if len(phys) > 1 and not bool((phys[1:] >= phys[:-1]).all()):
        order = np.argsort(phys, kind="stable")
        phys, sizes = phys[order], sizes[order]
    got = gather_records(store, topic, queue_id, phys, sizes)
    if got is None:
        got = read_spans(store, topic, queue_id, phys, sizes)
    data, at, count = got
    if count != len(phys):
        return None
    if order is not None:
        at, unsorted = np.empty_like(at), at
        at[order] = unsorted
    return data, at


def _resolved_one_by_one(store, topic: str, queue_id: int, phys: np.ndarray, sizes: np.ndarray, slots: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, int]:
    """_resolved by commit_ref.resolve_many, a record at a time (what final_records leaves to it)."""
    try:
        resolved = iter(resolve_many(store.commitlog.read, phys[slots].tolist()))
    except (MessageNotFound, StoreError) as exc:
        raise StoreError(f"queue {topic}:{queue_id}: a slot does not match the CommitLog: {exc}") from exc
    pieces = []
    for p, n, slot in zip(phys.tolist(), sizes.tolist(), slots.tolist()):
        raw = next(resolved) if slot else _read_commitlog(store, topic, queue_id, p, n)
        if len(raw) != n:
            raise StoreError(f"queue {topic}:{queue_id} entry at physical offset {p} "
                             f"does not match the CommitLog: {len(raw)} bytes, the entry says {n}")
        pieces.append(raw)
    record_at = np.zeros(len(phys), dtype=np.int64)
    np.cumsum(sizes[:-1], out=record_at[1:])
    return np.frombuffer(b"".join(pieces), dtype=np.uint8), record_at, len(phys)


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
