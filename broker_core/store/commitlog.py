"""The CommitLog: one append-only log of records for all topics, in fixed-size segments.

Segments are named by their 20-digit start offset; a record never straddles two
segments: when the next record does not fit (keeping room for an 8-byte blank),
the rest of the segment is filled with a blank record and writing continues in a
new segment. A batch is encoded into one buffer per segment it touches and
written with one pwrite each: no per-message syscalls.

The segment table is replaced (copy-on-write), never mutated, so readers use a
snapshot without taking the writer's lock.

A part of a split group (a large COMMIT written in parts, see split_group.py)
may be written on the CommitLog's I/O thread (WritePlan.SPLIT_PART_DEFERRED):
its writer places and encodes the next part while the kernel copies this one
into the page cache, the larger cost of a part. At most one such write is in flight and it is always the last write in
the log: every other write, truncation and close settles it first, and a flush
never counts its bytes as durable before it has landed. If it fails, the log is
cut back to where it began before anything else is written, and the split group
gets the error at its next write.
"""

from __future__ import annotations

import bisect
import enum
import struct
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import accumulate, chain, repeat
from operator import add
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np

from txmq.broker.errors import DataDeleted, IllegalOffset, MessageBodyTooLarge, MessageNotFound, StoreError
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.checksum import crc32
from txmq.broker.store.commit_ref import is_slot, resolve
from txmq.broker.store.durable import fsync_dir
from txmq.broker.store.mapped_file import MappedFile, file_name
from txmq.broker.store.record_block import MAX_BLOCK_BYTES, BlockLayout, encode_block
from txmq.broker.store.message import Message, StoredMessage
from txmq.broker.store.record_layout import (
    BLANK_MIN_BYTES,
    CRC_SUFFIX_LEN,
    CRC_TAIL_LEN,
    HEADER_V4,
    HEADER_V4_SIZE,
    MAGIC_CODE,
)
from txmq.broker.store.record import (
    _host_cache as _HOST_CACHE,
    RecordCorrupted,
    decode_record,
    encode_blank,
    encode_host,
    encode_record,
    record_size,
)


PROPS_EXTRA = CRC_TAIL_LEN
_U16 = struct.Struct(">H")
_CRC_FORMAT = b"%010d\x02"  # the record CRC as the CRC property's 10 digits
_RECORD_FIXED = HEADER_V4_SIZE + CRC_SUFFIX_LEN  # + body + tail (TOPICLEN through the CRC name)


class WritePlan(enum.Enum):
    """How a write is placed and made (one value in place of group/split/defer flags)."""

    RECORDS = (False, False, False)  # independent records: a batch may cross a segment end
    GROUP = (True, False, False)  # an atomic group: kept in one segment when it fits one
    SPLIT_PART = (False, True, False)  # a split group's part, written in place (its last part)
    SPLIT_PART_DEFERRED = (False, True, True)  # a split group's part that may go to the I/O thread

    def __init__(self, group: bool, split: bool, defer: bool) -> None:
        self.group = group
        self.split = split  # placed while the group's previous part may still be in flight
        self.defer = defer


class _TailHeads(dict):
    """length of (properties + CRC name) -> TOPICLEN, topic, PROPLEN: the bytes before a
    record's property string, shared by every record of the topic with that length."""

    def __init__(self, topic: str) -> None:
        super().__init__()
        raw = topic.encode()
        self.topic_raw = len(raw).to_bytes(1, "big") + raw

    def __missing__(self, length: int) -> bytes:
        head = self[length] = self.topic_raw + _U16.pack(length + CRC_SUFFIX_LEN)
        return head


class _DeferredWrite(NamedTuple):
    """A split group's part being written on the I/O thread: bytes [start, end) of the log."""

    future: Future
    start: int


