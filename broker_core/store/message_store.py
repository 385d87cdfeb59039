"""MessageStore: the storage facade the transaction engine and the server use.

A facade: writes go through the write lock (write_lock.py: one writer at a
time, queue reservations, group commit), one write each (write_part.py: queue
offsets from queue_offsets.py, records, entries), or as a split group in parts
(split_group.py). Reads take no lock: queue max offsets are published
atomically by the dispatcher and the CommitLog segment table is copy-on-write.

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
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial, reduce
from operator import or_
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np

from txmq.broker import __version__, versions
from txmq.broker.errors import (CopyOutOfStep, DataDeleted, IllegalOffset, MessageNotFound, RequestTimeout, StoreError,
                                StoreFormatUnsupported)
from txmq.broker.store.checkpoint import AbortMarker, StoreCheckpoint
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.commit_ref import (SLOT_SIZE, body_head, decode_body, encode_rows, is_slot, resolve_many,
                                          slot_entries)
from txmq.broker.store.commitlog import CommitLog, WritePlan
from txmq.broker.store.columnar_read import forget_mapped
from txmq.broker.store.config import StoreConfig
from txmq.broker.store.consume_queue import ENTRY, ENTRY_DTYPE, ENTRY_SIZE, QueueEntry
from txmq.broker.store.dispatch import (Dispatcher, DispatchListener, index_hashes, index_positions, queue_runs,
                                        queue_runs_grouped)
from txmq.broker.store.flush import FlushService, GroupCommit
from txmq.broker.store.index_file import IndexService, topic_key, uniq_index_key
from txmq.broker.store.message import (
    COMMIT_REF_TOPIC,
    SYSFLAG_GROUP_BITS,
    SYSFLAG_GROUP_END,
    SYSFLAG_GROUP_MEMBER,
    AppendResult,
    AppendResults,
    Message,
    StoredMessage,
)
from txmq.broker.store.metadata import ConsumerOffsets, TopicRegistry, read_json, write_json_atomically
from txmq.broker.store.page_cache import PageCacheWindow
from txmq.broker.store.queue_offsets import QueueOffsets
from txmq.broker.store.record import (
    RecordCorrupted,
    decode_record,
    decode_records,
    parse_message_id,
    store_timestamp_of,
)
from txmq.broker.store.record_copy import RecordCopies, ReferenceSlots, copy_columns, reference_slots
from txmq.broker.store.record_layout import HEADER_V4_SIZE, HOST_V4_SIZE, HOST_V6_EXTRA
from txmq.broker.store.recovery import RecoveryReport, recover
from txmq.broker.store.retention import ReferenceLedger, RetentionFloor, delete_expired
from txmq.broker.store.split_group import SplitGroupWriter
from txmq.broker.store.filter_bits import FilterBitmaps
from txmq.broker.store.message_filter import MessageFilter
from txmq.broker.store.tag_filter import TagFilter
from txmq.broker.store.validation import check_columns, check_encoded_columns
from txmq.broker.store.write_lock import SlotTargets, WriteLock
from txmq.broker.store.write_part import append_results, dispatch_entries, write_part


log = logging.getLogger(__name__)


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


READ_SPAN_MAX = 4 << 20  # one pread covers neighbouring records up to this span
READ_GAP_MAX = 64 << 10  # ... skipping at most this many bytes of other queues' records
_FEW = 8  # unfiltered reads of at most this many queue entries skip numpy, whose set-up costs more
FILTER_SCAN_MAX = 20_000  # queue entries examined per filtered read
HOUSEKEEPING_S = 10.0
# A group of record copies over this many source bytes is built and written in parts of
# at most this size (a split group, split_group.py).
COPY_PART_BYTES = 8 << 20
# A COMMIT of this many slots of one topic takes its queue offsets and runs with array operations,
# whose set-up costs more than a dictionary update per slot below it (a RocketMQ client's one message).
ARRAY_OFFSETS_MIN = 256


GEOMETRY_FILE = "store_meta.json"
GEOMETRY_FIELDS = ("commitlog_segment_bytes", "consume_queue_entries_per_file")
FORMAT_FIELD = "store_format"  # txmq.broker.versions.STORE_FORMAT when the directory was made


def _with_on_disk_geometry(config: StoreConfig) -> tuple[StoreConfig, int]:
    """File geometry and the store format are fixed when a data directory is created (store_meta.json).

    Opening it later with different sizes would misread segments and queue files,
    so the recorded sizes win over the configured ones (with a warning). A format this
    release cannot read is refused before anything reads the files. Returns the config
    and the directory's store format.
    """
    path = config.data_dir / GEOMETRY_FILE
    recorded = read_json(path, None)
    if recorded is None:
        fresh = not any((config.data_dir / "commitlog").glob("*"))
        fmt = versions.STORE_FORMAT if fresh else versions.STORE_FORMAT_UNRECORDED
        write_json_atomically(path, {**{f: getattr(config, f) for f in GEOMETRY_FIELDS}, FORMAT_FIELD: fmt})
        return config, fmt
    fmt = int(recorded.get(FORMAT_FIELD, versions.STORE_FORMAT_UNRECORDED))
    if not versions.store_format_readable(fmt):
        raise StoreFormatUnsupported(
            f"data directory {config.data_dir} holds store format {fmt}; this txmq ({__version__}) reads store "
            f"formats {versions.STORE_FORMAT_OLDEST}-{versions.STORE_FORMAT}: start a release that reads format {fmt}")
    changed = {f: int(recorded[f]) for f in GEOMETRY_FIELDS if f in recorded and int(recorded[f]) != getattr(config, f)}
    if changed:
        log.warning("store %s was created with %s; using those instead of the configured values",
                    config.data_dir, changed)
        config = dataclasses.replace(config, **changed)
    return config, fmt


def record_store_format(data_dir: Path, fmt: int) -> None:
    """Raise the store format recorded in `data_dir` to `fmt` (before the first file of that format is
    written: a release that cannot read it then refuses the directory instead of misreading it)."""
    assert versions.store_format_readable(fmt), f"this release cannot write store format {fmt}"
    path = data_dir / GEOMETRY_FILE
    recorded = read_json(path, {})
    if int(recorded.get(FORMAT_FIELD, versions.STORE_FORMAT_UNRECORDED)) < fmt:
        write_json_atomically(path, {**recorded, FORMAT_FIELD: fmt})


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
        try:
            config, self.store_format = _with_on_disk_geometry(config)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self.config = config
        self.commitlog = CommitLog(root / "commitlog", config.commitlog_segment_bytes, config.store_host)
        self.write_lock = WriteLock(GroupCommit(self.commitlog.flush) if config.flush_mode == "sync" else None,
                                    lambda: self.commitlog.write_end)
        self.page_cache = PageCacheWindow(config.page_cache_keep_bytes, lambda: self.commitlog.segments,
                                          unmap=forget_mapped)
        self._retention_floors: list[RetentionFloor] = []  # readers retention must not outrun (retain)
        self._ledger = ReferenceLedger()  # commit records naming halves in earlier segments (retention)
        self.index = IndexService(root / "index", config.index_slots, config.index_entries_per_file)
        self.dispatcher = Dispatcher(root / "consumequeue", config.consume_queue_entries_per_file, self.index)
        self.split_groups = SplitGroupWriter(self.commitlog, self.dispatcher, self.write_lock)
        self._replay_lock = threading.Lock()  # a replica's dispatch of replicated bytes, and its cuts
        self.log_cuts: list[int] = []  # a replica's: each offset its log was cut back to, in order
        self.checkpoint = StoreCheckpoint(root / "checkpoint")
        self.abort_marker = AbortMarker(root / "abort")
        crashed = self.abort_marker.crashed()
        cp = self.checkpoint.current
        rebuild_from = cp.dispatch_flushed
        if not self.dispatcher.queues() and self.commitlog.segments:
            rebuild_from = 0  # queue files lost or removed: derived data, rebuilt from the whole log
        self.recovery: RecoveryReport = recover(self.commitlog, self.dispatcher, rebuild_from, crashed=crashed)
        if not config.replica and self.recovery.replay is not None:
            self.recovery.replay.cut_at(self.commitlog.write_end)  # an open split group here is dead
            self.recovery.replay.split = self.recovery.replay.split_begin = self.dispatcher.hold = None
        self.commitlog.flushed_end = min(cp.commitlog_flushed, self.commitlog.write_end)
        for cq in self.dispatcher.queues():  # min offsets after retention (a binary search each)
            cq.delete_below_physical(self.commitlog.min_offset)
        self._write_checkpoint()
        self.abort_marker.create()
        self.topics = TopicRegistry(root / "topics.json", on_delete=self._drop_topic)
        self.offsets = ConsumerOffsets(root / "offsets.json")
        # retention is checked at least twice per retention period (a short one, in tests)
        self._housekeeping_s = min(HOUSEKEEPING_S, config.retention_hours * 3600 / 2)
        self._next_housekeeping = time.monotonic() + self._housekeeping_s
        self._flusher = FlushService(
            flush_commitlog=self.commitlog.flush if config.flush_mode == "async" else None,
            checkpoint=self._periodic, flush_interval_ms=config.flush_interval_ms,
            checkpoint_interval_ms=config.checkpoint_interval_ms)
        self._flusher.start()
        self.filter_bits = FilterBitmaps(self, root / "filter_expressions.json")

    # --- lifecycle ---------------------------------------------------------------

    def record_store_format(self, fmt: int) -> None:
        """Record that this directory holds store format `fmt` from now on: call it before the first
        file of a newer format is written (a feature of a later format coming into use), and a
        replica before it takes such bytes from its leader (versions.py)."""
        record_store_format(self.config.data_dir, fmt)
        self.store_format = max(self.store_format, fmt)

    def close(self) -> None:
        """Flush everything, write the checkpoint, remove the abort marker (a clean stop)."""
        if self.write_lock.closed:
            return
        self._flusher.stop()
        self.filter_bits.close()
        with self.write_lock.lock:
            self.write_lock.closed = True
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
        if self.write_lock.group_commit is not None:
            self.write_lock.group_commit.note_durable(flushed)

    def _periodic(self) -> None:
        if self.write_lock.closed:
            return
        self._write_checkpoint()
        self.page_cache.release(self.commitlog.flushed_end)
        if time.monotonic() >= self._next_housekeeping:
            self._next_housekeeping = time.monotonic() + self._housekeeping_s
            self.delete_expired()

    # --- writes --------------------------------------------------------------------

    def append(self, messages: Sequence[Message], *, allow_system: bool = False,
               wait_reserved: bool = True, durable: bool = True) -> Sequence[AppendResult]:
        """Append a batch (one write); return once it may be acknowledged (in sync mode after
        fsync, in a replicated group once the in-sync followers hold it).

        A batch writing to a queue that a large COMMIT being written has reserved waits for
        that COMMIT's end; with `wait_reserved` False it raises QueueReserved instead, writing
        nothing (for callers that must not hold a thread that long: see queue_reserved).
        With `durable` False it returns once the write is in the log: the caller brings its
        own state in line with the log first, then calls acknowledge(results.end), whose error
        (ReplicationTimeout, NotLeader, ...) then leaves nothing in memory that the log lacks."""
        return self._append(messages, allow_system=allow_system, plan=WritePlan.RECORDS, wait_reserved=wait_reserved,
                            durable=durable)

    def acknowledge(self, end: int) -> None:
        """Return once a write ending at `end` (AppendResults.end) may be acknowledged; raise the
        typed error that says why not (the write stays in the log). See WriteLock.acknowledge."""
        self.write_lock.acknowledge(end)

    def queue_reserved(self, topic: str, queue_id: int) -> bool:
        """Whether a large COMMIT being written holds the queue now (writers of it wait for its
        end). A hint, read without the write lock: a write checks again under it."""
        return self.write_lock.is_reserved(topic, queue_id)

    def seal_queues(self, moved: Iterable[tuple[str, int]], sealing: Iterable[tuple[str, int]]) -> None:
        """The queues that moves to other groups sealed here (the whole sets, see WriteLock.seal)."""
        self.write_lock.seal(moved, sealing)

    def hold_seal(self, topic: str, queue_id: int, held: bool = True) -> None:
        self.write_lock.hold_seal((topic, queue_id), held)

    def queue_sealed(self, topic: str, queue_id: int) -> bool:
        return self.write_lock.is_sealed(topic, queue_id)

    def first_sealed(self, topics: Sequence[str], queue_ids: Sequence[int]) -> tuple[str, int] | None:
        """The first of these queues a move sealed (None, at once, while no queue is sealed)."""
        sealed = self.write_lock.sealed
        if not sealed:
            return None
        return next((q for q in set(zip(topics, queue_ids)) if q in sealed), None)

    def sealed_end(self, topic: str, queue_id: int, timeout_s: float) -> int:
        """The end of a queue a move sealed: what was written to it acknowledged and visible, its
        written end (nothing more is written to it). RequestTimeout when not visible in time."""
        assert self.write_lock.is_sealed(topic, queue_id), "only a sealed queue has an end for good"
        with self.write_lock.held():
            end = self.commitlog.write_end
        self.write_lock.acknowledge(end)
        if not self.wait_visible(timeout_s):
            raise RequestTimeout(f"queue {topic}:{queue_id}: its last writes were not confirmed within {timeout_s:g}s")
        written = self.dispatcher.written_snapshot().get((topic, queue_id), 0)
        visible = self.max_offset(topic, queue_id)
        assert written == visible, f"a sealed queue's written end {written} is past its visible end {visible}"
        return visible

    def sealed_queues(self) -> frozenset[tuple[str, int]]:
        return self.write_lock.sealed

    def sealed_queue_ids(self, topic: str) -> frozenset[int]:
        sealed = self.write_lock.sealed
        return frozenset(q for t, q in sealed if t == topic) if sealed else frozenset()

    def append_columns(self, batch: BatchColumns) -> Sequence[AppendResult]:
        """append() for a batch given as columns (BatchColumns.of_bodies): validated the same way."""
        if not batch.count:
            return []
        return self._write(self._checked_columns(batch, allow_system=False), WritePlan.RECORDS)

    def append_group_encoded(self, batch: BatchColumns, *, durable: bool = True) -> Sequence[AppendResult]:
        """append_group for a batch its caller encoded itself (BatchColumns.of_block: the
        transaction engine's halves of topic-and-body messages, encoded from one property
        template). The caller vouches for the property names and values; the store checks what
        it must never write: bodies that are not bytes, empty or too large, properties over the
        size limit, queue ids out of range. System topics allowed."""
        if not batch.count:
            return []
        cfg = self.config
        check_encoded_columns(batch, max_body_bytes=cfg.max_body_bytes, max_properties_bytes=cfg.max_properties_bytes)
        return self._write(batch, WritePlan.GROUP, durable=durable)

    def append_group(self, messages: Sequence[Message], *, allow_system: bool = False,
                     durable: bool = True) -> Sequence[AppendResult]:
        """Append an atomic group: after a crash all of its records survive or none do,
        and its queue entries become visible together. `durable` as in append."""
        return self._append(messages, allow_system=allow_system, plan=WritePlan.GROUP, durable=durable)

    def append_group_copies(self, copies: RecordCopies, messages: Sequence[Message] = (), *,
                            wait_reserved: bool = True, durable: bool = True) -> Sequence[AppendResult]:
        """Append, as one atomic group, copies of stored records followed by `messages`.

        Each copy keeps its source's body, flag, born time and host, reconsume times
        and properties (less `copies.drop_properties`), takes the copy's topic, queue
        and transaction type (or `copies.reroute`'s topic and queue, when its source carries the
        reroute's marker property), and points at its source (PREPAREDTRANSACTIONOFFSET):
        what RocketMQ's EndTransaction COMMIT writes for a half. The sources are read
        and re-encoded column-wise (record_copy), not decoded into messages: they
        passed validation when this store wrote them. `messages` are checked as in
        append (system topics allowed: for the transaction engine's op record).
        Raises StoreError/DataDeleted, writing nothing, when a source is not a record.
        Copies of more than COPY_PART_BYTES of sources are built and written in parts
        (still one group, published at once): memory stays bounded by a part.
        `wait_reserved` as in append (a group written in parts always waits its turn).
        `durable` as in append. (A COMMIT does not copy: append_committed.)
        """
        if not len(copies) and not messages:
            return []
        if len(copies) > 1 and int(copies.sizes.sum()) > COPY_PART_BYTES:
            copy_parts = copies.parts(COPY_PART_BYTES)
            parts = [partial(copy_columns, self, part) for part in copy_parts]
            if messages:
                checked = self._checked(messages, allow_system=True)
                parts.append(lambda: checked)
            return self.split_groups.append(parts, [], durable=durable)
        batches = []
        if len(copies):
            batches.append(copy_columns(self, copies))
        if messages:
            batches.append(self._checked(messages, allow_system=True))
        return self._write(batches[0] if len(batches) == 1 else batches[0].followed_by(batches[1]), WritePlan.GROUP,
                           wait_reserved=wait_reserved, durable=durable)

    def append_committed(self, copies: RecordCopies, messages: Sequence[Message] = (), *,
                         wait_reserved: bool = True, durable: bool = True) -> AppendResults:
        """A COMMIT by reference (store/commit_ref.py): publish `copies`' sources (a transaction's
        halves) to their destinations without copying them, as one atomic group of commit records
        (COMMIT_REF_TOPIC, one 52-byte slot per message, split to fit max_body_bytes) followed by
        `messages` (the op record). Each destination queue's entry points at its slot and holds the
        size of the record the slot stands for (`copies.drop_properties` dropped, as a copy's).
        The slots are made outside the write lock (the scan of the sources); under it they take
        their queue offsets, and the queue and index entries are derived from the written commit
        records' bytes, as replay derives them. Returns a result per slot, then per record written.
        `wait_reserved`, `durable` as in append."""
        if not len(copies):
            return self._append(list(messages), allow_system=True, plan=WritePlan.GROUP, wait_reserved=wait_reserved,
                                durable=durable) if messages else AppendResults(0, list)
        if self.store_format < versions.STORE_FORMAT_COMMIT_REF:  # a release reading only format 1 must refuse it
            self.record_store_format(versions.STORE_FORMAT_COMMIT_REF)
        refs = reference_slots(self, copies, store_v6=len(self.commitlog.store_host[0]) > HOST_V4_SIZE)
        ops = self._checked(messages, allow_system=True) if messages else None
        targets = SlotTargets(refs.dest_topics, refs.rows["queue_id"].tolist(),
                              [copies.transaction_type] * len(copies))
        return self.write_lock.write(partial(self._append_committed_locked, refs, copies, ops), targets,
                                     wait_reserved=wait_reserved, durable=durable)

    def _append_committed_locked(self, refs: ReferenceSlots, copies: RecordCopies,
                                 ops: BatchColumns | None) -> AppendResults:
        now = int(time.time() * 1000)
        qid_column = refs.rows["queue_id"].astype(np.int64)
        offsets = QueueOffsets(self.dispatcher, None)
        groups = dest_keys = None
        if len(refs.topics) == 1 and len(copies) >= ARRAY_OFFSETS_MIN:  # a Spark micro-batch's one topic
            slot_array, groups = QueueOffsets(self.dispatcher, refs.topics[0]).assign_array(refs.topics[0], qid_column)
            slot_offsets = slot_array.tolist()
        else:  # (topic, queue) per slot only here: a micro-batch's million would be made for nothing
            dest_keys = list(zip(refs.dest_topics, qid_column.tolist()))
            _, slot_offsets = offsets.assign(dest_keys, None)
        rows = refs.rows.copy()
        rows["queue_offset"] = slot_offsets
        body_at = HEADER_V4_SIZE + (HOST_V6_EXTRA if len(self.commitlog.store_host[0]) > HOST_V4_SIZE else 0)
        per_record = max(1, (self.config.max_body_bytes - len(body_head(refs.topics, copies.drop_properties)))
                         // SLOT_SIZE)
        bodies = [encode_rows(refs.topics, rows[k:k + per_record], body_at, copies.drop_properties)
                  for k in range(0, len(rows), per_record)]
        commit_records = self._checked([Message(topic=COMMIT_REF_TOPIC, body=body, sys_flag=copies.transaction_type)
                                        for body in bodies], allow_system=True)
        batch = commit_records if ops is None else commit_records.followed_by(ops)
        sys_flags = _stored_sys_flags(batch.sys_flags, True)
        w = write_part(self.commitlog, batch, sys_flags, None, offsets, now, WritePlan.GROUP)
        slots = [slot_entries(body, phys + body_at) for body, phys in zip(bodies, w.phys)]
        address = np.concatenate([e.address for e in slots]).tolist()
        sizes = np.concatenate([e.size for e in slots]).tolist()
        tags = np.concatenate([e.tag_hash for e in slots]).tolist()
        assert np.array_equal(np.concatenate([e.queue_offset for e in slots]), rows["queue_offset"]), \
            "a commit record's slots dispatch the queue offsets assigned to them"
        if groups is not None:
            runs = {(refs.topics[0], qid): run for qid, run in queue_runs_grouped(groups, address, sizes, tags).items()}
        else:
            assert dest_keys is not None
            starts: dict = {}
            for key, q in zip(dest_keys, slot_offsets):
                starts.setdefault(key, q)
            runs = queue_runs(dest_keys, None, starts, address, sizes, tags)
        runs.update(w.runs)
        hashes, index_rows = index_hashes(refs.uniq_keys, refs.keys, refs.dest_topics)
        positions = index_positions(hashes, index_rows, address)
        n = len(address)
        topics = refs.dest_topics + list(batch.topics)
        qids = qid_column.tolist() + list(batch.queue_ids)
        queue_offsets = list(slot_offsets) + list(w.queue_offsets)
        phys = address + w.phys[:-1]
        all_sizes = sizes + list(w.sizes)
        dispatcher = self.dispatcher
        if dispatcher.has_listeners:
            flags = [copies.transaction_type] * n + list(sys_flags)
            queued = None if w.queued is None else [True] * n + list(w.queued)
            tag_column = tags + list(w.tag_hashes)
            entries = dispatch_entries(topics, qids, queue_offsets, phys, all_sizes, tag_column, now, flags, queued)
        else:
            entries = []
        dispatcher.dispatch(runs, [], entries, self.commitlog.write_end,
                            index_columns=(hashes + w.hashes, positions + w.positions, now))
        results = AppendResults(len(topics), partial(append_results, topics, qids, queue_offsets, phys, all_sizes,
                                                     now, self.commitlog.store_host[0]))
        results.columns = (queue_offsets, phys, all_sizes)
        results.end = self.commitlog.write_end
        return results

    def append_copy(self, messages: Sequence[Message], expected_offset: int) -> Sequence[AppendResult]:
        """Append copies of another group's history to one queue (cluster/copier.py) only if the
        queue's written end is `expected_offset`, so they keep their offsets and a batch repeated
        after a crash is refused (CopyOutOfStep) instead of written twice; an empty queue begins
        at `expected_offset` (a segment retention cut). Returns once acknowledged."""
        if not messages:
            return []
        key = (messages[0].topic, messages[0].queue_id)
        assert all((m.topic, m.queue_id) == key for m in messages), "a copy batch writes one queue"
        batch = self._checked(messages, allow_system=False)
        # no batch for the lock's checks: the copy's queue is sealed to every other writer, and no
        # transaction (so no large COMMIT's reservation) ever writes it
        return self.write_lock.run(partial(self._append_copy_locked, batch, key, expected_offset))

    def _append_copy_locked(self, batch: BatchColumns, key: tuple[str, int], expected: int) -> AppendResults:
        cq = self.dispatcher.queue(*key)
        written = cq.written_offset if cq is not None else 0
        if written < expected and (cq is None or cq.starts_later(expected)):
            # retention deleted the start of the copied segment on its group: the copy begins at
            # its first retained offset, each record at its own offset
            self.dispatcher.queue_or_create(*key).begin_at(expected)
        elif written != expected:
            raise CopyOutOfStep(f"queue {key[0]}:{key[1]} is written to {written}, the copy expected {expected}",
                                written=written)
        return self._append_locked(batch, WritePlan.RECORDS)

    def _checked(self, messages: Sequence[Message], *, allow_system: bool) -> BatchColumns:
        return self._checked_columns(BatchColumns(messages), allow_system=allow_system)

    def _checked_columns(self, batch: BatchColumns, *, allow_system: bool) -> BatchColumns:
        cfg = self.config
        return check_columns(batch, max_body_bytes=cfg.max_body_bytes,
                             max_properties_bytes=cfg.max_properties_bytes, allow_system=allow_system)

    def _append(self, messages: Sequence[Message], *, allow_system: bool, plan: WritePlan,
                wait_reserved: bool = True, durable: bool = True) -> Sequence[AppendResult]:
        if not messages:
            return []
        return self._write(self._checked(messages, allow_system=allow_system), plan, wait_reserved=wait_reserved,
                           durable=durable)

    def _write(self, batch: BatchColumns, plan: WritePlan, *, wait_reserved: bool = True,
               durable: bool = True) -> AppendResults:
        """Write a checked and encoded batch under the write lock (then, when `durable`, wait until
        it may be acknowledged)."""
        return self.write_lock.write(partial(self._append_locked, batch, plan), batch, wait_reserved=wait_reserved,
                                     durable=durable)

    def _append_locked(self, batch: BatchColumns, plan: WritePlan) -> AppendResults:
        """Assign queue offsets, write the records, dispatch: each step once over the whole batch."""
        now = int(time.time() * 1000)
        sys_flags = _stored_sys_flags(batch.sys_flags, plan is WritePlan.GROUP)
        topics, qids = batch.topics, batch.queue_ids
        one_topic = topics.count(topics[0]) == batch.count
        # a queue's messages take consecutive offsets; with one topic a queue is named by its id
        keys = qids if one_topic else list(zip(topics, qids))
        offsets = QueueOffsets(self.dispatcher, topics[0] if one_topic else None)
        w = write_part(self.commitlog, batch, sys_flags, keys, offsets, now, plan)
        dispatcher = self.dispatcher
        entries = (dispatch_entries(topics, qids, w.queue_offsets, w.phys, w.sizes, w.tag_hashes, now, sys_flags,
                                    w.queued) if dispatcher.has_listeners else [])
        dispatcher.dispatch(offsets.named(w.runs), [], entries, self.commitlog.write_end,
                            index_columns=(w.hashes, w.positions, now))
        results = AppendResults(batch.count, partial(append_results, topics, qids, w.queue_offsets, w.phys, w.sizes,
                                                     now, self.commitlog.store_host[0]))
        results.columns = (w.queue_offsets, w.phys, w.sizes)
        results.end = self.commitlog.write_end
        return results

    # --- replication (cluster/replication.py drives these) ---------------------------------

    def read_log(self, offset: int, max_bytes: int) -> bytes:
        """A leader's raw CommitLog bytes from `offset` for a follower (see CommitLog.read_chunk)."""
        return self.commitlog.read_chunk(offset, max_bytes)

    def append_replicated(self, offset: int, data: bytes) -> int:
        """A follower appends its leader's bytes at the same offset; returns the log's new end.
        They are dispatched by dispatch_replicated, which a follower runs while its next fetch
        (the one that tells the leader it holds them) is on the wire."""
        assert self.recovery.replay is not None and self.config.replica, "only a replica takes replicated bytes"
        with self.write_lock.held():
            self.commitlog.append_raw(offset, data)
            return self.commitlog.write_end

    def dispatch_replicated(self) -> int:
        """Dispatch every group the replicated bytes complete, as recovery does; returns the end of
        the last complete group. It runs beside append_replicated (not under the write lock):
        appends only extend the log, and a scan stops before bytes not fully written."""
        replay = self.recovery.replay
        assert replay is not None and self.config.replica, "only a replica dispatches replicated bytes"
        with self._replay_lock:
            return replay.feed(compiled=True)

    def truncate_log(self, offset: int) -> int:
        """Cut a follower's log back to `offset` (where it diverged from the leader's, a group
        boundary) with the queue entries past it; returns the new end."""
        replay = self.recovery.replay
        assert replay is not None and self.config.replica, "only a replica's log is cut back"
        with self._replay_lock, self.write_lock.held():
            if offset >= self.commitlog.write_end:
                return self.commitlog.write_end
            replay.feed()  # what was fetched but not dispatched yet: its entries past the cut go below
            self.commitlog.truncate_to(offset)
            for cq in self.dispatcher.queues():
                cq.truncate_from_physical(offset)
            self._ledger.truncate_from(offset)
            self._ledger.followed = min(self._ledger.followed, self.max_offset(COMMIT_REF_TOPIC, 0))
            replay.cut_at(offset)
            self.dispatcher.dispatched_through = min(self.dispatcher.dispatched_through, offset)
            self._write_checkpoint()
            self.log_cuts.append(offset)
            return offset

    def restart_log_at(self, offset: int) -> None:
        """A follower whose log ends before its leader's starts (retention deleted what it lacks)
        drops its log and everything derived from it, and continues at `offset`, the leader's
        log start (Kafka's truncateFullyAndStartAt): queues begin at the queue offsets the records
        from there carry, as a single broker's do after retention."""
        replay = self.recovery.replay
        assert replay is not None and self.config.replica, "only a replica's log restarts"
        with self._replay_lock, self.write_lock.held():
            self.commitlog.restart_at(offset)
            self.dispatcher.drop_all(offset)
            self.index.delete_below(offset)
            replay.cut_at(offset)
            self._write_checkpoint()
            self.log_cuts.append(0)  # everything before `offset` went too

    @contextmanager
    def replica_reading(self) -> Iterator[None]:
        """Held by a replica's own reader of its log (the standby transaction table): no cut runs
        meanwhile, so what it reads is not cut from under it."""
        with self._replay_lock:
            yield

    def lead(self) -> int:
        """A replica becomes its group's leader: what it holds past its last complete group (a
        group the old leader never finished sending) is cut, an open split group is dead as
        after a single broker's crash, and writes are taken from here. Returns the log's end,
        where the new epoch starts."""
        replay = self.recovery.replay
        assert replay is not None and self.config.replica, "only a replica is promoted"
        self.dispatch_replicated()  # the last bytes fetched
        end = self.truncate_log(replay.safe_end)
        with self.write_lock.held():
            replay.split = replay.split_begin = self.dispatcher.hold = None
            self.dispatcher.dispatched_through = end
        self.recovery.replay = None  # nothing is replicated into this store any more
        return end

    def publish_confirmed(self, confirmed: int | None) -> None:
        """Readers see only records before `confirmed` (None: all), see Dispatcher.publish_confirmed."""
        self.dispatcher.publish_confirmed(confirmed)

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
                   tag_filter: TagFilter | MessageFilter | str | None = None,
                   max_bytes: int | None = None) -> QueueRead:
        """Messages of a queue from `offset` (see QueueRead); `tag_filter` is any read filter
        (store/message_filter.py): entries are skipped on their tag hash, then confirmed on the message."""
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
        if isinstance(tag_filter, MessageFilter) and tag_filter.sql is not None:
            self.filter_bits.register(topic, tag_filter)
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
            if tag_filter is None and n > _FEW:
                entries = np.frombuffer(raw, dtype=ENTRY_DTYPE, count=n)
                offsets += range(q, q + n)
                phys += entries["phys"].tolist()
                sizes += entries["size"].tolist()
            else:  # entry by entry: a filter's skips, or a tailing reader's few entries
                bits = (self.filter_bits.may_pass(topic, queue_id, q, n, tag_filter)
                        if isinstance(tag_filter, MessageFilter) else None)
                for i, (p, size, th) in enumerate(ENTRY.iter_unpack(raw[:n * ENTRY_SIZE])):
                    if tag_filter is None or (tag_filter.may_match(th) and (bits is None or bits[i])):
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
            if tag_filter is not None and not tag_filter.accepts(msg):
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
        if n == 1:  # a tailing reader's pull: one span, without the array passes
            ends: Sequence[int] = [phys[0] + sizes[0]]
            breaks = [1]
        else:
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
                j = i + 1 if region_end == i + 1 else \
                    max(i + 1, i + int(np.searchsorted(ends[i:region_end], limit, side="right")))
                hi = int(ends[j - 1])
                try:
                    buf = commitlog.read(lo, hi - lo)
                    offs = [p - lo for p in phys[i:j]]
                    if not any(map(partial(is_slot, buf), offs)):
                        msgs = decode_records(buf, offs)
                    else:  # messages committed by reference: each slot resolves to its record
                        resolved = iter(resolve_many(commitlog.read, [lo + o for o in offs if is_slot(buf, o)]))
                        msgs = [decode_record(next(resolved)) if is_slot(buf, o) else decode_record(buf, o)
                                for o in offs]
                    if [m.physical_offset for m in msgs] != phys[i:j]:
                        raise RecordCorrupted("queue entry does not point at a record start")
                except (RecordCorrupted, MessageNotFound, ValueError, IndexError, UnicodeDecodeError) as exc:
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

    def written_offsets(self) -> dict[tuple[str, int], int]:
        """Each queue's written end: at or past its max offset (visible end)."""
        return self.dispatcher.written_snapshot()

    def wait_visible(self, timeout_s: float) -> bool:
        """Wait until every record dispatched so far is visible to readers (a replicated group's
        leader publishes only what its replicas confirmed); False at the timeout."""
        end = self.dispatcher.dispatched_through
        deadline = time.monotonic() + timeout_s
        while self.dispatcher.visible_through() < end:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def cut_before(self, topic: str, queue_id: int, offset: int,
                   topics: Iterable[str]) -> dict[tuple[str, int], int] | None:
        """The consistent cut of `topics` as it was just before entry `offset` of (topic,
        queue_id) became visible (None: no longer known, e.g. from before a restart)."""
        topics = list(topics)
        snap = self.dispatcher.snapshot_before(topic, queue_id, offset, topics)
        if snap is None:
            return None
        for name in topics:
            if self.topics.exists(name):
                for qid in range(self.topics.get(name).queue_count):
                    snap.setdefault((name, qid), 0)
        return snap

    def queue_ids(self, topic: str) -> list[int]:
        """Queues of `topic` that have entries."""
        return [q for q in self.dispatcher.queue_ids(topic)
                if (cq := self.dispatcher.queue(topic, q)) is not None and cq.max_offset > 0]

    def queue_ids_by_topic(self) -> dict[str, list[int]]:
        """`queue_ids` of every topic in one pass over the queues (a listing of 1,000 topics
        would otherwise scan every queue once per topic)."""
        found: dict[str, list[int]] = {}
        for cq in self.dispatcher.queues():
            if cq.max_offset > 0:
                found.setdefault(cq.topic, []).append(cq.queue_id)
        return {t: sorted(ids) for t, ids in found.items()}

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
                head = self.commitlog.read(e[0], 128)
                # a slot's store time is its commit record's (the read follows the slot)
                ts = store_timestamp_of(head) if not is_slot(head) else self.commitlog.read_record(e[0]).store_timestamp
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

    def add_dispatch_listener(self, fn: DispatchListener) -> None:
        """fn(entries, topics) runs in the appending thread after each append's entries are visible."""
        self.dispatcher.add_listener(fn)

    # --- maintenance ------------------------------------------------------------------------

    def retain(self, floor: RetentionFloor) -> None:
        """Retention keeps every segment holding or following `floor.lowest_needed_offset()`."""
        self._retention_floors.append(floor)

    def release(self, floor: RetentionFloor) -> None:
        """Retention no longer asks `floor` (a timer that stopped: a replica that stepped down)."""
        self._retention_floors = [f for f in self._retention_floors if f is not floor]

    def _lowest_needed(self) -> int | None:
        needed = [o for o in (f.lowest_needed_offset() for f in self._retention_floors) if o is not None]
        return min(needed) if needed else None

    def delete_expired(self, now_ms: int | None = None) -> int:
        """Retention: delete expired segments and their queue entries; returns segments deleted."""
        with self.write_lock.lock:
            if self.write_lock.closed:
                return 0
            # asked under the lock: a record appended meanwhile lands in the last segment, never deleted
            self._follow_commit_records()
            return delete_expired(self.commitlog, self.dispatcher, self.index,
                                  retention_hours=self.config.retention_hours,
                                  disk_max_used_ratio=self.config.disk_max_used_ratio, now_ms=now_ms,
                                  keep_from=self._lowest_needed(), ledger=self._ledger)

    def _follow_commit_records(self) -> None:
        """Bring the reference ledger up to the COMMIT_REF_TOPIC queue (held under the write lock):
        each commit record written, replayed or replicated since the last call is read once, and
        noted when it names a half in an earlier segment. A store starts with an empty ledger, so
        its first retention pass rebuilds it from the queue."""
        cq = self.dispatcher.queue(COMMIT_REF_TOPIC, 0)
        ledger = self._ledger
        if cq is None:
            return
        at = max(ledger.followed, cq.min_offset)
        while at < cq.max_offset:
            entries = cq.entries(at, min(4096, cq.max_offset - at))
            if not entries:
                break
            for e in entries:
                record = self.commitlog.read_record(e.physical_offset, e.size)
                lowest = int(decode_body(record.body)[1]["half_phys"].min(initial=e.physical_offset))
                seg = self.commitlog.segment_for(e.physical_offset)
                if seg is not None and lowest < seg.start:
                    ledger.add(e.physical_offset, lowest)
            at += len(entries)
        ledger.followed = at

    def _drop_topic(self, topic: str) -> None:
        with self.write_lock.lock:
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
            "queues": len(self.dispatcher.queues()),
            "fsyncs": self.write_lock.group_commit.fsyncs if self.write_lock.group_commit is not None else 0,
            "flush_errors": self._flusher.errors,
            "recovered_after_crash": self.recovery.crashed,
            "recovery_seconds": round(self.recovery.seconds, 6),
            "recovery_scanned_records": self.recovery.records_scanned,
            "recovery_truncated_bytes": self.recovery.truncated_bytes,
        }
