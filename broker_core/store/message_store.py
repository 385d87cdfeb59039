"""MessageStore: the storage facade the transaction engine and the server use.

Writes are serialised by one write lock (encode + write + dispatch); in `sync`
mode the appender then waits for group-committed fsync outside the lock, so
concurrent appenders share fsyncs. Reads take no lock: queue max offsets are
published atomically by the dispatcher and the CommitLog segment table is
copy-on-write.

Layout of `data_dir`: commitlog/ (segments), consumequeue/<topic>/<queue id>/,
index/, checkpoint, abort (present while running), lock, topics.json,
offsets.json, store_meta.json (file geometry fixed at creation).
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial, reduce
from itertools import chain, compress, count, repeat
from operator import or_
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence, TypeVar

import numpy as np

from txmq.broker.errors import DataDeleted, IllegalOffset, MessageNotFound, QueueReserved, StoreError
from txmq.broker.store.checkpoint import AbortMarker, StoreCheckpoint
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.commitlog import CommitLog
from txmq.broker.store.columnar_read import forget_mapped
from txmq.broker.store.config import StoreConfig
from txmq.broker.store.consume_queue import ENTRY, ENTRY_DTYPE, ENTRY_SIZE, QueueEntry
from txmq.broker.store.dispatch import (
    NOT_QUEUED_BIT,
    DispatchEntry,
    Dispatcher,
    goes_to_queue,
    index_hashes,
    index_positions,
    QueueGroups,
    queue_runs,
    queue_runs_grouped,
    tag_hashes_of,
)
from txmq.broker.store.flush import FlushService, GroupCommit
from txmq.broker.store.index_file import IndexService, topic_key, uniq_index_key
from txmq.broker.store.message import (
    SYSFLAG_GROUP_BEGIN,
    SYSFLAG_GROUP_BITS,
    SYSFLAG_GROUP_END,
    SYSFLAG_GROUP_MEMBER,
    SYSFLAG_SPLIT_GROUP,
    AppendResult,
    AppendResults,
    LazyList,
    Message,
    StoredMessage,
)
from txmq.broker.store.metadata import ConsumerOffsets, TopicRegistry, read_json, write_json_atomically
from txmq.broker.store.page_cache import PageCacheWindow
from txmq.broker.store.record import (
    RecordCorrupted,
    decode_records,
    message_ids,
    parse_message_id,
    store_timestamp_of,
)
from txmq.broker.store.record_copy import RecordCopies, copy_columns
from txmq.broker.store.recovery import RecoveryReport, recover
from txmq.broker.store.retention import delete_expired
from txmq.broker.store.tag_filter import TagFilter
from txmq.broker.store.validation import check_columns, check_encoded_columns

log = logging.getLogger(__name__)


_new_append_result = partial(tuple.__new__, AppendResult)  # from a row tuple, in C
_new_dispatch_entry = partial(tuple.__new__, DispatchEntry)  # from a row tuple, without a Python __new__


def _append_results(topics: Sequence[str], qids: Sequence[int], queue_offsets: Sequence[int],
                    phys: Sequence[int], sizes: Sequence[int], now: int, store_host_raw: bytes) -> list[AppendResult]:
    """A batch's AppendResults from its columns (run when AppendResults are first read)."""
    ids = message_ids(store_host_raw, phys[:len(topics)])
    return list(map(_new_append_result, zip(topics, qids, queue_offsets, phys, sizes, ids, repeat(now))))


T = TypeVar("T")


def _built_one_ahead(builds: Sequence[Callable[[], T]]) -> Iterator[T]:
    """The results of `builds` in order, the next one built on a worker thread while the caller
    uses the current one: a split group's part i + 1 is read and laid out while part i is
    encoded and written (the write is a pwrite, and the build mostly numpy and Arrow: both
    run without the GIL, so the two overlap on two cores). At most one build runs ahead, so
    memory stays bounded by two parts; closed early, it waits for that one build."""
    if len(builds) == 1:
        yield builds[0]()
        return
    with ThreadPoolExecutor(1, thread_name_prefix="txmq-split-build") as pool:
        pending = pool.submit(builds[0])
        for build in builds[1:]:
            current = pending.result()
            pending = pool.submit(build)
            yield current
        yield pending.result()


def _split_group_results(written: list[tuple], now: int, store_host_raw: bytes) -> list[AppendResult]:
    """_append_results of a split group's parts (their columns joined only when read: a COMMIT's
    caller rarely reads them)."""
    columns = [[*chain.from_iterable(column)] for column in zip(*written)]
    return _append_results(*columns, now, store_host_raw)


def _stored_sys_flags(flags: Sequence[int], group: bool) -> Sequence[int]:
    """SYSFLAG as stored: the caller's group bits cleared; in a group every record but
    the last is a GROUP_MEMBER and the last is the GROUP_END."""
    if not group and not any(flags):  # plain messages: nothing to clear or set
        return flags
    if group and flags.count(flags[0]) == len(flags):  # one flag for all (a prepare call's halves)
        one = flags[0] & ~SYSFLAG_GROUP_BITS
        out = [one | SYSFLAG_GROUP_MEMBER] * len(flags)
        out[-1] = one | SYSFLAG_GROUP_END
        return out
    if reduce(or_, flags, 0) & SYSFLAG_GROUP_BITS:
        flags = [f & ~SYSFLAG_GROUP_BITS for f in flags]
    if not group:
        return flags
    out = [f | SYSFLAG_GROUP_MEMBER for f in flags]
    out[-1] = flags[-1] | SYSFLAG_GROUP_END
    return out


_ARRAY_KEYS_FROM = 256  # from this many records of one topic, queue offsets are assigned with arrays
_NUMPY_FLAGS_FROM = 256  # parts of split groups are thousands of records: one array operation