class CommitLog:
    """Append-only record log; one writer (serialised by the caller), many readers."""

    def __init__(self, directory: Path, segment_bytes: int, store_host: tuple[str, int]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.store_host = encode_host(store_host)
        self._table: tuple[list[int], list[MappedFile]] = ([], [])
        self._topic_raw: dict[str, bytes] = {}
        self._heads: dict[str, _TailHeads] = {}
        self._dir_dirty = False
        self._flush_lock = threading.Lock()
        self._graveyard: list[tuple[float, MappedFile]] = []
        names = sorted(p.name for p in self.directory.iterdir() if p.name.isdigit() and len(p.name) == 20)
        segments = [MappedFile(self.directory / n, int(n), segment_bytes, reserve_ahead=True) for n in names]
        self._table = ([s.start for s in segments], segments)
        self.write_end = segments[-1].end if segments else 0  # recovery sets the true end
        self.flushed_end = 0
        self._deferred: _DeferredWrite | None = None  # see the module doc
        self._deferred_lock = threading.Lock()  # _deferred and write_end change together under it
        self._io: ThreadPoolExecutor | None = None
        self.deferred_failure: BaseException | None = None  # for the split group, found by another writer
        self.writes = 0  # writes made (in flight or done): a split group tells its own from others' by it

    # --- geometry --------------------------------------------------------------

    @property
    def segments(self) -> list[MappedFile]:
        return list(self._table[1])

    @property
    def min_offset(self) -> int:
        segs = self._table[1]
        return segs[0].start if segs else self.write_end

    def segment_for(self, offset: int) -> MappedFile | None:
        starts, segs = self._table
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0:
            return None
        seg = segs[i]
        return seg if offset < seg.start + seg.capacity else None

    def _new_segment(self, start: int) -> MappedFile:
        seg = MappedFile(self.directory / file_name(start), start, self.segment_bytes, reserve_ahead=True)
        starts, segs = self._table
        self._table = (starts + [start], segs + [seg])
        self._dir_dirty = True
        return seg

    def _current_segment(self) -> MappedFile:
        segs = self._table[1]
        if segs:
            last = segs[-1]
            if self.write_end < last.start + last.capacity:
                return last
        return self._new_segment(self.write_end)

    # --- writes ------------------------------------------------------------------

    def write_batch(self, messages: Sequence[Message], props: Sequence[bytes], sys_flags: Sequence[int],
                    queue_offsets: Sequence[int], store_timestamp: int,
                    plan: WritePlan = WritePlan.RECORDS) -> list[tuple[int, int]]:
        """Encode and write records one by one with record.encode_record; returns (physical
        offset, size) per message.

        The general encoder, for what write_columns leaves: IPv6 hosts (their headers
        are longer) and records too large for a segment (refused here, naming the
        record). Segments roll as in write_columns.
        """
        host = self.store_host
        topics = {t: t.encode() for t in {m.topic for m in messages}}
        sizes = [record_size(len(m.body), len(topics[m.topic]), len(p), encode_host(m.born_host)[1], host[1])
                 for m, p in zip(messages, props)]
        max_record = self.segment_bytes - BLANK_MIN_BYTES
        if not plan.split:
            self.settle()
        if max(sizes) > max_record:
            raise MessageBodyTooLarge(f"record of {max(sizes)} bytes does not fit a CommitLog segment of "
                                      f"{self.segment_bytes} bytes (at most {max_record} bytes per record)")
        seg, phys, rolls = self._placement(sizes, plan.group)
        parts: list = []
        for m, p, size, flag, qoff, pos in zip(messages, props, sizes, sys_flags, queue_offsets, phys):
            encode_record(parts, m, topics[m.topic], p, size, flag, qoff, pos, store_timestamp, host)
        # the general encoder's rare writes (IPv6 hosts) are never handed to the I/O thread
        self._write_records(parts, phys, sizes, rolls, seg, WritePlan.SPLIT_PART if plan.defer else plan)
        return list(zip(phys, sizes))

    def write_columns(self, batch: BatchColumns, sys_flags: Sequence[int], queue_offsets: Sequence[int],
                      store_timestamp: int, plan: WritePlan = WritePlan.RECORDS
                      ) -> tuple[list[int], list[int]] | None:
        """The append hot path: encode and write a batch column by column.

        Returns (physical offsets, sizes); the offsets list has one extra item, the
        end of the batch. Handles IPv4 hosts (the encoded header is then fixed-size);
        otherwise, or for a record larger than a segment, it writes nothing and returns
        None and the caller uses write_batch. Segments roll as in write_batch: a
        group that fits in one segment is kept in one segment; `plan` says how (module doc).
        """
        store_raw, store_v6 = self.store_host
        if store_v6:
            return None
        if not plan.split:
            self.settle()
        if batch.block is not None:
            placed = self._write_block(batch, sys_flags, queue_offsets, store_timestamp, plan)
            if placed is not None:
                return placed
            batch.fill_lists()  # crosses a segment end, or too large: record by record
        born_raws = self._born_raws(batch)
        if born_raws is None:
            return None
        topics = batch.topics
        props_crc = batch.props_crc
        if topics.count(topics[0]) == len(topics):
            tails = list(map(bytes.__add__, map(self._tail_heads(topics[0]).__getitem__, map(len, props_crc)),
                             props_crc))
        else:
            heads = {t: self._tail_heads(t) for t in set(topics)}
            tails = list(map(bytes.__add__, map(dict.__getitem__, map(heads.__getitem__, topics), map(len, props_crc)),
                             props_crc))
        sizes = list(map(_RECORD_FIXED.__add__, map(add, batch.body_lens, map(len, tails))))
        if max(sizes) > self.segment_bytes - BLANK_MIN_BYTES:
            return None  # write_batch raises the error that names the record
        seg, phys, rolls = self._placement(sizes, plan.group)
        bodies = batch.bodies
        born_ts = batch.born_timestamps
        if 0 in born_ts:  # a producer that gave no born time: the store's (all of them, usually)
            born_ts = (repeat(store_timestamp) if born_ts.count(0) == len(born_ts)
                       else [b or store_timestamp for b in born_ts])
        body_crcs = batch.body_crcs if batch.body_crcs is not None else map(crc32, bodies)
        headers = list(map(HEADER_V4.pack, sizes, repeat(MAGIC_CODE), body_crcs, batch.queue_ids, batch.flags,
                           queue_offsets, phys, sys_flags, born_ts, born_raws, repeat(store_timestamp),
                           repeat(store_raw), batch.reconsume_times, batch.prepared_offsets, batch.body_lens))
        crcs = map(_CRC_FORMAT.__mod__, map(crc32, tails, map(crc32, headers)))
        parts = list(chain.from_iterable(zip(headers, bodies, tails, crcs)))
        self._write_records(parts, phys, sizes, rolls, seg, plan)
        return phys, sizes

    def _write_block(self, batch: BatchColumns, sys_flags: Sequence[int], queue_offsets: Sequence[int],
                     store_timestamp: int, plan: WritePlan) -> tuple[list[int], list[int]] | None:
        """write_columns for a batch given as a RecordBlock (record_block): encoded column-wise into
        one buffer and written with one pwrite (one per segment when it crosses a segment end).
        None, writing nothing, when it is over MAX_BLOCK_BYTES (write_columns then goes record
        by record)."""
        block = batch.block
        layout = block.layout or BlockLayout(block, batch.topics, batch.queue_ids)
        sizes = layout.sizes
        if int(sizes.sum()) > MAX_BLOCK_BYTES or int(sizes.max()) > self.segment_bytes - BLANK_MIN_BYTES:
            return None
        size_list = sizes.tolist()
        seg, phys, rolls = self._placement(size_list, plan.group)
        data = encode_block(block, layout, sys_flags=sys_flags, queue_offsets=queue_offsets, phys=phys[:-1],
                            store_timestamp=store_timestamp, store_host=self.store_host[0])
        self._write_records([data], phys, size_list, rolls, seg, plan,
                            pieces=_block_pieces(data, size_list) if rolls else None)
        return phys, size_list

    @staticmethod
    def _born_raws(batch: BatchColumns) -> Sequence[bytes] | None:
        """Each message's encoded BORNHOST, or None if one is IPv6 (write_batch encodes those)."""
        raws = batch.born_raws
        if raws is not None:
            return raws if all(len(r) == 8 for r in set(raws)) else None
        born_hosts = batch.born_hosts
        distinct_hosts = set(born_hosts)
        if len(distinct_hosts) == 1:
            born = _HOST_CACHE.get(born_hosts[0]) or encode_host(born_hosts[0])
            return None if born[1] else repeat(born[0])
        encoded = {h: encode_host(h) for h in distinct_hosts}
        if any(v6 for _, v6 in encoded.values()):
            return None
        return [encoded[h][0] for h in born_hosts]

    def _placement(self, sizes: list[int], group: bool) -> tuple[MappedFile, list[int], list[int]]:
        """(the segment written first, each record's physical offset plus the end, the indexes of
        the records that open a new segment) for records of `sizes` appended now."""
        seg = self._current_segment()
        start = self.write_end
        phys = list(accumulate(sizes, initial=start))
        if phys[-1] + BLANK_MIN_BYTES <= seg.start + seg.capacity:
            return seg, phys, []
        phys, rolls = self._placed_across_segments(sizes, start, seg.start + seg.capacity, group)
        return seg, phys, rolls

    def _write_records(self, parts: list, phys: list[int], sizes: list[int], rolls: list[int],
                       seg: MappedFile, plan: WritePlan, *,
                       pieces: Callable[[int, int], list] | None = None) -> None:
        """Write encoded records (4 parts each) where _placement put them; all or nothing.
        `pieces(first, end)`: the bytes of records [first, end) when `parts` is not 4 per record
        (a block encoded as one buffer), for a write that crosses segment ends.

        A split group's part was placed (and encoded) while its previous part may still be
        in flight: that write settles first, and if it failed, this placement is void and
        the group gets the error. A deferred part (no segment roll) goes to the I/O thread.
        """
        if plan.split:
            failure = self.settle() or self.deferred_failure
            self.deferred_failure = None
            if failure is not None:
                raise failure
        # every write settles the one in flight first: at most one deferred write, and it is the last
        assert self._deferred is None, "a write placed behind a deferred one"
        if plan.defer and not rolls:
            self.writes += 1
            self._defer(parts, phys[-1], seg)
            return
        start = self.write_end
        try:
            if rolls:
                self._write_across_segments(pieces or _record_pieces(parts), phys, sizes, rolls, seg)
            else:
                seg.append_parts(parts)
        except BaseException:
            self.truncate_to(start)  # nothing of a failed batch stays, nor segments made for it
            raise
        self.write_end = phys[-1]
        self.writes += 1  # a write that failed was cut back: it counts for nobody

    def _defer(self, parts: list, end: int, seg: MappedFile) -> None:
        """Write `parts` at the end of `seg` on the I/O thread; the log's end is `end` from now."""
        if self._io is None:
            self._io = ThreadPoolExecutor(1, thread_name_prefix="txmq-commitlog-io")
        future = self._io.submit(seg.append_parts, parts)
        with self._deferred_lock:
            self._deferred = _DeferredWrite(future, self.write_end)
            self.write_end = end

    def after_writes(self, fn: Callable[[], object]) -> None:
        """Run `fn` once the write in flight (if any) is done: on the I/O thread, behind it, so
        that the caller does not wait; in place when no write ever went to the I/O thread.
        For work that must not delay the writer and may fail harmlessly (page-cache advice):
        an exception `fn` raises on the I/O thread is dropped."""
        if self._io is None:
            fn()
        else:
            self._io.submit(fn)

    def settle(self) -> BaseException | None:
        """Wait for the deferred write, if one is in flight (callers hold the store's write lock).

        If it failed, the log is cut back to where it began (it is the last write: nothing was
        written after it), the error is kept in `deferred_failure` for the split group, and
        returned; None otherwise.
        """
        deferred = self._deferred
        if deferred is None:
            return None
        try:
            deferred.future.result()
            failure = None
        except BaseException as exc:  # noqa: BLE001 - the split group gets it at its next write
            failure = exc
        with self._deferred_lock:
            self._deferred = None
        if failure is not None:
            self.truncate_to(deferred.start)
            self.deferred_failure = failure
        return failure

    def _placed_across_segments(self, sizes: list[int], start: int, seg_end: int,
                                group: bool) -> tuple[list[int], list[int]]:
        """Physical offsets of records that do not all fit in the current segment (one extra
        item: the end), and the indexes of the records that begin a new segment.

        Like write_batch: a group that fits in one segment moves to the next segment
        whole; otherwise each record goes where it fits and a segment whose next
        record does not fit ends with a blank record.
        """
        capacity = self.segment_bytes
        phys: list[int] = []
        rolls: list[int] = []
        pos = start
        if group and sum(sizes) + BLANK_MIN_BYTES <= capacity:
            pos, seg_end = seg_end, seg_end + capacity
            rolls.append(0)
        for i, size in enumerate(sizes):
            if pos + size + BLANK_MIN_BYTES > seg_end:
                pos, seg_end = seg_end, seg_end + capacity
                if not rolls or rolls[-1] != i:
                    rolls.append(i)
            phys.append(pos)
            pos += size
        phys.append(pos)
        return phys, rolls

    def _write_across_segments(self, pieces: Callable[[int, int], list], phys: list[int], sizes: list[int],
                               rolls: list[int], seg: MappedFile) -> None:
        """Write the encoded records (records [first, end) are `pieces(first, end)`), a blank
        record closing each segment they leave."""
        opens = set(rolls)
        bounds = sorted({0, *rolls, len(sizes)})
        for first, end in zip(bounds, bounds[1:]):  # the records of one segment each
            if first in opens:
                blank_at = phys[first - 1] + sizes[first - 1] if first else self.write_end
                seg.append(encode_blank(seg.start + seg.capacity - blank_at))
                seg = self._new_segment(seg.start + seg.capacity)
            seg.append_parts(pieces(first, end))

    def _tail_heads(self, topic: str) -> "_TailHeads":
        """TOPICLEN + topic + PROPLEN for each length of a record's property string up to its CRC digits."""
        heads = self._heads.get(topic)
        if heads is None:
            heads = self._heads[topic] = _TailHeads(topic)
        return heads

    # --- reads -------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes:
        """Raw bytes [offset, offset+size) within one segment (short at the write end)."""
        seg = self.segment_for(offset)
        if seg is None or seg.closed:
            raise MessageNotFound(f"no CommitLog segment holds physical offset {offset}")
        try:
            return seg.read(offset - seg.start, min(size, seg.start + seg.capacity - offset))
        except OSError as exc:  # a segment deleted by retention under our feet
            raise MessageNotFound(f"physical offset {offset} is no longer readable: {exc}") from exc

    def read_record(self, offset: int, size: int | None = None) -> StoredMessage:
        """Decode the record at a physical offset; MessageNotFound if there is none."""
        if offset < self.min_offset or offset >= self.write_end:
            raise MessageNotFound(f"physical offset {offset} is outside the CommitLog "
                                  f"[{self.min_offset}, {self.write_end})")
        if size is None:
            head = self.read(offset, 4)
            if len(head) < 4:
                raise MessageNotFound(f"no record at physical offset {offset}")
            size = int.from_bytes(head, "big")
            if size <= 0 or size > self.segment_bytes:
                raise MessageNotFound(f"no record at physical offset {offset}")
        buf = self.read(offset, size)
        try:
            if is_slot(buf):  # a message committed by reference: the record its slot stands for
                buf = resolve(self.read, offset)
            msg = decode_record(buf, 0)
        except (RecordCorrupted, StoreError, ValueError, IndexError, UnicodeDecodeError) as exc:
            raise MessageNotFound(f"no valid record at physical offset {offset}: {exc}") from exc
        if msg.physical_offset != offset:
            raise MessageNotFound(f"no record starts at physical offset {offset}")
        return msg

    # --- replication -----------------------------------------------------------------

    @property
    def settled_end(self) -> int:
        """The end of the bytes that are really written: a write still on the I/O thread is not."""
        with self._deferred_lock:
            return self.write_end if self._deferred is None else self._deferred.start

    def read_chunk(self, offset: int, max_bytes: int) -> bytes:
        """Raw bytes from `offset` (a record or segment boundary a follower reached), up to the
        settled end, never across a segment's end: a follower appends them as they are."""
        end = self.settled_end
        if offset > end:
            raise IllegalOffset(f"replication offset {offset} is beyond this log's end {end}")
        if offset < self.min_offset:
            raise DataDeleted(f"replication offset {offset} was deleted by retention; the log starts at "
                              f"{self.min_offset}", min_offset=self.min_offset)
        seg = self.segment_for(offset)
        if seg is None or offset == end:
            return b""
        return seg.read(offset - seg.start, min(max_bytes, end - offset, seg.start + seg.capacity - offset))

    def append_raw(self, offset: int, data: bytes) -> None:
        """Append bytes copied from a leader's log at the same offset (a follower's only write;
        the caller holds the store's write lock). A chunk never crosses a segment's end."""
        if offset != self.write_end:
            raise StoreError(f"replicated bytes at {offset} do not continue this log, which ends at {self.write_end}")
        seg = self._current_segment()
        if len(data) > seg.remaining:
            raise StoreError(f"replicated chunk of {len(data)} bytes at {offset} crosses the segment end "
                             f"{seg.start + seg.capacity}: the leader's segment size differs")
        seg.append(data)
        self.write_end = offset + len(data)
        self.writes += 1

    # --- durability ----------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything written so far; returns the durable end offset."""
        with self._flush_lock:
            with self._deferred_lock:  # a write still in flight is not durable yet: stop before it
                deferred = self._deferred
                target = self.write_end if deferred is None else deferred.start
            if target <= self.flushed_end and not self._dir_dirty:
                return self.flushed_end
            for seg in self._table[1]:
                if seg.end > self.flushed_end and not seg.closed:
                    seg.sync()
            if self._dir_dirty:
                self._dir_dirty = False
                fsync_dir(self.directory)
            self.flushed_end = max(self.flushed_end, target)
            return self.flushed_end

    # --- recovery and retention ----------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop everything at and after `offset` (recovery of a torn or incomplete tail)."""
        self.settle()  # a write in flight must not land after the cut
        starts, segs = self._table
        keep = [s for s in segs if s.start < offset or (s.start == offset and s is segs[0])]
        for seg in segs:
            if seg not in keep:
                seg.close()
                seg.delete()
                self._dir_dirty = True
        if keep:
            last = keep[-1]
            if last.end > offset:
                last.truncate(offset - last.start)
        self._table = ([s.start for s in keep], keep)
        self.write_end = offset
        self.flushed_end = min(self.flushed_end, offset)

    def restart_at(self, offset: int) -> None:
        """Drop every segment and continue the log at `offset`, a segment start past its end (a
        follower whose leader's retention deleted what it lacks: Kafka's truncateFullyAndStartAt)."""
        assert offset >= self.write_end and offset % self.segment_bytes == 0, \
            f"a log restarts forward at a segment start, not at {offset} (its end is {self.write_end})"
        self.settle()
        for seg in self._table[1]:
            seg.close()
            seg.delete()
        self._table = ([], [])
        self._dir_dirty = True
        self.write_end = self.flushed_end = offset

    def delete_segment(self, seg: MappedFile) -> None:
        """Retention: remove the oldest segment (never the one being written)."""
        starts, segs = self._table
        if not segs or segs[0] is not seg or len(segs) == 1:
            raise ValueError("only the oldest, non-active segment can be deleted")
        self._table = (starts[1:], segs[1:])
        seg.delete()
        self._dir_dirty = True
        self._graveyard.append((time.monotonic(), seg))

    def reap_deleted(self, older_than_s: float = 30.0) -> None:
        """Close descriptors of deleted segments once readers in flight are done with them."""
        now = time.monotonic()
        keep = []
        for when, seg in self._graveyard:
            if now - when >= older_than_s:
                seg.close()
            else:
                keep.append((when, seg))
        self._graveyard = keep

    def close(self) -> None:
        self.settle()
        if self._io is not None:
            self._io.shutdown(wait=True)
            self._io = None
        for seg in self._table[1]:
            seg.close()
        for _, seg in self._graveyard:
            seg.close()
        self._graveyard = []

    def disk_bytes(self) -> int:
        return sum(s.size for s in self._table[1])


def _record_pieces(parts: list) -> Callable[[int, int], list]:
    """The pieces of records [first, end) of records encoded as 4 parts each."""
    return lambda first, end: parts[4 * first:4 * end]


def _block_pieces(data: np.ndarray, sizes: list[int]) -> Callable[[int, int], list]:
    """The bytes of records [first, end) of records encoded back to back into `data`."""
    starts = list(accumulate(sizes, initial=0))
    return lambda first, end: [data[starts[first]:starts[end]]]
