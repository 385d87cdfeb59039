"""Retention deletes old segments with the queue entries that point into them."""

from __future__ import annotations

import os
import time

import pytest

from txmq.broker.errors import DataDeleted
from tests.store._helpers import msg


def _fill(store, n: int = 30) -> None:
    store.append([msg(body=b"%04d" % i * 250) for i in range(n)])


def test_fresh_segments_are_kept(open_store) -> None:
    store = open_store()
    _fill(store)
    assert store.delete_expired() == 0
    assert store.min_offset("T", 0) == 0


def test_segments_older_than_retention_are_deleted_except_the_active_one(open_store, tmp_path) -> None:
    store = open_store(retention_hours=1)
    _fill(store, 60)
    segs = store.commitlog.segments
    old = time.time() - 2 * 3600
    for seg in segs[:2]:
        os.utime(seg.path, (old, old))
    assert store.delete_expired() == 2
    assert store.commitlog.min_offset == segs[2].start
    assert not segs[0].path.exists() and segs[2].path.exists()
    low = store.min_offset("T", 0)
    first = store.read_queue("T", 0, low, 1).messages[0]
    assert first.physical_offset >= segs[2].start
    assert store.read_queue_entries("T", 0, low - 1 + 1, 1)[0].physical_offset >= segs[2].start
    with pytest.raises(DataDeleted) as info:
        store.read_queue("T", 0, low - 1, 1)
    assert info.value.min_offset == low


def test_everything_but_the_active_segment_goes_when_all_expire(open_store) -> None:
    store = open_store()
    _fill(store, 60)
    n = len(store.commitlog.segments)
    assert store.delete_expired(now_ms=int(time.time() * 1000) + 100 * 3600 * 1000) == n - 1
    assert len(store.commitlog.segments) == 1


def test_disk_use_over_the_ratio_deletes_oldest_segments(open_store) -> None:
    store = open_store(disk_max_used_ratio=0.0)
    _fill(store, 60)
    n = len(store.commitlog.segments)
    assert store.delete_expired() == n - 1


def test_queue_files_below_the_log_minimum_are_deleted_and_state_survives_restart(open_store, tmp_path) -> None:
    store = open_store(consume_queue_entries_per_file=8)
    _fill(store, 80)
    store.dispatcher.flush()  # queue entries reach their files when flushed
    qdir = tmp_path / "store" / "consumequeue" / "T" / "0"
    files_before = len(os.listdir(qdir))
    store.delete_expired(now_ms=int(time.time() * 1000) + 100 * 3600 * 1000)
    assert len(os.listdir(qdir)) < files_before
    low = store.min_offset("T", 0)
    store.close()
    store = open_store(consume_queue_entries_per_file=8)
    assert store.min_offset("T", 0) == low
    tail = store.read_queue("T", 0, low, 100).messages
    assert tail and tail[-1].body == b"%04d" % 79 * 250


def test_a_copy_queue_begun_at_a_retained_offset_keeps_its_beginning_across_a_restart(open_store) -> None:
    """A history copy of a segment whose start retention deleted begins its (empty) queue at the
    source's first retained offset (append_copy); closed and opened again, the queue still begins
    there: its first file's unwritten head is not read as entries."""
    store = open_store()
    store.append_copy([msg(body=b"%02d" % i) for i in range(7, 10)], 7)
    assert (store.min_offset("T", 0), store.max_offset("T", 0)) == (7, 10)
    store.close()
    again = open_store()
    assert (again.min_offset("T", 0), again.max_offset("T", 0)) == (7, 10)
    assert [m.body for m in again.read_queue("T", 0, 7, 10).messages] == [b"07", b"08", b"09"]
    with pytest.raises(DataDeleted):
        again.read_queue("T", 0, 0, 3)
