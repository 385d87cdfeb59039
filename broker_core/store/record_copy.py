"""Record copies: new CommitLog records made from stored ones without decoding them.

RocketMQ's EndTransaction COMMIT writes every half message again as its final
message: same body, flag, born time and host, and properties, with the real
topic and queue restored, the COMMIT transaction type, and
PREPAREDTRANSACTIONOFFSET pointing back at the half. (A discard copies the
halves to TRANS_CHECK_MAX_TIME_TOPIC the same way.) A Spark micro-batch is one
transaction of up to millions of halves, and every writer of the batch waits for
its COMMIT, so the copy must cost far less than the original append.

Decoding each half into a Message and encoding it again would cost far more than
the append. A copy works on the stored bytes instead: the sources' header fields
are read by one compiled pass (record_copy_numba: the GIL released, the checks
and the property search folded in), or with struct per record (the per-record
implementation: sources with IPv6 hosts, and the oracle tests compare the
compiled pass with); the body is written from the
bytes read (its CRC is taken from the source header, not computed again), the
property string is reused as stored (it passed validation when the source was
written, by this store), and only what changes is encoded: the header and the
record CRC. The dispatch inputs (tags, UNIQ_KEY, KEYS) are cut out of the
property strings where they were found; no property dict is built.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from itertools import accumulate, chain, pairwise
from typing import NamedTuple, Sequence

import numpy as np

from txmq.broker.errors import StoreError
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.columnar_read import gather_records, read_spans
from txmq.broker.store.commit_ref import SLOT_HAS_KEYS, SLOT_HAS_UNIQ_KEY, SLOT_SCHEDULED, slot_rows
from txmq.broker.store.dispatch import tag_hashes_of
from txmq.broker.store.message import (
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_GROUP_BITS,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_MASK,
)
from txmq.broker.store.record import without_property
from txmq.broker.store.record_layout import (
    BORN_HOST_AT,
    CRC_PREFIX,
    CRC_SUFFIX_LEN,
    CRC_TAIL_LEN,
    FIXED_HEAD,
    HEADER_V4_SIZE,
    HOST_V4_SIZE,
    HOST_V6_EXTRA,
    HOST_V6_SIZE,
    MAGIC_CODE,
    RECONSUME_AT,
    REST,
)
from txmq.broker.store.record_block import RecordBlock
from txmq.broker.store.record_columns import gather_binary

# Bits a copy never inherits: its transaction type is the request's, its group bits
# are the group it is written in, and the host-family bits follow the hosts it is
# encoded with.
_NOT_INHERITED = SYSFLAG_TRANSACTION_MASK | SYSFLAG_GROUP_BITS | SYSFLAG_BORNHOST_V6 \
    | SYSFLAG_STOREHOST_V6
# Below these counts sources are cut record by record (_copied_record_by_record): the compiled
# scan's fixed set-up costs more than the per-record loop for a few (crossovers: docs/benchmarks.md).
COLUMNAR_MIN_COPIES = 128  # records copied whole (append_group_copies)
COLUMNAR_MIN_SLOTS = 32  # slots of a COMMIT by reference (reference_slots), which keep less of each
SPAN_MAX = 4 << 20  # bytes of neighbouring sources read with one pread
SPAN_GAP_MAX = 64 << 10  # ... skipping at most this many bytes of other records between two


@dataclass(frozen=True)
class Reroute:
    """Copies whose source carries the property `marker` go to (`topic`, `queue_id`) instead of their
    row's topic and queue: the source's own bytes decide, so no caller keeps a per-copy flag."""

    marker: str
    topic: str
    queue_id: int


@dataclass(frozen=True)
class RecordCopies:
    """Which stored records to copy (columns, one row per copy, written in this order) and
    what each copy changes.

    `source_topic`/`source_queue_id` name the queue the sources were read from, for
    error messages (a source that is not a record start raises StoreError naming it).
    The integer columns are kept as int64 arrays, whatever sequence they were given as:
    a COMMIT of a million copies slices them into parts as views, and frees no int objects.
    """

    physical_offsets: np.ndarray
    sizes: np.ndarray
    topics: Sequence[str]
    queue_ids: np.ndarray
    transaction_type: int
    source_topic: str
    source_queue_id: int = 0
    drop_properties: tuple[str, ...] = field(default=())
    reroute: Reroute | None = None

    def __post_init__(self) -> None:
        for name in ("physical_offsets", "sizes", "queue_ids"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        n = len(self.physical_offsets)
        if not (len(self.sizes) == len(self.topics) == len(self.queue_ids) == n):
            raise ValueError("RecordCopies columns differ in length: "
                             f"{n} offsets, {len(self.sizes)} sizes, {len(self.topics)} topics, "
                             f"{len(self.queue_ids)} queue ids")
        if self.transaction_type & ~SYSFLAG_TRANSACTION_MASK:
            raise ValueError(f"transaction_type {self.transaction_type:#x} is not a transaction type")

    def __len__(self) -> int:
        return len(self.physical_offsets)

    def parts(self, max_bytes: int) -> list["RecordCopies"]:
        """These copies split, in order, into runs of sources of at most `max_bytes` each
        (a run holds at least one copy)."""
        ends = np.cumsum(self.sizes)  # one search per part, not a step per copy
        bounds = [0]
        while bounds[-1] < len(self):
            start = bounds[-1]
            before = int(ends[start - 1]) if start else 0
            bounds.append(max(start + 1, int(np.searchsorted(ends, before + max_bytes, side="right"))))
        return [replace(self, physical_offsets=self.physical_offsets[a:b], sizes=self.sizes[a:b],
                        topics=self.topics[a:b], queue_ids=self.queue_ids[a:b])
                for a, b in pairwise(bounds)]


def copy_columns(store, copies: RecordCopies) -> BatchColumns:
    """The copies as a checked and encoded batch, ready for the store's write path.

    Reads the sources, then derives every column of the copies from them: record by
    record for a few, column-wise for many; sources with IPv4 hosts (all but rare ones)
    become a RecordBlock, which the CommitLog encodes column-wise too (record_block).
    Before anything is written, raises
    StoreError when a source is not the record its offset and size name, and a
    NotFound error (MessageNotFound, DataDeleted) when retention removed it. Sources
    of more than columnar_read.READ_BUFFER_MAX bytes are read in several passes (a
    read returns short at that size).
    """
    scans = _scans(store, copies, COLUMNAR_MIN_COPIES)
    if scans is None:
        return _copied_record_by_record(store, copies)
    return _scanned_batch(scans, copies)


def _scans(store, copies: RecordCopies, min_copies: int) -> list["_Scan"] | None:
    """The sources scanned by the compiled pass, one _Scan per read; None when the per-record path
    must take them (fewer than `min_copies`, or a source with an IPv6 host: rare)."""
    if len(copies) < min_copies:
        return None
    phys, sizes = copies.physical_offsets, copies.sizes
    spans: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    done = 0
    while done < len(phys):
        data, record_at, count = _read_sources(store, copies, phys[done:], sizes[done:])
        spans.append((data, record_at[:count], phys[done:done + count], sizes[done:done + count]))
        done += count
    kernel = _compiled_scan()
    scans = [_scanned(kernel, *span, copies) for span in spans]
    return None if any(scan is None for scan in scans) else scans


@functools.cache
def _compiled_scan():
    """The compiled source scan's module (record_copy_numba), imported on first use so processes
    that never copy records never import numba."""
    from txmq.broker.store import record_copy_numba

    return record_copy_numba


def load_compiled_scan() -> bool:
    """Load the compiled source scan now (numba's cached machine code), which would otherwise delay
    the first large COMMIT. A broker calls it once at start, off its serving threads."""
    kernel = _compiled_scan()
    nothing = np.zeros(0, dtype=np.int64)
    kernel.scan_sources(_read_only(np.zeros(0, dtype=np.uint8)), nothing, nothing, nothing, _CRC_PREFIX_BYTES,
                        np.zeros((1, 4), dtype=np.uint8), np.ones(1, dtype=np.int64),
                        np.zeros((kernel.COLUMN_ROWS, 0), dtype=np.int64), np.zeros((0, HOST_V4_SIZE), dtype=np.uint8),
                        np.zeros((0, 1, 2), dtype=np.int64))
    return True


def _read_only(data: np.ndarray) -> np.ndarray:
    """`data` as a read-only array: numba compiles one variant per argument type, and sources
    come read-only (a segment's map) or not (bytes gathered across segments)."""
    if not data.flags.writeable:
        return data
    view = data.view()
    view.flags.writeable = False
    return view


_CRC_PREFIX_BYTES = np.frombuffer(CRC_PREFIX, dtype=np.uint8)
_DISPATCH_NAMES = (b"TAGS", b"UNIQ_KEY", b"KEYS")


@dataclass
class _Scan:
    """One read's sources as the compiled scan found them (IPv4 hosts only)."""

    block: RecordBlock
    sys_flag: np.ndarray
    found: np.ndarray  # (n, names, 2): start and end of each named property, -1 when absent
    data: np.ndarray


def _scanned(kernel, data: np.ndarray, record_at: np.ndarray, phys: np.ndarray, sizes: np.ndarray,
             copies: RecordCopies) -> _Scan | None:
    """The sources of one read scanned by the compiled loop (record_copy_numba): columns, hosts and
    where the dispatch inputs and the properties to drop are. None when a source has an IPv6
    host (the per-record path copies those); StoreError naming the first source that is not a record."""
    n = len(record_at)
    names = [*_DISPATCH_NAMES, *_reroute_names(copies), *(name.encode() for name in copies.drop_properties)]
    name_rows = np.zeros((len(names), max(map(len, names))), dtype=np.uint8)
    for k, name in enumerate(names):
        name_rows[k, :len(name)] = np.frombuffer(name, dtype=np.uint8)
    columns = np.empty((kernel.COLUMN_ROWS, n), dtype=np.int64)
    born_host = np.empty((n, HOST_V4_SIZE), dtype=np.uint8)
    found = np.empty((n, len(names), 2), dtype=np.int64)
    bad, row = kernel.scan_sources(_read_only(data), record_at.astype(np.int64, copy=False), phys, sizes,
                                   _CRC_PREFIX_BYTES, name_rows,
                                   np.array(list(map(len, names)), dtype=np.int64), columns, born_host, found)
    if bad == kernel.IPV6_HOST:
        return None
    if bad:
        raise StoreError(f"queue {copies.source_topic}:{copies.source_queue_id} entry at physical offset "
                         f"{int(phys[row])} does not match the CommitLog: {kernel.WHAT_IS_WRONG[bad]}")
    k = kernel
    block = RecordBlock(
        buffers=[data], body_buf=np.zeros(n, dtype=np.int32), body_at=columns[k.BODY_AT],
        body_len=columns[k.BODY_LEN], props_buf=np.zeros(n, dtype=np.int32), props_at=columns[k.PROPS_AT],
        props_len=columns[k.PROPS_LEN], body_crc=columns[k.BODY_CRC].astype(np.uint32),
        flag=columns[k.FLAG].astype(np.int32), born_ts=columns[k.BORN_TS], born_host=born_host,
        reconsume=columns[k.RECONSUME].astype(np.int32), prepared=phys)
    dropped = found[:, len(_DISPATCH_NAMES) + len(_reroute_names(copies)):]
    return _Scan(_without_found(block, dropped, data), columns[k.SYS_FLAG], found, data)


def _without_found(block: RecordBlock, spans: np.ndarray, data: np.ndarray) -> RecordBlock:
    """`block` with the properties at `spans` ((n, k, 2) start/end in `data`, -1: none) cut out of
    their property strings. Few strings hold one (a half's prepare time: the first half of each
    prepare call); the changed strings go to a buffer of their own."""
    hit = (spans[:, :, 0] >= 0).any(axis=1) if spans.shape[1] else np.zeros(block.count, dtype=bool)
    rows = np.flatnonzero(hit)
    if not len(rows):
        return block
    changed = []
    for row in rows.tolist():
        start = int(block.props_at[row])
        stop = start + int(block.props_len[row])
        cuts = sorted((int(a), int(b)) for a, b in spans[row].tolist() if a >= 0)
        kept, at = [], start
        for a, b in cuts:
            kept.append(data[at:a].tobytes())
            at = b
        kept.append(data[at:stop].tobytes())
        changed.append(b"".join(kept))
    return _with_changed_properties(block, rows, changed)


def _with_changed_properties(block: RecordBlock, rows: np.ndarray, changed: list[bytes]) -> RecordBlock:
    """`block` with the property strings of `rows` replaced by `changed`, which go to a buffer of
    their own, back to back."""
    side = np.frombuffer(b"".join(changed), dtype=np.uint8)
    props_buf, props_at, props_len = block.props_buf.copy(), block.props_at.copy(), block.props_len.copy()
    props_buf[rows] = len(block.buffers)
    props_len[rows] = list(map(len, changed))
    props_at[rows] = np.cumsum(props_len[rows]) - props_len[rows]
    return replace(block, buffers=[*block.buffers, side], props_buf=props_buf, props_at=props_at,
                   props_len=props_len)


def _scanned_batch(scans: list[_Scan], copies: RecordCopies) -> BatchColumns:
    """The copies as a batch from the compiled scans of their reads."""
    block = RecordBlock.concat([scan.block for scan in scans])
    sys_flags = np.concatenate([scan.sys_flag for scan in scans]) if len(scans) > 1 else scans[0].sys_flag
    tags, uniq_keys, keys = ([*chain.from_iterable(_found_texts(scan, k) for scan in scans)]
                             for k in range(len(_DISPATCH_NAMES)))
    marked = None
    if copies.reroute is not None:  # the reroute marker is the name right after the dispatch inputs
        marked = np.concatenate([scan.found[:, len(_DISPATCH_NAMES), 0] >= 0 for scan in scans])
    topics, queue_ids = _destinations(copies, marked)
    return BatchColumns.of_block(
        block, topics=topics, queue_ids=queue_ids,
        sys_flags=(sys_flags & ~_NOT_INHERITED | copies.transaction_type).tolist(),
        tags=_decoded(tags), uniq_keys=uniq_keys, keys=_decoded(keys))


def _reroute_names(copies: RecordCopies) -> list[bytes]:
    return [copies.reroute.marker.encode()] if copies.reroute is not None else []


def _destinations(copies: RecordCopies, marked: np.ndarray | None) -> tuple[list[str], list[int]]:
    """Each copy's (topic, queue id): its row's, or the reroute's where its source carries the marker."""
    topics, queue_ids = list(copies.topics), copies.queue_ids.tolist()
    if marked is None:
        return topics, queue_ids
    reroute = copies.reroute
    assert reroute is not None and len(marked) == len(topics), "a marker column needs a reroute, one row per copy"
    for row in np.flatnonzero(marked).tolist():
        topics[row], queue_ids[row] = reroute.topic, reroute.queue_id
    return topics, queue_ids


def _found_texts(scan: _Scan, k: int) -> list[bytes | None]:
    """The values of dispatch property k (_DISPATCH_NAMES) in a scan's sources, None where absent."""
    n = scan.block.count
    start, end = scan.found[:, k, 0], scan.found[:, k, 1]
    rows = np.flatnonzero(start >= 0)
    if not len(rows):
        return [None] * n
    value_at = start[rows] + len(_DISPATCH_NAMES[k]) + 1
    values = gather_binary(scan.data, value_at, end[rows] - 1 - value_at).to_pylist()
    if len(rows) == n:
        return values
    out: list[bytes | None] = [None] * n
    for r, v in zip(rows.tolist(), values):
        out[r] = v
    return out


def _copied_record_by_record(store, copies: RecordCopies) -> BatchColumns:
    """copy_columns record by record: the same columns, cut out of each source's bytes with
    struct and slices. The per-record implementation: the oracle tests compare the compiled
    scan with, the path of sources with IPv6 hosts, and of fewer than COLUMNAR_MIN_COPIES copies
    (COLUMNAR_MIN_SLOTS for a COMMIT), since it costs nothing per call where the compiled path
    sets up arrays and a block (a RocketMQ client's one-message transaction)."""
    flags, sys_flags, born_ts, born_raws, reconsume, body_crcs, bodies, body_lens, props_crc = (
        [], [], [], [], [], [], [], [], [])
    tx_type = copies.transaction_type
    for buf, start, phys, size in _source_spans(store, copies):
        total, magic, body_crc, _, flag, _, at, sys_flag, born = FIXED_HEAD.unpack_from(buf, start)
        born_len = HOST_V6_SIZE if sys_flag & SYSFLAG_BORNHOST_V6 else HOST_V4_SIZE
        store_extra = HOST_V6_EXTRA if sys_flag & SYSFLAG_STOREHOST_V6 else 0
        rest = start + RECONSUME_AT + born_len - HOST_V4_SIZE + store_extra
        times, _, body_len = REST.unpack_from(buf, rest)
        body_at = rest + REST.size
        tail_at = body_at + body_len
        end = start + size
        props_at = tail_at + 3 + buf[tail_at] if 0 <= body_len and tail_at < end else end  # refused below
        props = buf[props_at:end - CRC_SUFFIX_LEN]
        if (magic != MAGIC_CODE or total != size or at != phys or body_len < 0 or props_at > end - CRC_TAIL_LEN
                or int.from_bytes(buf[props_at - 2:props_at], "big") != end - props_at
                or not props.endswith(CRC_PREFIX)):
            raise StoreError(f"queue {copies.source_topic}:{copies.source_queue_id} entry at physical offset "
                             f"{phys} does not match the CommitLog: not the record it names")
        flags.append(flag)
        sys_flags.append((sys_flag & ~_NOT_INHERITED) | tx_type)
        born_ts.append(born)
        born_raws.append(buf[start + BORN_HOST_AT:start + BORN_HOST_AT + born_len])
        reconsume.append(times)
        body_crcs.append(body_crc)
        bodies.append(buf[body_at:tail_at])
        body_lens.append(body_len)
        props_crc.append(props)
    marked = None
    if copies.reroute is not None:  # looked for before any property is dropped, as the compiled scan does
        head = copies.reroute.marker.encode()
        found = [v is not None for v in _values_each(props_crc, head, b"".join(props_crc))]
        marked = np.array(found, dtype=bool) if any(found) else None  # most commits schedule nothing
    topics, queue_ids = _destinations(copies, marked)
    if copies.drop_properties:
        props_crc = _without_properties(props_crc, copies.drop_properties)
    tags, uniq_keys, keys = dispatch_properties(props_crc)
    return BatchColumns.of_columns(
        topics=topics, bodies=bodies, queue_ids=queue_ids, flags=flags,
        sys_flags=sys_flags, born_timestamps=born_ts, born_raws=born_raws, reconsume_times=reconsume,
        prepared_offsets=copies.physical_offsets.tolist(), body_lens=body_lens, body_crcs=body_crcs,
        props_crc=props_crc, tags=tags, uniq_keys=uniq_keys, keys=keys)


class ReferenceSlots(NamedTuple):
    """A COMMIT by reference's slots and the index keys its write adds at their addresses."""

    topics: list[str]  # the topic table
    rows: np.ndarray  # SLOT_DTYPE, BACK and queue offsets not set
    dest_topics: list[str]  # each slot's topic
    uniq_keys: list  # each slot's UNIQ_KEY (bytes or str) or None
    keys: list  # each slot's KEYS or None


def reference_slots(store, copies: RecordCopies, *, store_v6: bool = False) -> ReferenceSlots:
    """The slots of a COMMIT by reference for `copies` (store/commit_ref.py): the same scan of the
    sources as a copy (one owner of finding each half's destination, tags, UNIQ_KEY and KEYS),
    keeping of each copy only its size, queue, tag hash and what replay and the index must know.
    `store_v6`: the broker's store host is IPv6 (a copy's header would be longer by HOST_V6_EXTRA)."""
    store_extra = HOST_V6_EXTRA if store_v6 else 0
    scans = _scans(store, copies, COLUMNAR_MIN_SLOTS)
    if scans is not None:  # column-wise, from the scan alone: no copy is laid out or filled
        block = RecordBlock.concat([scan.block for scan in scans])
        marked = None
        if copies.reroute is not None:
            marked = np.concatenate([scan.found[:, len(_DISPATCH_NAMES), 0] >= 0 for scan in scans])
        dest_topics, queue_ids = _destinations(copies, marked)
        found = [np.concatenate([scan.found[:, k, 0] >= 0 for scan in scans]) for k in (1, 2)]
        tags = _decoded([*chain.from_iterable(_found_texts(scan, 0) for scan in scans)])
        uniq_keys = [*chain.from_iterable(_found_texts(scan, 1) for scan in scans)] if found[0].any() \
            else [None] * len(copies)
        keys = _decoded([*chain.from_iterable(_found_texts(scan, 2) for scan in scans)]) if found[1].any() \
            else [None] * len(copies)
        topics = _distinct(dest_topics)
        if len(topics) == 1:  # a Spark micro-batch's one topic: no lookup per row
            topic_len: int | np.ndarray = len(topics[0].encode())
        else:
            topic_bytes = {t: len(t.encode()) for t in topics}
            topic_len = np.array(list(map(topic_bytes.__getitem__, dest_topics)), dtype=np.int64)
        sizes = HEADER_V4_SIZE + store_extra + block.body_len + 3 + topic_len + block.props_len + CRC_SUFFIX_LEN
        has_uniq, has_keys = found
    else:
        batch = _copied_record_by_record(store, copies)
        tags, uniq_keys, keys = batch.dispatch_columns()
        dest_topics, queue_ids = batch.topics, batch.queue_ids
        topics = _distinct(dest_topics)
        sizes = [HEADER_V4_SIZE + (HOST_V6_EXTRA if len(born) > HOST_V4_SIZE else 0) + store_extra + body_len
                 + 3 + len(topic.encode()) + len(props) + CRC_SUFFIX_LEN
                 for born, body_len, topic, props in zip(batch.born_raws, batch.body_lens, batch.topics,
                                                         batch.props_crc)]
        has_uniq = np.array([v is not None for v in uniq_keys], dtype=bool)
        has_keys = np.array([v is not None for v in keys], dtype=bool)
    if len(topics) == 1:  # a Spark micro-batch's one topic: no lookup per row
        index = np.zeros(len(copies), dtype=np.int64)
    else:
        index = np.array(list(map({t: k for k, t in enumerate(topics)}.__getitem__, dest_topics)), dtype=np.int64)
    flags = SLOT_HAS_UNIQ_KEY * has_uniq.astype(np.int64) | SLOT_HAS_KEYS * has_keys.astype(np.int64)
    if copies.reroute is not None and copies.reroute.topic in topics:
        flags |= SLOT_SCHEDULED * (index == topics.index(copies.reroute.topic))
    return ReferenceSlots(topics, slot_rows(copies.physical_offsets, copies.sizes, sizes, queue_ids, index, flags,
                                            tag_hashes_of(tags)), list(dest_topics), list(uniq_keys), list(keys))


def _distinct(topics: list[str]) -> list[str]:
    """The topics in first-seen order; one of a million (a micro-batch's) by one pass in C."""
    if topics and topics.count(topics[0]) == len(topics):
        return [topics[0]]
    return list(dict.fromkeys(topics))


def _source_spans(store, copies: RecordCopies):
    """(bytes, the source's position in them, physical offset, size) per source, in order.

    Neighbouring sources (a prepare call's halves lie back to back) come with one
    read: a span grows while the next source starts after the previous one within
    SPAN_GAP_MAX bytes, in the same segment, up to SPAN_MAX bytes.
    """
    commitlog = store.commitlog
    phys, sizes = copies.physical_offsets.tolist(), copies.sizes.tolist()
    n, i = len(phys), 0
    while i < n:
        lo = hi = phys[i]
        seg = commitlog.segment_for(lo)
        limit = min(lo + SPAN_MAX, seg.start + seg.capacity) if seg is not None else lo + sizes[i]
        j = i
        while j < n and hi <= phys[j] <= hi + SPAN_GAP_MAX and phys[j] + sizes[j] <= limit or j == i:
            hi = phys[j] + sizes[j]
            j += 1
        buf = commitlog.read(lo, hi - lo)  # MessageNotFound when retention removed the segment
        for k in range(i, j):
            if phys[k] + sizes[k] - lo > len(buf) or sizes[k] < FIXED_HEAD.size + REST.size:
                raise StoreError(f"queue {copies.source_topic}:{copies.source_queue_id} entry at physical "
                                 f"offset {phys[k]} does not match the CommitLog: the log ends before the record")
            yield buf, phys[k] - lo, phys[k], sizes[k]
        i = j


def _read_sources(store, copies: RecordCopies, phys: np.ndarray, sizes: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    """(bytes holding the sources, each source's position in them, sources covered).

    When the sources are in log order, the sources of the first one's segment straight
    from that segment's memory map (no copy: the copies' bodies are written from the
    map; a group of copies larger than a segment takes one such read per segment),
    else read span by span.
    """
    if len(phys) and bool((phys[1:] > phys[:-1]).all()):  # in log order: one segment's sources at a time
        seg = store.commitlog.segment_for(int(phys[0]))
        if seg is not None:
            count = max(1, int(np.searchsorted(phys, seg.start + seg.capacity, side="left")))
            mapped = gather_records(store, copies.source_topic, copies.source_queue_id, phys[:count],
                                     sizes[:count])
            if mapped is not None:
                return mapped
    return read_spans(store, copies.source_topic, copies.source_queue_id, phys, sizes)


def _without_properties(props_crc: list[bytes], names: tuple[str, ...]) -> list[bytes]:
    """The property strings with the named properties removed (only strings holding one change).

    The strings holding a name are found by searching them joined back to back (one
    C-level search per occurrence, not one per string: a dropped property is rare)."""
    out = props_crc
    for name in names:
        raw = name.encode()
        marker = raw + b"\x01"
        joined = b"".join(out)
        at = joined.find(marker)
        if at < 0:
            continue
        starts = list(accumulate(map(len, out), initial=0))
        hits = []
        while at >= 0:
            row = bisect_right(starts, at) - 1
            hits.append(row)
            at = joined.find(marker, starts[row + 1])
        if out is props_crc:
            out = list(props_crc)
        for i in hits:
            out[i] = without_property(out[i], raw)
    return out


def dispatch_properties(props_crc: Sequence[bytes]) -> tuple[list[str | None], list[bytes | None],
                                                             list[str | None]]:
    """(TAGS, UNIQ_KEY as bytes, KEYS) of each property string, None where absent: what the
    dispatch of a record needs from its properties, without parsing them into a dict."""
    joined = b"".join(props_crc)
    uniq_keys = _values_each(props_crc, b"UNIQ_KEY", joined)
    return (_decoded(_values_each(props_crc, b"TAGS", joined)), uniq_keys,
            _decoded(_values_each(props_crc, b"KEYS", joined)))


def _values_each(props_crc: Sequence[bytes], name: bytes, joined: bytes) -> list[bytes | None]:
    """The value of property `name` in each property string (None where it has none)."""
    head = name + b"\x01"
    if head not in joined:
        return [None] * len(props_crc)
    return [_value_in(p, head) for p in props_crc]


def _value_in(props: bytes, head: bytes) -> bytes | None:
    at = props.find(head)
    while at > 0 and props[at - 1] != 2:  # inside a longer name: look further
        at = props.find(head, at + 1)
    if at < 0:
        return None
    start = at + len(head)
    return props[start:props.find(b"\x02", start)]


def _decoded(values: list[bytes | None]) -> list[str | None]:
    if values.count(None) == len(values):
        return values  # type: ignore[return-value]  # all None
    return [v.decode() if v is not None else None for v in values]


__all__ = ["RecordCopies", "ReferenceSlots", "Reroute", "copy_columns", "dispatch_properties", "load_compiled_scan",
           "reference_slots"]
