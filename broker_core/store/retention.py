"""Retention: delete old CommitLog segments and the queue/index entries that point into them.

A segment (never the one being written) is deleted when its last write is older
than `retention_hours`, or while the disk holding the store is fuller than
`disk_max_used_ratio` (oldest first). Queue files wholly below the new CommitLog
minimum are deleted and each queue's min offset advances to its first entry
that still points into the log; reading below it raises DataDeleted.
"""

from __future__ import annotations

import os
import shutil
import time

from txmq.broker.store.commitlog import CommitLog
from txmq.broker.store.dispatch import Dispatcher
from txmq.broker.store.index_file import IndexService


def disk_used_ratio(path: os.PathLike) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


def delete_expired(commitlog: CommitLog, dispatcher: Dispatcher, index: IndexService, *,
                   retention_hours: float, disk_max_used_ratio: float, now_ms: int | None = None) -> int:
    """Delete expired segments (the caller holds the store's write lock); returns how many."""
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
