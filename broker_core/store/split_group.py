"""Split groups: one atomic group written in parts, with other writers' records allowed between them.

A COMMIT of a large transaction (a Spark micro-batch of millions of halves)
copies gigabytes. Built as one batch, its columns and encoded records would need
several times that in fresh memory; written as one contiguous group, it would hold
the write lock for seconds, and every other producer of the broker would wait
that long (a RocketMQ client's send times out after 3 s). So each part is built
outside the write lock and written under it, and between two parts other writers
append. They only wait for the group when they write to a queue it has already
written (its queue offsets must stay consecutive): those queues are reserved to
the group until it ends (write_lock.py), like a partition behind an open Kafka
transaction.

Atomicity: every record carries SPLIT_GROUP (the first GROUP_BEGIN, the last
GROUP_END), nothing of the group is dispatched before its last part is written,
and recovery dispatches a split group only with its END (see recovery.py).
Checkpoints stay at or before the group's start while it is written (the
dispatcher's `hold`), so a recovery always scans it from its BEGIN. A part that
fails to build or write leaves the parts before it in the log as dead records,
never dispatched.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import chain
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np

from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.commitlog import CommitLog, WritePlan
from txmq.broker.store.dispatch import Dispatcher
from txmq.broker.store.message import (
    SYSFLAG_GROUP_BEGIN,
    SYSFLAG_GROUP_BITS,
    SYSFLAG_GROUP_END,
    SYSFLAG_SPLIT_GROUP,
    AppendResult,
    AppendResults,
    LazyList,
)
from txmq.broker.store.queue_offsets import QueueOffsets
from txmq.broker.store.write_lock import WriteLock
from txmq.broker.store.write_part import (
    DispatchHashes,
    Written,
    append_results,
    built_with_hashes,
    dispatch_entries,
    write_part,
)

_NUMPY_FLAGS_FROM = 256  # parts of split groups are thousands of records: one array operation
T = TypeVar("T")


def built_one_ahead(builds: Sequence[Callable[[], T]]) -> Iterator[T]:
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


def split_sys_flags(flags: Sequence[int], *, begins: bool, ends: bool) -> list[int]:
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


def _split_group_results(written: list[tuple], now: int, store_host_raw: bytes) -> list[AppendResult]:
    """append_results of a split group's parts (their columns joined only when read: a COMMIT's
    caller rarely reads them)."""
    columns = [[*chain.from_iterable(column)] for column in zip(*written)]
    return append_results(*columns, now, store_host_raw)


class _SplitGroup:
    """What a split group being written has accumulated across its parts."""

    __slots__ = ("offsets", "runs", "hashes", "positions", "written", "published", "start", "end", "interleaved",
                 "writes_seen")

    def __init__(self, offsets: QueueOffsets) -> None:
        self.offsets = offsets
        self.runs: dict = {}  # queue key -> [first queue offset, packed entries...]
        self.hashes: list[int] = []
        self.positions: list[int] = []
        self.written: list[tuple] = []  # (topics, queue ids, stored sysflags, Written) of each part
        self.published = False
        self.start = self.end = 0  # the log's end before its first part, after its latest part
        self.interleaved = False  # another writer wrote to the log since its first part
        self.writes_seen = 0  # the CommitLog's write count after its latest part

    def note_others(self, commitlog: CommitLog) -> None:
        """Mark the group interleaved if the CommitLog was written since its latest part."""
        if self.written and commitlog.writes != self.writes_seen:
            self.interleaved = True


class SplitGroupWriter:
    """Writes a store's split groups, one at a time (recovery pairs an END with the latest BEGIN)."""

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher, write_lock: WriteLock) -> None:
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.write_lock = write_lock
        self._one_at_a_time = threading.Lock()

    def append(self, parts: Sequence[Callable[[], BatchColumns]],
               written: Sequence[Callable[[], None]] = ()) -> AppendResults:
        """Append one atomic group made of several batches, each built (`parts[i]()`) and written
        in turn, then dispatched and published together (see the module doc).

        `written[i]()`, when given, runs once part i is in the log (its write settled), on
        the CommitLog's I/O thread (CommitLog.after_writes: the writer does not wait for
        it); for a group that fails, only for parts before the failure.
        """
        with self._one_at_a_time:
            now = int(time.time() * 1000)
            group = _SplitGroup(QueueOffsets(self.dispatcher, None))
            built = built_one_ahead([partial(built_with_hashes, build) for build in parts])
            try:
                settled = 0  # parts whose `written` hook has run
                for i, (batch, hashes) in enumerate(built):
                    if i:
                        self.write_lock.let_waiting_writers_in()
                    write = partial(self.write_part, group, batch, hashes, now, begins=i == 0,
                                    ends=i == len(parts) - 1)
                    self.write_lock.run(write, durable=False, admit=i == 0)
                    # part i may still be in flight on the I/O thread; writing it settled part i - 1
                    # (the last part is written in place: then every part has settled)
                    done = len(parts) if i == len(parts) - 1 else i
                    for hook in written[settled:done]:
                        self.commitlog.after_writes(hook)
                    settled = done
            finally:
                built.close()  # a part being built ahead finishes before the group is abandoned
                if not group.published:
                    with self.write_lock.lock:
                        self._abandon(group)
            if self.write_lock.group_commit is not None:
                self.write_lock.group_commit.wait_durable(group.end)
        written_parts = [(topics, qids, w.queue_offsets, w.phys[:-1], w.sizes) for topics, qids, _, w in group.written]
        return AppendResults(sum(len(w[0]) for w in written_parts),
                             partial(_split_group_results, written_parts, now, self.commitlog.store_host[0]))

    def write_part(self, group: _SplitGroup, batch: BatchColumns, hashes: DispatchHashes, now: int, *,
                   begins: bool, ends: bool) -> None:
        """Write one part of a split group (under the write lock); publish the group with its last."""
        if begins:
            group.start = self.dispatcher.hold = self.commitlog.write_end
        assert self.dispatcher.hold == group.start, "a split group's start must hold the checkpoint"
        group.note_others(self.commitlog)
        sys_flags = split_sys_flags(batch.sys_flags, begins=begins, ends=ends)
        topics, qids = batch.topics, batch.queue_ids
        # every part but the last may be written on the CommitLog's I/O thread while the next one
        # is encoded; the last (the op record) is written after it, and only then published
        plan = WritePlan.SPLIT_PART if ends else WritePlan.SPLIT_PART_DEFERRED
        w: Written = write_part(self.commitlog, batch, sys_flags, None, group.offsets, now, plan, hashes)
        self.write_lock.reserve(w.runs)  # the queues it wrote (no other writer got in meanwhile: we hold the lock)
        for key, (first, *packed) in w.runs.items():
            group.runs.setdefault(key, [first]).extend(packed)
        group.hashes += w.hashes
        group.positions += w.positions
        group.written.append((topics, qids, sys_flags, w))
        group.end = self.commitlog.write_end
        group.writes_seen = self.commitlog.writes
        if not ends:
            return
        self._end(group)
        dispatcher = self.dispatcher
        entries: Sequence = []
        if dispatcher.has_listeners:
            parts = [dispatch_entries(topics, qids, w.queue_offsets, w.phys, w.sizes, w.tag_hashes, now, sys_flags,
                                      w.queued) for topics, qids, sys_flags, w in group.written]
            entries = LazyList(sum(map(len, parts)), lambda: [*chain.from_iterable(parts)])
        dispatcher.dispatch(group.runs, [], entries, group.end,
                            index_columns=(group.hashes, group.positions, now), defer_index=True)
        group.published = True

    def _abandon(self, group: _SplitGroup) -> None:
        """A split group failed (a bad source, a failed write): release what it holds. Its parts
        are dead records, never dispatched; when nobody else wrote since its first part they are
        truncated, so a refused COMMIT leaves the log as it was (the caller holds the write lock).
        Never when another writer's records lie between or after them: those were acknowledged."""
        self._end(group)
        group.note_others(self.commitlog)  # before the part in flight settles: that is the group's own
        self.commitlog.settle()  # the part in flight lands, or is cut back when its write failed
        self.commitlog.deferred_failure = None  # the group's failure, if another writer found it: moot now
        # (never in a replicated group: a follower may hold the parts already, and the leader's log
        # must not shrink under it within an epoch)
        if (group.written and not self.write_lock.closed and not group.interleaved
                and self.commitlog.write_end <= group.end and self.write_lock.replication is None):
            self.commitlog.truncate_to(group.start)

    def _end(self, group: _SplitGroup) -> None:
        """A split group is over (published or abandoned): release its queues and the checkpoint
        hold (the caller holds the write lock)."""
        assert self.dispatcher.hold in (None, group.start), "the checkpoint hold is another group's"
        self.dispatcher.hold = None
        self.write_lock.end_reservation()
