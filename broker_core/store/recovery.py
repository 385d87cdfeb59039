"""Recovery after a restart: find the valid end of the CommitLog and rebuild derived data.

1. Start at the checkpoint's ``dispatch_flushed`` (a batch boundary): everything
   before it, and its queue/index entries, was fsynced. Recovery cost therefore
   follows the tail written since the last checkpoint, not the size of the log.
2. Scan forward verifying each record completely (structure, body CRC, record
   CRC, PHYSICALOFFSET == its position). The scan stops at the first invalid or
   incomplete record: the torn tail.
3. An atomic group is kept only if its GROUP_END record is valid: the valid end
   is the end of the last record that is not a GROUP_MEMBER (a trailing group
   without its end is dropped whole, even if it spans segments). A split group
   (SPLIT_GROUP records, written in parts with other writers' records between
   them) is dispatched when its END is scanned, never without it: its records
   wait from its GROUP_BEGIN; a later BEGIN, or the end of the scan, finds an
   earlier split group dead. Other records between its parts are kept as usual;
   dead split records at the very end of the log are truncated with the tail.
4. Truncate the CommitLog to the valid end; drop queue entries at or past the
   scan start in every ConsumeQueue (this also removes dirty entries pointing
   past the log end), then re-dispatch the scanned records.

If the log is shorter than the checkpoint says (a damaged or copied data
directory), the scan starts at the beginning of the last segment that still has
data, which keeps recovery bounded by one segment; or, when that segment begins
inside a split group, at the beginning of the segment holding the group's BEGIN
(a group is recovered whole or not at all).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from txmq.broker.store.commit_ref import COMMIT_REF_TOPIC, SLOT_HAS_KEYS, SLOT_HAS_UNIQ_KEY, slot_entries
from txmq.broker.store.commitlog import CommitLog
from txmq.broker.store.consume_queue import ENTRY
from txmq.broker.store.dispatch import Dispatcher, cached_tag_hash, goes_to_queue, index_keys
from txmq.broker.store.message import (
    SYSFLAG_GROUP_BEGIN,
    SYSFLAG_GROUP_END,
    SYSFLAG_GROUP_MEMBER,
    SYSFLAG_SPLIT_GROUP,
    StoredMessage,
)
from txmq.broker.store.record import RecordCorrupted, decode_record, is_blank, verify_record
from txmq.broker.store.record_layout import BLANK_MIN_BYTES, header_size
from txmq.broker.store.replay_columns import scan_groups

READ_CHUNK = 8 << 20
REDISPATCH_BATCH = 4096


@dataclass
class RecoveryReport:
    crashed: bool
    scan_start: int
    log_end: int
    truncated_bytes: int
    records_scanned: int
    redispatched: int
    seconds: float
    replay: "Replay | None" = None  # where a follower goes on dispatching replicated bytes


def _scan_start(commitlog: CommitLog, wanted: int) -> int:
    segs = commitlog.segments
    if not segs:
        return 0
    wanted = max(wanted, segs[0].start)
    seg = commitlog.segment_for(wanted)
    if seg is not None and wanted <= seg.end:
        return wanted
    last = segs[-1]
    if wanted == last.start + last.capacity == last.end:
        return wanted  # the checkpoint sits exactly at the end of a full segment
    # the checkpoint points past the data: start at the last segment that has data
    with_data = [s for s in segs if s.size > 0 and s.start <= wanted] or segs[:1]
    return with_data[-1].start


def scan(commitlog: CommitLog, start: int):
    """Yield (position, StoredMessage | None for a blank, record end) of valid records from `start`.

    Stops at the first invalid or incomplete record.
    """
    pos = start
    want = READ_CHUNK
    while True:
        seg = commitlog.segment_for(pos)
        if seg is None:
            return
        seg_cap_end = seg.start + seg.capacity
        buf = seg.read(pos - seg.start, want)
        full = len(buf) == want  # more data may follow this window
        want = READ_CHUNK
        off = 0
        while pos < seg_cap_end:
            avail = len(buf) - off
            if avail < BLANK_MIN_BYTES:
                if not full:
                    return  # end of data in this segment
                break  # refill
            blank = is_blank(buf, off)
            if blank:
                if pos + blank != seg_cap_end:
                    return  # a blank must end its segment exactly
                yield pos, None, seg_cap_end
                pos = seg_cap_end
                break
            size = int.from_bytes(buf[off:off + 4], "big")
            if size > avail:
                if not full or size > seg.capacity:
                    return  # torn: the record runs past the data
                want = max(READ_CHUNK, size + BLANK_MIN_BYTES)
                break  # refill from this record
            try:
                verify_record(buf, off, off + size)
                msg = decode_record(buf, off)
            except (RecordCorrupted, ValueError, IndexError, UnicodeDecodeError):
                return
            if msg.physical_offset != pos or pos + size + BLANK_MIN_BYTES > seg_cap_end:
                return  # a stale record from an earlier life of the file, or misplaced
            yield pos, msg, pos + size
            pos += size
            off += size


class _Entries(NamedTuple):
    """What dispatching one record writes: its queue entry (queue_key None: it gets none)
    and its index items."""

    queue_key: tuple[str, int] | None
    queue_offset: int
    entry: bytes
    index_items: list
    position: int


def _entries_of(commitlog: CommitLog, m: StoredMessage) -> list[_Entries]:
    """What dispatching record `m` writes: its own entry, and for a commit record (COMMIT by
    reference) one entry per slot, from its bytes alone but for the index keys of flagged halves."""
    items: list = []
    if m.properties:
        index_keys(items, m.properties, m.topic, m.physical_offset, m.store_timestamp)
    if not goes_to_queue(m.sys_flag, m.topic):
        return [_Entries(None, 0, b"", items, m.physical_offset)]
    own = _Entries((m.topic, m.queue_id), m.queue_offset,
                   ENTRY.pack(m.physical_offset, m.size, cached_tag_hash(m.properties)), items, m.physical_offset)
    if m.topic != COMMIT_REF_TOPIC:
        return [own]
    return [own, *_slot_entries_of(commitlog, m)]


def _slot_entries_of(commitlog: CommitLog, m: StoredMessage) -> list[_Entries]:
    got = slot_entries(m.body, m.physical_offset + header_size(m.sys_flag))
    out = []
    for t, q, qo, address, size, tag, flags, half in zip(
            got.topic_index.tolist(), got.queue_id.tolist(), got.queue_offset.tolist(), got.address.tolist(),
            got.size.tolist(), got.tag_hash.tolist(), got.flags.tolist(), got.half_phys.tolist()):
        topic = got.topics[t]
        items: list = []
        if flags & (SLOT_HAS_UNIQ_KEY | SLOT_HAS_KEYS):  # the one part of replay that reads the half
            index_keys(items, commitlog.read_record(half).properties, topic, address, m.store_timestamp)
        out.append(_Entries((topic, q), qo, ENTRY.pack(address, size, tag), items, address))
    return out


def _before_split_group(commitlog: CommitLog, start: int) -> int:
    """`start`, or an earlier segment's start when `start` lies inside a split group.

    Only for a scan that starts where the checkpoint does not (the log ends before
    it): a split group whose BEGIN lies before the scan's start would otherwise be
    taken for dead, and the queue entries it had before that start would stay while
    those after it are dropped: part of a COMMIT visible. Split groups are written
    one at a time, so the first split record the scan meets tells: a BEGIN, and
    every group in the scan begins in it; anything else, and one began before.
    """
    while True:
        first_split = next((msg for _, msg, _ in scan(commitlog, start)
                            if msg is not None and msg.sys_flag & SYSFLAG_SPLIT_GROUP), None)
        if first_split is None or first_split.sys_flag & SYSFLAG_GROUP_BEGIN:
            return start
        before = commitlog.segment_for(start - 1) if start else None
        if before is None:
            return start  # the BEGIN went with retention: the group is dead, as it must be
        start = before.start


class Replay:
    """Dispatches the records of the CommitLog from a position on, group by group.

    Recovery runs one over the tail after the checkpoint; a replica's follower runs
    one for the life of its store, fed after each chunk of replicated bytes (the
    same dispatch whether the bytes were written here or copied from the leader).
    A group's records wait until its end is scanned; `safe_end` is the end of the
    last complete group (or single record), where a torn or partial tail begins.
    """

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher, start: int) -> None:
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.position = start  # where the next scan starts (past every record scanned)
        self.safe_end = start
        self.pending: list[StoredMessage] = []  # a contiguous group's records, until its end
        self.split: list[_Entries] | None = None  # the dispatch entries of a split group, from its BEGIN
        self.split_begin: int | None = None  # where that BEGIN is
        self.scanned = 0
        self.redispatched = 0
        self._queue_writes: dict[tuple[str, int], list] = {}
        self._index_items: list = []
        self._unflushed = 0

    def _flush_batch(self, end: int) -> None:
        if self._queue_writes or self._index_items:
            self.dispatcher.dispatch(self._queue_writes, self._index_items, [], end, notify=False)
        self._queue_writes, self._index_items = {}, []
        self._unflushed = 0

    def _keep(self, entries: Iterable[_Entries]) -> None:
        for queue_key, queue_offset, entry, items, _ in entries:
            self._index_items.extend(items)
            if queue_key is None:
                continue
            run = self._queue_writes.get(queue_key)
            if run is not None and run[0] + len(run) - 1 != queue_offset:
                self._flush_batch(self.safe_end)  # not contiguous with what is pending: write that first
                run = None
            if run is None:
                run = self._queue_writes[queue_key] = [queue_offset]
            run.append(entry)
            self.redispatched += 1
            self._unflushed += 1

    def cut_at(self, end: int) -> None:
        """The log was cut at `end` (a group boundary): forget what was scanned past it."""
        self.position = self.safe_end = end
        self.pending = []
        if self.split is not None:
            if self.split_begin >= end:
                self.split = self.split_begin = None
            else:
                self.split = [e for e in self.split if e.position < end]
        self.dispatcher.hold = self.split_begin

    def _feed_compiled(self) -> None:
        """Dispatch the complete groups the compiled scan takes from `position` on."""
        while (got := scan_groups(self.commitlog, self.position)) is not None:
            assert got.start == self.position == self.safe_end and got.end > got.start, "scanned from a group boundary"
            self.dispatcher.dispatch(got.queue_writes, [], [], got.end, notify=False,
                                     index_columns=(got.index_hashes, got.index_phys, got.index_times))
            self.position = self.safe_end = got.end
            self.scanned += got.records
            self.redispatched += got.queued

    def feed(self, *, compiled: bool = False) -> int:
        """Scan and dispatch every valid record from `position` to the end of the data; returns
        `safe_end`. Records of a group whose end is not there yet wait for the next feed.
        `compiled`: take the common records with replay_columns' compiled scan first (a
        follower's log, which only grows while it is fed)."""
        if compiled and not self.pending and self.split is None:
            self._feed_compiled()
        for pos, msg, end in scan(self.commitlog, self.position):
            self.position = end
            if msg is None:
                if not self.pending:
                    self.safe_end = end
                continue
            self.scanned += 1
            flag = msg.sys_flag
            if flag & SYSFLAG_SPLIT_GROUP:
                if flag & SYSFLAG_GROUP_BEGIN:
                    self.split = []  # a split group still open here died with its broker
                    self.split_begin = pos
                if self.split is None:
                    continue  # a record of a split group that died before this scan's start
                # only what dispatch needs: a group may hold millions
                self.split.extend(_entries_of(self.commitlog, msg))
                if not flag & SYSFLAG_GROUP_END:
                    continue
                self._keep(self.split)
                self.split = self.split_begin = None
                self.safe_end = end
            else:
                self.pending.append(msg)
                if flag & SYSFLAG_GROUP_MEMBER:
                    continue
                # a complete group (or a single record)
                self._keep([e for m in self.pending for e in _entries_of(self.commitlog, m)])
                self.pending = []
                self.safe_end = end
            if self._unflushed >= REDISPATCH_BATCH or len(self._index_items) >= REDISPATCH_BATCH:
                self._flush_batch(self.safe_end)
        self._flush_batch(self.safe_end)
        # A follower's checkpoint must not pass an open split group's BEGIN: recovery rescans it
        # from there, and the group's END may still come from the leader.
        self.dispatcher.hold = self.split_begin
        if self.split_begin is not None:
            self.dispatcher.dispatched_through = min(self.dispatcher.dispatched_through, self.split_begin)
        return self.safe_end


def recover(commitlog: CommitLog, dispatcher: Dispatcher, dispatch_flushed: int, *, crashed: bool) -> RecoveryReport:
    t0 = time.perf_counter()
    data_end = commitlog.segments[-1].end if commitlog.segments else 0
    start = _scan_start(commitlog, dispatch_flushed)
    if commitlog.segments and start < max(dispatch_flushed, commitlog.segments[0].start):
        start = _before_split_group(commitlog, start)  # the log ends before the checkpoint
    for cq in dispatcher.queues():
        cq.truncate_from_physical(start)
    replay = Replay(commitlog, dispatcher, start)
    safe_end = replay.feed()
    if safe_end < data_end or (commitlog.segments and commitlog.segments[-1].start > safe_end):
        commitlog.truncate_to(safe_end)
    else:
        commitlog.write_end = safe_end
    replay.cut_at(safe_end)
    dispatcher.dispatched_through = safe_end if dispatcher.hold is None else min(safe_end, dispatcher.hold)
    return RecoveryReport(crashed, start, safe_end, max(0, data_end - safe_end), replay.scanned, replay.redispatched,
                          time.perf_counter() - t0, replay)
