"""Flushing: group commit for `sync` mode and the periodic flush/checkpoint thread.

In `sync` mode an append returns only after the CommitLog bytes it wrote are
fsynced. Concurrent appenders share fsyncs (group commit): the first waiter
becomes the leader and fsyncs everything written so far (after letting the
appenders that are mid-write finish); the others wait on a condition and are
released together when the durable offset passes theirs.

The FlushService thread fsyncs the CommitLog every `flush_interval_ms` in
`async` mode, and in both modes flushes queue/index files and writes the
checkpoint every `checkpoint_interval_ms`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)
GATHER_MAX_S = 0.002  # longest a leader waits for appenders in the middle of writing


class GroupCommit:
    """Leader/follower fsync batching.

    The leader first waits (at most GATHER_MAX_S) for the appenders that are in the
    middle of writing: they would otherwise miss this fsync and, released just after
    it, start the next one with only a message or two. A lone appender never waits:
    nobody else is writing.
    """

    def __init__(self, flush: Callable[[], int]) -> None:
        self._flush = flush
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # followers wait for the durable offset
        self._writers_idle = threading.Condition(self._lock)  # the leader waits for writers in flight
        self._durable = 0
        self._leader_active = False
        self._writing = 0
        self.fsyncs = 0

    def writer_started(self) -> None:
        """An appender is about to write (it will call writer_done, then wait_durable)."""
        with self._lock:
            self._writing += 1

    def writer_done(self) -> None:
        with self._lock:
            self._writing -= 1
            if not self._writing:
                self._writers_idle.notify()

    def wait_durable(self, end_offset: int) -> None:
        with self._lock:
            while self._durable < end_offset:
                if self._leader_active:
                    self._cond.wait()
                    continue
                self._leader_active = True
                if self._writing:
                    deadline = time.monotonic() + GATHER_MAX_S
                    while self._writing and (left := deadline - time.monotonic()) > 0:
                        self._writers_idle.wait(left)
                self._lock.release()
                durable = self._durable
                try:
                    durable = self._flush()
                finally:
                    # wake the followers even if the fsync failed: one of them leads the retry
                    self._lock.acquire()
                    self._leader_active = False
                    self._durable = max(self._durable, durable)
                    self._cond.notify_all()
                self.fsyncs += 1

    def note_durable(self, offset: int) -> None:
        """The background flusher made `offset` durable."""
        with self._lock:
            if offset > self._durable:
                self._durable = offset
                self._cond.notify_all()


class FlushService:
    """Background thread: periodic CommitLog flush (async mode) and checkpoints."""

    def __init__(self, *, flush_commitlog: Callable[[], int] | None, checkpoint: Callable[[], None],
                 flush_interval_ms: int, checkpoint_interval_ms: int) -> None:
        self._flush_commitlog = flush_commitlog
        self._checkpoint = checkpoint
        self._flush_s = max(0.001, flush_interval_ms / 1000)
        self._checkpoint_s = max(0.001, checkpoint_interval_ms / 1000)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txmq-store-flush", daemon=True)
        self.errors = 0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        next_checkpoint = time.monotonic() + self._checkpoint_s
        tick = self._flush_s if self._flush_commitlog is not None else self._checkpoint_s
        while not self._stop.wait(min(tick, self._checkpoint_s)):
            try:
                if self._flush_commitlog is not None:
                    self._flush_commitlog()
                if time.monotonic() >= next_checkpoint:
                    self._checkpoint()
                    next_checkpoint = time.monotonic() + self._checkpoint_s
            except Exception:  # keep flushing; the error is visible in stats and the log
                self.errors += 1
                log.exception("store flush failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