def _split_sys_flags(flags: Sequence[int], *, begins: bool, ends: bool) -> list[int]:
    """SYSFLAG as stored for a part of a split group: SPLIT_GROUP on every record, GROUP_BEGIN
    on the group's first, GROUP_END on its last (see message.SYSFLAG_SPLIT_GROUP)."""
    if flags.count(flags[0]) == len(flags):  # one flag for all (a COMMIT's finals): no per-record work
        out = [flags[0] & ~SYSFLAG_GROUP_BITS | SYSFLAG_SPLIT_GROUP] * len(flags)
    elif len(flags) >= _NUMPY_FLAGS_FROM:
        out = (np.asarray(flags, dtype=np.int64) & ~SYSFLAG_GROUP_BITS | SYSFLAG_SPLIT_GROUP).tolist()
    else:
        out = [f & ~SYSFLAG_GROUP_BITS | SYSFLAG_SPLIT_GROUP for f in flags]
    if begins:
        out[0] |= SYSFLAG_GROUP_BEGIN
    if ends:
        out[-1] |= SYSFLAG_GROUP_END
    return out
READ_SPAN_MAX = 4 << 20  # one pread covers neighbouring records up to this span
READ_GAP_MAX = 64 << 10  # ... skipping at most this many bytes of other queues' records
FILTER_SCAN_MAX = 20_000  # queue entries examined per filtered read
HOUSEKEEPING_S = 10.0
# A group of record copies over this many source bytes is built and written in parts of
# at most this size (see _append_split_group).
COPY_PART_BYTES = 8 << 20
SPLIT_YIELD_MAX_S = 0.005  # between two parts, how long a split group waits for writers queued at the lock


GEOMETRY_FILE = "store_meta.json"
GEOMETRY_FIELDS = ("commitlog_segment_bytes", "consume_queue_entries_per_file")


def _with_on_disk_geometry(config: StoreConfig) -> StoreConfig:
    """File geometry is fixed when a data directory is created (store_meta.json).

    Opening it later with different sizes would misread segments and queue files,
    so the recorded sizes win over the configured ones (with a warning).
    """
    path = config.data_dir / GEOMETRY_FILE
    recorded = read_json(path, None)
    if recorded is None:
        write_json_atomically(path, {f: getattr(config, f) for f in GEOMETRY_FIELDS})
        return config
    changed = {f: int(recorded[f]) for f in GEOMETRY_FIELDS if f in recorded and int(recorded[f]) != getattr(config, f)}
    if changed:
        log.warning("store %s was created with %s; using those instead of the configured values",
                    config.data_dir, changed)
        config = dataclasses.replace(config, **changed)
    return config


def _queued_mask(sys_flags: Sequence[int], topics: Sequence[str]) -> list[bool] | None:
    """Which records get a queue entry (transactional records: decided per (flag, topic));
    None when all do, the common case."""
    if not any(sys_flags):
        return None
    flags = set(sys_flags)  # a few distinct flags: no per-record tuple unless some record may be unqueued
    if not reduce(or_, flags, 0) & NOT_QUEUED_BIT:
        return None
    if topics.count(topics[0]) == len(topics):
        by_flag = {f: goes_to_queue(f, topics[0]) for f in flags}
        return None if all(by_flag.values()) else list(map(by_flag.__getitem__, sys_flags))
    decided = {ft: goes_to_queue(*ft) for ft in set(zip(sys_flags, topics))}
    if all(decided.values()):
        return None
    return list(map(decided.__getitem__, zip(sys_flags, topics)))


class _QueueOffsets:
    """The queue offsets a write assigns: consecutive per queue, from where each queue's
    written entries end. Kept across the parts of a split group (its queues are
    reserved to it from the part that first writes them: their ends do not move).

    A queue is named by a key: (topic, queue id), or the queue id alone when every
    record of the write has the one topic `topic`.
    """

    __slots__ = ("_dispatcher", "_topic", "_next")  # _next: queue key -> the next offset to assign

    def __init__(self, dispatcher: Dispatcher, topic: str | None) -> None:
        self._dispatcher = dispatcher
        self._topic = topic
        self._next: dict = {}

    def assign(self, keys: Sequence, queued: Sequence[bool] | None) -> tuple[dict, list[int]]:
        """({key: first offset assigned here}, the offset of each record, 0 for one not queued)."""
        following = self._next
        wanted = set(keys) if queued is None else set(compress(keys, queued))
        self._note_new(wanted)
        starts = {key: following[key] for key in wanted}
        counters = {key: count(first) for key, first in starts.items()}
        if queued is None:
            offsets = list(map(next, map(counters.__getitem__, keys)))
        else:
            offsets = [next(counters[k]) if q else 0 for k, q in zip(keys, queued)]
        for key, counter in counters.items():
            following[key] = next(counter)
        return starts, offsets

    def assign_array(self, topic: str, qids: np.ndarray) -> tuple[np.ndarray, QueueGroups]:
        """assign() for records all of `topic` (the offsets' own, if it has one), given their queue
        ids as an array, with no queued mask: (each record's offset, the records grouped by
        queue). Array operations only: a large COMMIT part does no dictionary work per record."""
        distinct, inverse = np.unique(qids, return_inverse=True)
        keys = distinct.tolist() if self._topic is not None else [(topic, q) for q in distinct.tolist()]
        following = self._next
        self._note_new(keys)
        firsts = [following[key] for key in keys]
        counts = np.bincount(inverse, minlength=len(keys))
        order = np.argsort(inverse, kind="stable")
        group_of = inverse[order]
        begins = np.cumsum(counts) - counts  # where each queue's records start in `order`
        offsets = np.empty(len(qids), dtype=np.int64)
        offsets[order] = np.asarray(firsts, dtype=np.int64)[group_of] + np.arange(len(qids)) - begins[group_of]
        counts_list = counts.tolist()
        for key, first, n in zip(keys, firsts, counts_list):
            following[key] = first + n
        return offsets, QueueGroups(keys, firsts, counts_list, order)

    def _note_new(self, keys) -> None:
        """Start each queue this write meets for the first time where its written entries end
        (read now: other writers may have added queues between two parts)."""
        following = self._next
        queues = self._dispatcher._queues
        for key in set(keys).difference(following):
            cq = queues.get(key if self._topic is None else (self._topic, key))
            following[key] = cq.written_offset if cq is not None else 0

    def named(self, runs: dict) -> dict:
        """queue_runs' result keyed by (topic, queue id)."""
        if self._topic is None:
            return runs
        return {(self._topic, qid): run for qid, run in runs.items()}


