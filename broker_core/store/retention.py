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
from typing import Protocol

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


def disk_used_ratio(path: os.PathLike) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


def delete_expired(commitlog: CommitLog, dispatcher: Dispatcher, index: IndexService, *,
                   retention_hours: float, disk_max_used_ratio: float, now_ms: int | None = None,
                   keep_from: int | None = None) -> int:
    """Delete expired segments (the caller holds the store's write lock); returns how many.
    `keep_from`: the lowest offset still needed (RetentionFloor); its segment and those after stay."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    max_age_ms = retention_hours * 3600 * 1000
    total = shutil.disk_usage(commitlog.directory).total or 1
    ratio = disk_used_ratio(commitlog.directory)
    deleted = 0
    for seg in commitlog.segments[:-1]:
        try:
            mtime_ms = os.stat(seg.path).st_mtime * 1000
        except FileNotFoundError:
            mtime_ms = 0
        expired = now_ms - mtime_ms >= max_age_ms
        over = ratio > disk_max_used_ratio
        if not (expired or over):
            break
        if keep_from is not None and seg.start + seg.capacity > keep_from:
            log.debug("retention keeps segment %d and later: offset %d is still needed", seg.start, keep_from)
            break
        ratio -= seg.size / total
        commitlog.delete_segment(seg)
        deleted += 1
    if deleted:
        min_phys = commitlog.min_offset
        for cq in dispatcher.queues():
            cq.delete_below_physical(min_phys)
        index.delete_below(min_phys)
    commitlog.reap_deleted()
    return deleted
