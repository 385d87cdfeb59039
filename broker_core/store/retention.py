"""Retention: delete old CommitLog segments and the queue/index entries that point into them.

A segment (never the one being written) is deleted when its last write is older
than `retention_hours`, or while the disk holding the store is fuller than
`disk_max_used_ratio` (oldest first), unless a RetentionFloor still needs it:
no segment holding or following the lowest offset a floor names is deleted (the
timer's oldest undelivered scheduled message, which may wait as long as retention
keeps data). Queue files wholly below the new CommitLog
minimum are deleted and each queue's min offset advances to its first entry
that still points into the log; reading below it raises DataDeleted.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from bisect import bisect_left
from typing import Callable, Protocol

import numpy as np

from txmq.broker.store.commitlog import CommitLog
from txmq.broker.store.dispatch import Dispatcher
from txmq.broker.store.index_file import IndexService

log = logging.getLogger(__name__)


class RetentionFloor(Protocol):
    """A reader that still needs every CommitLog record from some offset on (MessageStore.retain)."""

    def lowest_needed_offset(self) -> int | None:
        """The lowest CommitLog offset still needed, None when nothing is. Called under the
        store's write lock: it must not write to the store."""
        ...


class ReferenceLedger:
    """Which commit records (COMMIT by reference, store/commit_ref.py) point at halves in an earlier
    segment: (commit record offset, lowest half offset), in log order. Only these can hold a
    segment back: a half's segment must live as long as a slot that names it."""

    def __init__(self) -> None:
        self.followed = 0  # the COMMIT_REF_TOPIC queue offset the ledger has read up to (MessageStore)
        self._commit_at: list[int] = []
        self._lowest_half: list[int] = []
        self._suffix_min: np.ndarray | None = None  # lowest half of every entry from i on, built on demand

    def add(self, commit_at: int, lowest_half: int) -> None:
        assert not self._commit_at or commit_at > self._commit_at[-1], "the ledger grows in log order"
        assert lowest_half < commit_at, "a commit record follows the halves it names"
        self._commit_at.append(commit_at)
        self._lowest_half.append(lowest_half)
        self._suffix_min = None

    def truncate_from(self, offset: int) -> None:
        """Forget the commit records at or past `offset` (the log was truncated there)."""
        keep = bisect_left(self._commit_at, offset)
        del self._commit_at[keep:], self._lowest_half[keep:]
        self._suffix_min = None

    def boundary(self, candidate: int, segment_start: Callable[[int], int]) -> int:
        """The deletion boundary (every segment below it goes) that age or disk use chose,
        `candidate`, lowered until no commit record at or past it names a half below it. Lowering
        the boundary brings more commit records past it, so repeat; it only goes down and halves
        precede their commit records, so it ends. (Holding each half's segment for its commit
        record one segment at a time deadlocks: oldest first, the half's segment waits for the
        commit record's, which waits for the half's.)"""
        if not self._commit_at:
            return candidate
        if self._suffix_min is None:
            self._suffix_min = np.minimum.accumulate(np.array(self._lowest_half[::-1], dtype=np.int64))[::-1]
        boundary = candidate
        while True:
            i = bisect_left(self._commit_at, boundary)
            if i == len(self._commit_at) or int(self._suffix_min[i]) >= boundary:
                return boundary
            boundary = segment_start(int(self._suffix_min[i]))


def _segment_start(commitlog: CommitLog) -> Callable[[int], int]:
    def start(offset: int) -> int:
        seg = commitlog.segment_for(offset)
        return offset if seg is None else seg.start
    return start


def disk_used_ratio(path: os.PathLike) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


def delete_expired(commitlog: CommitLog, dispatcher: Dispatcher, index: IndexService, *,
                   retention_hours: float, disk_max_used_ratio: float, now_ms: int | None = None,
                   keep_from: int | None = None, ledger: ReferenceLedger | None = None) -> int:
    """Delete expired segments (the caller holds the store's write lock); returns how many.
    `keep_from`: the lowest offset still needed (RetentionFloor); its segment and those after stay.
    The boundary age and disk use choose is lowered by `ledger` first (a half's segment lives as
    long as a slot naming it), then every segment below it goes, oldest first."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    max_age_ms = retention_hours * 3600 * 1000
    total = shutil.disk_usage(commitlog.directory).total or 1
    ratio = disk_used_ratio(commitlog.directory)
    candidate = None  # the start of the first segment age and disk use keep
    for seg in commitlog.segments[:-1]:
        try:
            mtime_ms = os.stat(seg.path).st_mtime * 1000
        except FileNotFoundError:
            mtime_ms = 0
        expired = now_ms - mtime_ms >= max_age_ms
        over = ratio > disk_max_used_ratio
        if not (expired or over):
            candidate = seg.start
            break
        if keep_from is not None and seg.start + seg.capacity > keep_from:
            log.debug("retention keeps segment %d and later: offset %d is still needed", seg.start, keep_from)
            candidate = seg.start
            break
        ratio -= seg.size / total
    if candidate is None:
        candidate = commitlog.segments[-1].start if commitlog.segments else 0
    boundary = candidate if ledger is None else ledger.boundary(candidate, _segment_start(commitlog))
    if boundary < candidate:
        log.debug("retention keeps segment %d and later: a commit record after it names a half in it", boundary)
    deleted = 0
    for seg in commitlog.segments[:-1]:
        if seg.start + seg.capacity > boundary:
            break
        commitlog.delete_segment(seg)
        deleted += 1
    if deleted:
        min_phys = commitlog.min_offset
        for cq in dispatcher.queues():
            cq.delete_below_physical(min_phys)
        index.delete_below(min_phys)
    commitlog.reap_deleted()
    return deleted
