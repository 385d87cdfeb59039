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
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from txmq.broker.errors import QueueReserved, QueueSealed, StoreError
from txmq.broker.store.flush import GroupCommit
from txmq.broker.store.message import PROP_TIMER_OF, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK

QUEUE_RESERVED: Any = object()  # WriteLock.run: the batch waits for a split group, nothing written
SPLIT_YIELD_MAX_S = 0.005  # between two parts, how long a split group waits for writers queued at the lock


class WriteTargets(Protocol):
    """The queues a write goes to, per record: what the lock checks against reservations and
    seals (a BatchColumns, or a COMMIT by reference's SlotTargets)."""

    topics: Sequence[str]
    queue_ids: Sequence[int]
    sys_flags: Sequence[int]
    properties: Sequence[dict | None] | None


@dataclass(frozen=True)
class SlotTargets:
    """The destinations of a COMMIT by reference's slots (its records are commit records, not
    messages of those queues, yet it publishes to them)."""

    topics: Sequence[str]
    queue_ids: Sequence[int]
    sys_flags: Sequence[int]
    properties: Sequence[dict | None] | None = None


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
        # queues a move between groups sealed (see seal): new writes to them are refused
        self._moved: frozenset[tuple[str, int]] = frozenset()
        self._sealing: frozenset[tuple[str, int]] = frozenset()
        self._held: frozenset[tuple[str, int]] = frozenset()
        self._sealed: frozenset[tuple[str, int]] = frozenset()  # the union of the three
        self._unreserved = threading.Condition(self.lock)
        self.replication: ReplicationHook | None = None  # set while this store leads a replicated group

    def write(self, write: Callable[[], Any], batch: WriteTargets, *, wait_reserved: bool = True,
              durable: bool = True) -> Any:
        """Run `write` for `batch` under the lock (acknowledged on return when `durable`, see run). A
        batch for a reserved queue waits for the split group's end, or with `wait_reserved` False
        raises QueueReserved, writing nothing."""
        while True:
            results = self.run(write, batch, durable=durable)
            if results is not QUEUE_RESERVED:
                return results
            if wait_reserved:
                self._await_unreserved(batch)
                continue
            held = next((q for q in zip(batch.topics, batch.queue_ids) if q in self._reserved), None)
            if held is not None:  # else the COMMIT ended meanwhile: write now
                raise QueueReserved(f"queue {held[0]}:{held[1]} is reserved by a large COMMIT being written; "
                                    "nothing was written, retry shortly")

    def run(self, write: Callable[[], Any], batch: WriteTargets | None = None, *, durable: bool = True,
            admit: bool = True) -> Any:
        """Run `write` holding the lock; with `durable`, return only once it may be acknowledged
        (see acknowledge; else its caller acknowledges it). Returns QUEUE_RESERVED, writing
        nothing, when `batch` writes to a reserved queue. `admit`: ask the replication hook first
        (a split group asks before its first part only)."""
        group_commit = self.group_commit
        replication = self.replication
        if replication is not None and admit:
            replication.admit()
        if group_commit is None:
            with self.held():
                if self._reserved and batch is not None and self._touches_reserved(batch):
                    return QUEUE_RESERVED
                if self._sealed and batch is not None:
                    self._check_sealed(batch)
                results = write()
                end = self._write_end()
        else:
            group_commit.writer_started()  # a leader about to fsync waits for this write
            try:
                with self.held():
                    if self._reserved and batch is not None and self._touches_reserved(batch):
                        return QUEUE_RESERVED
                    if self._sealed and batch is not None:
                        self._check_sealed(batch)
                    results = write()
                    end = self._write_end()
            finally:
                group_commit.writer_done()
        if replication is not None:
            replication.written(end)  # followers fetch while this write is fsynced
        if durable:
            self.acknowledge(end)
        return results

    def acknowledge(self, end: int) -> None:
        """Return once a write ending at `end` may be acknowledged: fsynced in sync flush mode, held
        by the in-sync followers when this store leads a replicated group. Raises the typed error of
        the one that refuses (the write stays in the log whatever this says)."""
        if self.group_commit is not None:
            self.group_commit.wait_durable(end)
        replication = self.replication
        if replication is not None:
            replication.acknowledge(end)

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

    def seal(self, moved: Iterable[tuple[str, int]], sealing: Iterable[tuple[str, int]]) -> None:
        """Set the queues moves to other groups sealed, as the route registry says: `moved` ones
        (their move is done) take no write at all, `sealing` ones (a move under way) still take
        the COMMITs of halves they held before the seal. Set under the lock: a write that passed
        the check is in the log when this returns."""
        with self.lock:
            self._moved = frozenset(moved)
            self._sealing = frozenset(sealing)
            self._sealed = self._moved | self._sealing | self._held

    def hold_seal(self, queue: tuple[str, int], held: bool = True) -> None:
        """Seal `queue` as `sealing` until released (a move's seal call, before the registry says so)."""
        with self.lock:
            self._held = self._held | {queue} if held else self._held - {queue}
            self._sealed = self._moved | self._sealing | self._held

    def is_sealed(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self._sealed

    @property
    def sealed(self) -> frozenset[tuple[str, int]]:
        return self._sealed

    def _check_sealed(self, batch: WriteTargets) -> None:
        sealed, moved = self._sealed, self._moved
        props = batch.properties
        for i, queue in enumerate(zip(batch.topics, batch.queue_ids)):
            if queue not in sealed:
                continue
            if props is not None and props[i] and PROP_TIMER_OF in props[i]:
                continue  # a timer delivery the timer could not send elsewhere (timer/service.py)
            if queue not in moved and \
                    int(batch.sys_flags[i]) & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT:
                continue  # the COMMIT of a half it held before the seal: the move waits for these
            raise QueueSealed(f"queue {queue[0]}:{queue[1]} was sealed by a move to another group; nothing was "
                              "written: refresh the routes and send again")

    def _touches_reserved(self, batch: WriteTargets) -> bool:
        return not self._reserved.isdisjoint(zip(batch.topics, batch.queue_ids))

    def _await_unreserved(self, batch: WriteTargets) -> None:
        """Wait (not holding the lock, nor counted as a writer by group commit) until no queue of
        `batch` is reserved by a split group."""
        with self._unreserved:
            while self._reserved and self._touches_reserved(batch):
                self._unreserved.wait()
