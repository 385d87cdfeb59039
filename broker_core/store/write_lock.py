"""The store's write lock: one writer at a time, the queues a split group reserves, group commit.

Writes are serialised by one lock (place + encode + write + dispatch); in `sync`
mode a writer then waits for a group-committed fsync outside the lock, so
concurrent writers share fsyncs. A split group (split_group.py) reserves the
queues it has written until it ends: a writer of such a queue waits (or is
refused with QueueReserved), since the group's queue offsets must stay
consecutive.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Protocol

from txmq.broker.errors import QueueReserved, StoreError
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.flush import GroupCommit

QUEUE_RESERVED: Any = object()  # WriteLock.run: the batch waits for a split group, nothing written
SPLIT_YIELD_MAX_S = 0.005  # between two parts, how long a split group waits for writers queued at the lock


class ReplicationHook(Protocol):
    """A replicated group's leader (cluster/replication.py), seen by the store's writers."""

    def admit(self) -> None:
        """Raise a typed error (NotEnoughReplicas, NotLeader) when a write may not be stored now,
        because it could not be acknowledged: a write refused for want of replicas is not stored."""

    def written(self, end: int) -> None:
        """The log now holds bytes up to `end`: followers may fetch them (called outside the lock)."""

    def acknowledge(self, end: int) -> None:
        """Return once a write ending at `end` may be acknowledged (sync replication: the in-sync
        followers hold it); raise a typed error when it may not (fenced, not confirmed in time)."""


class WriteLock:
    """The one write lock of a store, with its queue reservations and its group commit."""

    def __init__(self, group_commit: GroupCommit | None, write_end: Callable[[], int]) -> None:
        self.lock = threading.Lock()
        self.group_commit = group_commit
        self.closed = False  # set under the lock by the store's close: later writes are refused
        self.waiters = 0  # writers waiting for the lock (a split group lets them in between parts)
        self._waiters_lock = threading.Lock()  # += is not atomic across threads: a drifted count would stall groups
        self._write_end = write_end
        self._reserved: set[tuple[str, int]] = set()
        self._unreserved = threading.Condition(self.lock)
        self.replication: ReplicationHook | None = None  # set while this store leads a replicated group

    def write(self, write: Callable[[], Any], batch: BatchColumns, *, wait_reserved: bool = True) -> Any:
        """Run `write` for `batch` under the lock (durable on return in sync mode). A batch for a
        reserved queue waits for the split group's end, or with `wait_reserved` False raises
        QueueReserved, writing nothing."""
        while True:
            results = self.run(write, batch)
            if results is not QUEUE_RESERVED:
                return results
            if wait_reserved:
                self._await_unreserved(batch)
                continue
            held = next((q for q in zip(batch.topics, batch.queue_ids) if q in self._reserved), None)
            if held is not None:  # else the COMMIT ended meanwhile: write now
                raise QueueReserved(f"queue {held[0]}:{held[1]} is reserved by a large COMMIT being written; "
                                    "nothing was written, retry shortly")

    def run(self, write: Callable[[], Any], batch: BatchColumns | None = None, *, durable: bool = True,
            admit: bool = True) -> Any:
        """Run `write` holding the lock; in sync mode (and `durable`) return only once it is
        durable. Returns QUEUE_RESERVED, writing nothing, when `batch` writes to a reserved queue.
        `admit`: ask the replication hook first (a split group asks before its first part only)."""
        group_commit = self.group_commit
        replication = self.replication
        if replication is not None and admit:
            replication.admit()
        if group_commit is None:
            with self.held():
                if self._reserved and batch is not None and self._touches_reserved(batch):
                    return QUEUE_RESERVED
                results = write()
                end = self._write_end()
        else:
            group_commit.writer_started()  # a leader about to fsync waits for this write
            try:
                with self.held():
                    if self._reserved and batch is not None and self._touches_reserved(batch):
                        return QUEUE_RESERVED
                    results = write()
                    end = self._write_end()
            finally:
                group_commit.writer_done()
        if replication is not None:
            replication.written(end)  # followers fetch while this write is fsynced
        if durable:
            if group_commit is not None:
                group_commit.wait_durable(end)
            if replication is not None:
                replication.acknowledge(end)
        return results

    @contextmanager
    def held(self) -> Iterator[None]:
        """The lock for a write (counted in `waiters` while waited for); StoreError once closed."""
        with self._waiters_lock:
            self.waiters += 1
        try:
            self.lock.acquire()
        finally:
            with self._waiters_lock:
                self.waiters -= 1
        try:
            if self.closed:
                raise StoreError("the message store is closed")
            yield
        finally:
            self.lock.release()

    def let_waiting_writers_in(self) -> None:
        """Between two parts of a split group: wait (a little) until the writers waiting for the
        lock got it. Python's lock is not fair: released and taken again at once, it would go
        back to the split group's own thread nearly every time, and a producer would wait for
        many parts instead of one."""
        deadline = time.monotonic() + SPLIT_YIELD_MAX_S
        while self.waiters > 0 and time.monotonic() < deadline:
            time.sleep(0.0001)

    def is_reserved(self, topic: str, queue_id: int) -> bool:
        """A hint, read without the lock: a write checks again under it."""
        return (topic, queue_id) in self._reserved

    def reserve(self, queues: Iterable[tuple[str, int]]) -> None:
        """Reserve queues to the split group being written (the caller holds the lock)."""
        self._reserved.update(queues)

    def end_reservation(self) -> None:
        """The split group is over: release its queues (the caller holds the lock)."""
        self._reserved.clear()
        self._unreserved.notify_all()

    def _touches_reserved(self, batch: BatchColumns) -> bool:
        return not self._reserved.isdisjoint(zip(batch.topics, batch.queue_ids))

    def _await_unreserved(self, batch: BatchColumns) -> None:
        """Wait (not holding the lock, nor counted as a writer by group commit) until no queue of
        `batch` is reserved by a split group."""
        with self._unreserved:
            while self._reserved and self._touches_reserved(batch):
                self._unreserved.wait()