_QUEUE_RESERVED: Any = object()  # _under_write_lock: the batch waits for a split group, nothing written


class _SplitGroup:
    """What a split group being written has accumulated across its parts."""

    __slots__ = ("offsets", "runs", "hashes", "positions", "written", "published", "start", "end", "interleaved",
                 "writes_seen")

    def __init__(self, offsets: _QueueOffsets) -> None:
        self.offsets = offsets
        self.runs: dict = {}  # queue key -> [first queue offset, packed entries...]
        self.hashes: list[int] = []
        self.positions: list[int] = []
        self.written: list[tuple] = []  # (topics, queue ids, stored sysflags, _Written) of each part
        self.published = False
        self.start = self.end = 0  # the log's end before its first part, after its latest part
        self.interleaved = False  # another writer wrote to the log since its first part
        self.writes_seen = 0  # the CommitLog's write count after its latest part

    def note_others(self, commitlog) -> None:
        """Mark the group interleaved if the CommitLog was written since its latest part."""
        if self.written and commitlog.writes != self.writes_seen:
            self.interleaved = True


class _Written(NamedTuple):
    """A batch just written to the CommitLog, and the queue and index entries it needs."""

    queued: list[bool] | None  # which records get a queue entry (None: all)
    queue_offsets: list[int]
    phys: list[int]  # physical offsets, and one more item: the end of the batch
    sizes: list[int]
    tag_hashes: list[int]
    runs: dict  # queue_runs: queue key -> [first queue offset, packed entries]
    hashes: list[int]  # index_hashes
    positions: list[int]


class _DispatchHashes(NamedTuple):
    """A batch's dispatch inputs that do not depend on where it lands: a split group's part
    derives them while it is built, off the thread that writes it."""

    tags: list[int]  # tag_hashes_of
    index: list[int]  # index_hashes
    index_rows: list[int] | None


def _dispatch_hashes(batch: BatchColumns) -> _DispatchHashes:
    tags, uniq_keys, record_keys = batch.dispatch_columns()
    return _DispatchHashes(tag_hashes_of(tags), *index_hashes(uniq_keys, record_keys, batch.topics))


def _built_with_hashes(build: Callable[[], BatchColumns]) -> tuple[BatchColumns, _DispatchHashes]:
    batch = build()
    return batch, _dispatch_hashes(batch)


def _dispatch_entries(topics, qids, queue_offsets, phys, sizes, tag_hashes, now, sys_flags,
                      queued) -> LazyList[DispatchEntry]:
    """What dispatch listeners get for the queued records of a write (made when first read: the
    broker's listeners only ask whether anything was dispatched)."""
    def build() -> list[DispatchEntry]:
        rows = zip(topics, qids, queue_offsets, phys, sizes, tag_hashes, repeat(now), sys_flags)
        return list(map(_new_dispatch_entry, rows if queued is None else compress(rows, queued)))

    return LazyList(len(topics) if queued is None else queued.count(True), build)


@dataclass
class QueueRead:
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int


class MessageStore:
    """CommitLog + ConsumeQueues + index + metadata behind one API (see docs/ARCHITECTURE.md)."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        root = config.data_dir
        root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise StoreError(f"store directory {root} is in use by another process") from None
        config = self.config = _with_on_disk_geometry(config)
        self._closed = False
        self._write_lock = threading.Lock()
        self._lock_waiters = 0  # writers waiting for the write lock (a split group lets them in between parts)
        self._waiters_lock = threading.Lock()  # += is not atomic across threads: a drifted count would stall groups
        # Split groups (a large COMMIT written in parts, see _append_split_group): one at a
        # time, and the queues it has written so far are reserved to it until it ends.
        self._split_lock = threading.Lock()
        self._reserved: set[tuple[str, int]] = set()
        self._unreserved = threading.Condition(self._write_lock)
        self.commitlog = CommitLog(root / "commitlog", config.commitlog_segment_bytes, config.store_host)
        self.page_cache = PageCacheWindow(config.page_cache_keep_bytes, lambda: self.commitlog.segments,
                                          unmap=forget_mapped)
        self.index = IndexService(root / "index", config.index_slots, config.index_entries_per_file)
        self.dispatcher = Dispatcher(root / "consumequeue", config.consume_queue_entries_per_file, self.index)
        self.checkpoint = StoreCheckpoint(root / "checkpoint")
        self.abort_marker = AbortMarker(root / "abort")
        crashed = self.abort_marker.crashed()
        cp = self.checkpoint.current
        rebuild_from = cp.dispatch_flushed
        if not self.dispatcher.queues() and self.commitlog.segments:
            rebuild_from = 0  # queue files lost or removed: derived data, rebuilt from the whole log
        self.recovery: RecoveryReport = recover(self.commitlog, self.dispatcher, rebuild_from, crashed=crashed)
        self.commitlog.flushed_end = min(cp.commitlog_flushed, self.commitlog.write_end)
        for cq in self.dispatcher.queues():  # min offsets after retention (a binary search each)
            cq.delete_below_physical(self.commitlog.min_offset)
        self._write_checkpoint()
        self.abort_marker.create()
        self.topics = TopicRegistry(root / "topics.json", on_delete=self._drop_topic)
        self.offsets = ConsumerOffsets(root / "offsets.json")
        self._group_commit = GroupCommit(self.commitlog.flush) if config.flush_mode == "sync" else None
        self._next_housekeeping = time.monotonic() + HOUSEKEEPING_S
        self._flusher = FlushService(
            flush_commitlog=self.commitlog.flush if config.flush_mode == "async" else None,
            checkpoint=self._periodic, flush_interval_ms=config.flush_interval_ms,
            checkpoint_interval_ms=config.checkpoint_interval_ms)
        self._flusher.start()

    # --- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, write the checkpoint, remove the abort marker (a clean stop)."""
        if self._closed:
            return
        self._flusher.stop()
        with self._write_lock:
            self._closed = True
            self._write_checkpoint()
            self.dispatcher.close()
            self.index.close()
            self.commitlog.close()
            self.checkpoint.close()
            self.abort_marker.remove()
        os.close(self._lock_fd)

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write_checkpoint(self) -> None:
        through = self.dispatcher.flush()
        flushed = self.commitlog.flush()
        self.checkpoint.write(flushed, through)
        if self._group_commit_ready():
            self._group_commit.note_durable(flushed)

    def _group_commit_ready(self) -> bool:
        return getattr(self, "_group_commit", None) is not None

    def _periodic(self) -> None:
        if self._closed:
            return
        self._write_checkpoint()
        self.page_cache.release(self.commitlog.flushed_end)
        if time.monotonic() >= self._next_housekeeping:
            self._next_housekeeping = time.monotonic() + HOUSEKEEPING_S
            self.delete_expired()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the message store is closed")

    # --- writes --------------------------------------------------------------------

    def append(self, messages: Sequence[Message], *, allow_system: bool = False,
               wait_reserved: bool = True) -> Sequence[AppendResult]:
        """Append a batch (one write); in sync mode return after fsync.

        A batch writing to a queue that a large COMMIT being written has reserved waits for
        that COMMIT's end; with `wait_reserved` False it raises QueueReserved instead, writing
        nothing (for callers that must not hold a thread that long: see queue_reserved)."""
        return self._append(messages, allow_system=allow_system, group=False, wait_reserved=wait_reserved)

    def queue_reserved(self, topic: str, queue_id: int) -> bool:
        """Whether a large COMMIT being written holds the queue now (writers of it wait for its
        end). A hint, read without the write lock: a write checks again under it."""
        return (topic, queue_id) in self._reserved

    def append_columns(self, batch: BatchColumns) -> Sequence[AppendResult]:
        """append() for a batch given as columns (BatchColumns.of_bodies): validated the same way."""
        if not batch.count:
            return []
        return self._write(self._checked_columns(batch, allow_system=False), group=False)

    def append_group_encoded(self, batch: BatchColumns) -> Sequence[AppendResult]:
        """append_group for a batch its caller encoded itself (BatchColumns.of_columns: the
        transaction engine's halves of topic-and-body messages, encoded from one property
        template). The caller vouches for the property names and values; the store checks what
        it must never write: bodies that are not bytes, empty or too large, properties over the
        size limit, queue ids out of range. System topics allowed."""
        if not batch.count:
            return []
        cfg = self.config
        check_encoded_columns(batch, max_body_bytes=cfg.max_body_bytes, max_properties_bytes=cfg.max_properties_bytes)
        return self._write(batch, group=True)

    def append_group(self, messages: Sequence[Message], *, allow_system: bool = False) -> Sequence[AppendResult]:
        """Append an atomic group: after a crash all of its records survive or none do,
        and its queue entries become visible together."""
        return self._append(messages, allow_system=allow_system, group=True)

    def append_group_copies(self, copies: RecordCopies, messages: Sequence[Message] = (), *,
                            wait_reserved: bool = True, sources_dead: bool = False) -> Sequence[AppendResult]:
        """Append, as one atomic group, copies of stored records followed by `messages`.

        Each copy keeps its source's body, flag, born time and host, reconsume times
        and properties (less `copies.drop_properties`), takes the copy's topic, queue
        and transaction type, and points at its source (PREPAREDTRANSACTIONOFFSET):
        what RocketMQ's EndTransaction COMMIT writes for a half. The sources are read
        and re-encoded column-wise (record_copy), not decoded into messages: they
        passed validation when this store wrote them. `messages` are checked as in
        append (system topics allowed: for the transaction engine's op record).
        Raises StoreError/DataDeleted, writing nothing, when a source is not a record.
        Copies of more than COPY_PART_BYTES of sources are built and written in parts
        (still one group, published at once): memory stays bounded by a part.
        `wait_reserved` as in append (a group written in parts always waits its turn).
        `sources_dead`: no reader needs the sources once they are copied (a COMMIT's
        halves). A group written in parts then drops each part's sources from the page
        cache as soon as the part is written, and the parts after it are written into the
        freed pages (PageCacheWindow.release_dead).
        """
        if not len(copies) and not messages:
            return []
        if len(copies) > 1 and int(copies.sizes.sum()) > COPY_PART_BYTES:
            copy_parts = copies.parts(COPY_PART_BYTES)
            parts = [partial(copy_columns, self, part) for part in copy_parts]
            if messages:
                checked = self._checked(messages, allow_system=True)
                parts.append(lambda: checked)
            written = [partial(self._release_sources, part) for part in copy_parts] if sources_dead else []
            return self._append_split_group(parts, written)
        batches = []
        if len(copies):
            batches.append(copy_columns(self, copies))
        if messages:
            batches.append(self._checked(messages, allow_system=True))
        return self._write(batches[0] if len(batches) == 1 else batches[0].followed_by(batches[1]), group=True,
                           wait_reserved=wait_reserved)

    def _checked(self, messages: Sequence[Message], *, allow_system: bool) -> BatchColumns:
        return self._checked_columns(BatchColumns(messages), allow_system=allow_system)

    def _checked_columns(self, batch: BatchColumns, *, allow_system: bool) -> BatchColumns:
        cfg = self.config
        return check_columns(batch, max_body_bytes=cfg.max_body_bytes,
                             max_properties_bytes=cfg.max_properties_bytes, allow_system=allow_system)

    def _append(self, messages: Sequence[Message], *, allow_system: bool, group: bool,
                wait_reserved: bool = True) -> Sequence[AppendResult]:
        if not messages:
            return []
        return self._write(self._checked(messages, allow_system=allow_system), group, wait_reserved=wait_reserved)

    def _write(self, batch: BatchColumns, group: bool, *, wait_reserved: bool = True) -> AppendResults:
        """Write a checked and encoded batch under the write lock (then wait for fsync in sync mode)."""
        write = partial(self._append_locked, batch, group)
        while True:
            results = self._under_write_lock(write, batch)
            if results is not _QUEUE_RESERVED:
                return results
            if wait_reserved:
                self._await_unreserved(batch)
                continue
            held = next((q for q in zip(batch.topics, batch.queue_ids) if q in self._reserved), None)
            if held is not None:  # else the COMMIT ended meanwhile: write now
                raise QueueReserved(f"queue {held[0]}:{held[1]} is reserved by a large COMMIT being written; "
                                    "nothing was written, retry shortly")

    def _under_write_lock(self, write: Callable[[], AppendResults], batch: BatchColumns | None = None,
                          *, durable: bool = True) -> AppendResults:
        """Run `write` holding the write lock; in sync mode (and `durable`) return only once it
        is durable. Returns _QUEUE_RESERVED, writing nothing, when `batch` writes to a queue a
        split group has reserved."""
        group_commit = self._group_commit
        if group_commit is None:
            with self._locked_for_writing():
                self._check_open()
                if self._reserved and batch is not None and self._touches_reserved(batch):
                    return _QUEUE_RESERVED
                return write()
        group_commit.writer_started()  # a leader about to fsync waits for this write
        try:
            with self._locked_for_writing():
                self._check_open()
                if self._reserved and batch is not None and self._touches_reserved(batch):
                    return _QUEUE_RESERVED
                results = write()
                end = self.commitlog.write_end
        finally:
            group_commit.writer_done()
        if durable:
            group_commit.wait_durable(end)
        return results

    @contextmanager
    def _locked_for_writing(self) -> Iterator[None]:
        """The write lock, counted in `_lock_waiters` while waited for."""
        with self._waiters_lock:
            self._lock_waiters += 1
        try:
            self._write_lock.acquire()
        finally:
            with self._waiters_lock:
                self._lock_waiters -= 1
        try:
            yield
        finally:
            self._write_lock.release()

    def _let_waiting_writers_in(self) -> None:
        """Between two parts of a split group: wait (a little) until the writers waiting for the
        write lock got it. Python's lock is not fair: released and taken again at once, it
        would go back to the split group's own thread nearly every time, and a producer would
        wait for many parts instead of one."""
        deadline = time.monotonic() + SPLIT_YIELD_MAX_S
        while self._lock_waiters > 0 and time.monotonic() < deadline:
            time.sleep(0.0001)

    def _touches_reserved(self, batch: BatchColumns) -> bool:
        return not self._reserved.isdisjoint(zip(batch.topics, batch.queue_ids))

    def _await_unreserved(self, batch: BatchColumns) -> None:
        """Wait (not holding the write lock, nor counted as a writer by group commit) until no
        queue of `batch` is reserved by a split group."""
        with self._unreserved:
            while self._reserved and self._touches_reserved(batch):
                self._unreserved.wait()

    def _append_locked(self, batch: BatchColumns, group: bool) -> AppendResults:
        """Assign queue offsets, write the records, dispatch: each step once over the whole batch."""
        now = int(time.time() * 1000)
        sys_flags = _stored_sys_flags(batch.sys_flags, group)
        topics, qids = batch.topics, batch.queue_ids
        one_topic = topics.count(topics[0]) == batch.count
        # a queue's messages take consecutive offsets; with one topic a queue is named by its id
        keys = qids if one_topic else list(zip(topics, qids))
        offsets = _QueueOffsets(self.dispatcher, topics[0] if one_topic else None)
        w = self._write_part(batch, sys_flags, keys, offsets, now, group)
        dispatcher = self.dispatcher
        dispatcher.dispatch(offsets.named(w.runs), [], [], self.commitlog.write_end, notify=False,
                            index_columns=(w.hashes, w.positions, now))
        if dispatcher.has_listeners:
            dispatcher.notify(_dispatch_entries(topics, qids, w.queue_offsets, w.phys, w.sizes, w.tag_hashes, now,
                                                sys_flags, w.queued))
        results = AppendResults(batch.count, partial(_append_results, topics, qids, w.queue_offsets, w.phys, w.sizes,
                                                     now, self.commitlog.store_host[0]))
        results.columns = (w.queue_offsets, w.phys, w.sizes)
        return results

    def _write_part(self, batch: BatchColumns, sys_flags: Sequence[int], keys: Sequence | None,
                    offsets: "_QueueOffsets",
                    now: int, group: bool, *, split: bool = False, defer: bool = False,
                    hashes: _DispatchHashes | None = None) -> "_Written":
        """Assign a batch its queue offsets, write its records, and derive (not yet write) its queue
        and index entries. `split`/`defer`: a split group's part (CommitLog.write_columns);
        `hashes`: its _dispatch_hashes, when derived already."""
        queued = _queued_mask(sys_flags, batch.topics)
        topics = batch.topics
        if queued is None and len(topics) >= _ARRAY_KEYS_FROM and topics.count(topics[0]) == len(topics):
            offsets_array, groups = offsets.assign_array(topics[0], np.asarray(batch.queue_ids, dtype=np.int64))
            queue_offsets = offsets_array.tolist()
        else:
            groups = None
            if keys is None:  # a split group's part: queues named by (topic, queue id)
                keys = list(zip(topics, batch.queue_ids))
            starts, queue_offsets = offsets.assign(keys, queued)
        phys, sizes = self._write_records(batch, sys_flags, queue_offsets, now, group, split=split, defer=defer)
        if hashes is None:
            hashes = _dispatch_hashes(batch)
        if groups is not None:
            runs = queue_runs_grouped(groups, phys, sizes, hashes.tags)
        else:
            runs = queue_runs(keys, queued, starts, phys, sizes, hashes.tags)
        positions = index_positions(hashes.index, hashes.index_rows, phys)
        return _Written(queued, queue_offsets, phys, sizes, hashes.tags, runs, hashes.index, positions)

    def _write_records(self, batch: BatchColumns, sys_flags: Sequence[int], queue_offsets: Sequence[int],
                       now: int, group: bool, *, split: bool = False, defer: bool = False
                       ) -> tuple[list[int], list[int]]:
        """Encode and write a batch's records: (physical offsets plus the end, sizes)."""
        commitlog = self.commitlog
        try:
            placed = commitlog.write_columns(batch, sys_flags, queue_offsets, now, group=group, split=split,
                                             defer=defer)
            if placed is not None:
                return placed
            # IPv6 hosts or an oversized record: the general encoder
            pairs = commitlog.write_batch(batch.messages, batch.props_raw, sys_flags, queue_offsets, now, group=group,
                                          split=split)
        except OSError as exc:  # the CommitLog already dropped the partial batch (or the part in flight)
            raise StoreError(f"CommitLog write failed: {exc}") from exc
        phys = [p for p, _ in pairs]
        phys.append(phys[-1] + pairs[-1][1])
        return phys, [s for _, s in pairs]

    def _release_sources(self, copies: RecordCopies) -> None:
        """Drop copied sources nobody reads again from the page cache (see append_group_copies)."""
        self.page_cache.release_dead(copies.source_runs(), self.commitlog.flushed_end)

    def _append_split_group(self, parts: Sequence[Callable[[], BatchColumns]],
                            written: Sequence[Callable[[], None]] = ()) -> AppendResults:
        """Append one atomic group made of several batches, each built (`parts[i]()`) and written
        in turn, then dispatched and published together: a split group.

        A COMMIT of a large transaction (a Spark micro-batch of millions of halves)
        copies gigabytes. Built as one batch, its columns and encoded records would need
        several times that in fresh memory; written as one contiguous group, it would hold
        the write lock for seconds, and every other producer of the broker would wait
        that long (a RocketMQ client's send times out after 3 s). So each part is built
        outside the write lock and written under it, and between two parts other writers
        append. They only wait for the group when they write to a queue it has already
        written (its queue offsets must stay consecutive): those queues are reserved to
        the group until it ends, like a partition behind an open Kafka transaction.

        Atomicity: every record carries SPLIT_GROUP (the first GROUP_BEGIN, the last
        GROUP_END), nothing of the group is dispatched before its last part is written,
        and recovery dispatches a split group only with its END (see recovery.py).
        Checkpoints stay at or before the group's start while it is written, so a
        recovery always scans it from its BEGIN. A part that fails to build or write
        leaves the parts before it in the log as dead records, never dispatched.

        `written[i]()`, when given, runs once part i is in the log (its write settled), on
        the CommitLog's I/O thread (CommitLog.after_writes: the writer does not wait for
        it); for a group that fails, only for parts before the failure.
        """
        with self._split_lock:  # one at a time: recovery pairs an END with the latest BEGIN
            now = int(time.time() * 1000)
            group = _SplitGroup(_QueueOffsets(self.dispatcher, None))
            built = _built_one_ahead([partial(_built_with_hashes, build) for build in parts])
            try:
                settled = 0  # parts whose `written` hook has run
                for i, (batch, hashes) in enumerate(built):
                    if i:
                        self._let_waiting_writers_in()
                    write = partial(self._write_split_part, group, batch, hashes, now, begins=i == 0,
                                    ends=i == len(parts) - 1)
                    self._under_write_lock(write, durable=False)
                    # part i may still be in flight on the I/O thread; writing it settled part i - 1
                    # (the last part is written in place: then every part has settled)
                    done = len(parts) if i == len(parts) - 1 else i
                    for hook in written[settled:done]:
                        self.commitlog.after_writes(hook)
                    settled = done
            finally:
                built.close()  # a part being built ahead finishes before the group is abandoned
                if not group.published:
                    with self._write_lock:
                        self._abandon(group)
            if self._group_commit is not None:
                self._group_commit.wait_durable(group.end)
        written = [(topics, qids, w.queue_offsets, w.phys[:-1], w.sizes) for topics, qids, _, w in group.written]
        return AppendResults(sum(len(w[0]) for w in written), partial(_split_group_results, written, now,
                                                                      self.commitlog.store_host[0]))

    def _write_split_part(self, group: "_SplitGroup", batch: BatchColumns, hashes: _DispatchHashes, now: int, *,
                          begins: bool, ends: bool) -> None:
        """Write one part of a split group (under the write lock); publish the group with its last."""
        if begins:
            group.start = self.dispatcher.hold = self.commitlog.write_end
        group.note_others(self.commitlog)
        sys_flags = _split_sys_flags(batch.sys_flags, begins=begins, ends=ends)
        topics, qids = batch.topics, batch.queue_ids
        # every part but the last may be written on the CommitLog's I/O thread while the next one
        # is encoded; the last (the op record) is written after it, and only then published
        w = self._write_part(batch, sys_flags, None, group.offsets, now, False, split=True,
                             defer=not ends, hashes=hashes)
        self._reserved.update(w.runs)  # the queues it wrote (no other writer got in meanwhile: we hold the lock)
        for key, (first, *packed) in w.runs.items():
            group.runs.setdefault(key, [first]).extend(packed)
        group.hashes += w.hashes
        group.positions += w.positions
        group.written.append((topics, qids, sys_flags, w))
        group.end = self.commitlog.write_end
        group.writes_seen = self.commitlog.writes
        if not ends:
            return
        self._end_reservation()
        dispatcher = self.dispatcher
        dispatcher.dispatch(group.runs, [], [], group.end, notify=False,
                            index_columns=(group.hashes, group.positions, now), defer_index=True)
        group.published = True
        if dispatcher.has_listeners:
            parts = [_dispatch_entries(topics, qids, w.queue_offsets, w.phys, w.sizes, w.tag_hashes, now, sys_flags,
                                       w.queued) for topics, qids, sys_flags, w in group.written]
            dispatcher.notify(LazyList(sum(map(len, parts)), lambda: [*chain.from_iterable(parts)]))

    def _abandon(self, group: "_SplitGroup") -> None:
        """A split group failed (a bad source, a failed write): release what it holds. Its parts
        are dead records, never dispatched; when nobody else wrote since its first part they are
        truncated, so a refused COMMIT leaves the log as it was (the caller holds the write lock).
        Never when another writer's records lie between or after them: those were acknowledged."""
        self._end_reservation()
        group.note_others(self.commitlog)  # before the part in flight settles: that is the group's own
        self.commitlog.settle()  # the part in flight lands, or is cut back when its write failed
        self.commitlog.deferred_failure = None  # the group's failure, if another writer found it: moot now
        if group.written and not self._closed and not group.interleaved and self.commitlog.write_end <= group.end:
            self.commitlog.truncate_to(group.start)

    def _end_reservation(self) -> None:
        """A split group is over (published or abandoned): release its queues and the checkpoint
        hold (the caller holds the write lock)."""
        self.dispatcher.hold = None
        self._reserved.clear()
        self._unreserved.notify_all()

    # --- queue reads ------------------------------------------------------------------

    def _queue_bounds(self, topic: str, queue_id: int, offset: int):
        cq = self.dispatcher.queue(topic, queue_id)
        lo, hi = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
        if offset < lo:
            raise DataDeleted(f"offset {offset} of {topic}:{queue_id} was deleted by retention; "
                              f"the minimum offset is {lo}", min_offset=lo)
        if offset > hi:
            raise IllegalOffset(f"offset {offset} of {topic}:{queue_id} is beyond the maximum offset {hi}")
        return cq, lo, hi

    def read_queue(self, topic: str, queue_id: int, offset: int, max_count: int, *,
                   tag_filter: TagFilter | str | None = None, max_bytes: int | None = None) -> QueueRead:
        """Messages of a queue from `offset` (see QueueRead)."""
        if offset < 0:
            raise IllegalOffset(f"offset {offset} is negative")
        cq, lo, hi = self._queue_bounds(topic, queue_id, offset)
        if isinstance(tag_filter, str):
            tag_filter = TagFilter.parse(tag_filter)
        if tag_filter is not None and tag_filter.matches_all:
            tag_filter = None
        if cq is None or max_count <= 0 or offset >= hi:
            return QueueRead([], offset, lo, hi)
        scan = max_count if tag_filter is None else max(max_count, min(FILTER_SCAN_MAX, hi - offset))
        offsets: list[int] = []  # the queue offsets, physical offsets and sizes of the entries to read
        phys: list[int] = []
        sizes: list[int] = []
        q = offset
        remaining = scan
        while remaining > 0 and q < hi:
            raw = cq.read_raw(q, remaining)
            if not raw:
                break
            n = len(raw) // ENTRY_SIZE
            if tag_filter is None:
                entries = np.frombuffer(raw, dtype=ENTRY_DTYPE, count=n)
                offsets += range(q, q + n)
                phys += entries["phys"].tolist()
                sizes += entries["size"].tolist()
            else:
                for i, (p, size, th) in enumerate(ENTRY.iter_unpack(raw[:n * ENTRY_SIZE])):
                    if tag_filter.may_match(th):
                        offsets.append(q + i)
                        phys.append(p)
                        sizes.append(size)
            q += n
            remaining -= n
        scanned_to = q
        records = self._read_records(topic, queue_id, phys, sizes)
        if tag_filter is None and max_bytes is None:  # every record read is returned
            return QueueRead(records, scanned_to, cq.min_offset, cq.max_offset)
        messages: list[StoredMessage] = []
        total = 0
        next_offset = scanned_to
        for qoff, size, msg in zip(offsets, sizes, records):
            if tag_filter is not None and not tag_filter.matches(msg.tags):
                continue
            if max_bytes is not None and messages and total + size > max_bytes:
                next_offset = qoff
                break
            messages.append(msg)
            total += size
            if len(messages) >= max_count:
                next_offset = qoff + 1
                break
        return QueueRead(messages, next_offset, cq.min_offset, cq.max_offset)

    def _read_records(self, topic: str, queue_id: int, phys: list[int], sizes: list[int]) -> list[StoredMessage]:
        """Decode the records at `phys`, reading neighbouring ones with one pread.

        A span is a run of records in one segment, in increasing order, with gaps of
        at most READ_GAP_MAX (other queues' records) and READ_SPAN_MAX bytes in all;
        spans are found with array operations and decoded with decode_records.
        """
        out: list[StoredMessage] = []
        n = len(phys)
        if not n:
            return out
        commitlog = self.commitlog
        starts = np.array(phys, dtype=np.int64)
        ends = starts + np.array(sizes, dtype=np.int64)
        gaps = starts[1:] - ends[:-1]
        breaks = (np.flatnonzero((gaps < 0) | (gaps > READ_GAP_MAX)) + 1).tolist() + [n]
        i = 0
        for region_end in breaks:  # runs of ordered, nearby records
            while i < region_end:
                lo = phys[i]
                seg = commitlog.segment_for(lo)
                if seg is None or lo < commitlog.min_offset:
                    cq = self.dispatcher.queue(topic, queue_id)
                    mn = cq.min_offset if cq is not None else 0
                    raise DataDeleted(f"{topic}:{queue_id} points at physical offset {lo}, deleted by retention; "
                                      f"the minimum offset is {mn}", min_offset=mn)
                limit = min(lo + READ_SPAN_MAX, seg.start + seg.capacity)
                j = max(i + 1, i + int(np.searchsorted(ends[i:region_end], limit, side="right")))
                hi = int(ends[j - 1])
                try:
                    buf = commitlog.read(lo, hi - lo)
                    msgs = decode_records(buf, [p - lo for p in phys[i:j]])
                    if [m.physical_offset for m in msgs] != phys[i:j]:
                        raise RecordCorrupted("queue entry does not point at a record start")
                except (RecordCorrupted, ValueError, IndexError, UnicodeDecodeError) as exc:
                    raise StoreError(f"queue {topic}:{queue_id} entry at physical offset {phys[i]} "
                                     f"does not match the CommitLog: {exc}") from exc
                out += msgs
                i = j
        return out

    def read_queue_entries(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[QueueEntry]:
        """Raw queue entries from `offset` (at most max_count)."""
        cq, _, hi = self._queue_bounds(topic, queue_id, offset)
        if cq is None:
            return []
        return cq.entries(offset, min(max_count, hi - offset))

    def read_at(self, physical_offset: int, size: int | None = None) -> StoredMessage:
        """The record at a physical offset; MessageNotFound if there is none."""
        return self.commitlog.read_record(physical_offset, size)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.dispatcher.queue(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last visible entry."""
        cq = self.dispatcher.queue(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def max_offsets_snapshot(self, topics: Iterable[str] | None = None) -> dict[tuple[str, int], int]:
        """Max offsets of all queues (of `topics`) as one consistent cut: never splits an append_group.

        Queues a registered topic declares but that have no entries yet appear with 0.
        """
        topics = None if topics is None else list(topics)
        snap = self.dispatcher.snapshot(topics)
        names = topics if topics is not None else [t.name for t in self.topics.list()]
        for name in names:
            if self.topics.exists(name):
                for qid in range(self.topics.get(name).queue_count):
                    snap.setdefault((name, qid), 0)
        return snap

    def queue_ids(self, topic: str) -> list[int]:
        """Queues of `topic` that have entries."""
        return [q for q in self.dispatcher.queue_ids(topic)
                if (cq := self.dispatcher.queue(topic, q)) is not None and cq.max_offset > 0]

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset whose store time is >= timestamp_ms (max offset if none)."""
        cq = self.dispatcher.queue(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            if e is None:
                lo = mid + 1
                continue
            try:
                ts = store_timestamp_of(self.commitlog.read(e[0], 128))
            except MessageNotFound:
                lo = mid + 1
                continue
            if ts >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # --- lookups -------------------------------------------------------------------------

    def get_by_message_id(self, msg_id: str) -> StoredMessage:
        """By offset message id or by the client's UNIQ_KEY; MessageNotFound otherwise."""
        parsed = parse_message_id(msg_id)
        if parsed is not None and parsed[0] == self.commitlog.store_host[0]:
            try:
                msg = self.read_at(parsed[1])
                if msg.msg_id == msg_id.upper():
                    return msg
            except MessageNotFound:
                pass
        for phys in self.index.lookup(uniq_index_key(msg_id), limit=16):
            try:
                msg = self.read_at(phys)
            except MessageNotFound:
                continue
            if msg.unique_key == msg_id:
                return msg
        raise MessageNotFound(f"no message with id {msg_id!r}")

    def query_by_key(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int | None = None,
                     max_count: int = 64) -> list[StoredMessage]:
        """Messages of `topic` whose KEYS contain `key`, stored within [begin_ms, end_ms]; oldest first."""
        end = (1 << 62) if end_ms is None else end_ms
        found: list[StoredMessage] = []
        for phys in self.index.lookup(topic_key(topic, key), begin_ms, end, max_count):
            try:
                msg = self.read_at(phys)
            except MessageNotFound:
                continue
            if msg.topic == topic and key in msg.keys and begin_ms <= msg.store_timestamp <= end:
                found.append(msg)
                if len(found) >= max_count:
                    break
        found.sort(key=lambda m: m.physical_offset)
        return found

    def add_dispatch_listener(self, fn: Callable[[list[DispatchEntry]], None]) -> None:
        """fn(entries) runs in the appending thread after each append's entries are visible."""
        self.dispatcher.add_listener(fn)

    # --- maintenance ------------------------------------------------------------------------

    def delete_expired(self, now_ms: int | None = None) -> int:
        """Retention: delete expired segments and their queue entries; returns segments deleted."""
        with self._write_lock:
            if self._closed:
                return 0
            return delete_expired(self.commitlog, self.dispatcher, self.index,
                                  retention_hours=self.config.retention_hours,
                                  disk_max_used_ratio=self.config.disk_max_used_ratio, now_ms=now_ms)

    def _drop_topic(self, topic: str) -> None:
        with self._write_lock:
            self.dispatcher.drop_topic(topic)
        self.offsets.drop_topic(topic)

    def stats(self) -> dict:
        cl = self.commitlog
        return {
            "flush_mode": self.config.flush_mode,
            "commitlog_min_offset": cl.min_offset,
            "commitlog_max_offset": cl.write_end,
            "commitlog_flushed_offset": cl.flushed_end,
            "commitlog_segments": len(cl.segments),
            "commitlog_bytes": cl.disk_bytes(),
            "page_cache_released_bytes": self.page_cache.released_bytes,
            "page_cache_dead_released_bytes": self.page_cache.dead_released_bytes,
            "queues": len(self.dispatcher.queues()),
            "fsyncs": self._group_commit.fsyncs if self._group_commit is not None else 0,
            "flush_errors": self._flusher.errors,
            "recovered_after_crash": self.recovery.crashed,
            "recovery_seconds": round(self.recovery.seconds, 6),
            "recovery_scanned_records": self.recovery.records_scanned,
            "recovery_truncated_bytes": self.recovery.truncated_bytes,
        }
