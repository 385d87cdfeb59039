"""Flush modes: sync appends are durable on return and share fsyncs; async flushes on an interval."""

from __future__ import annotations

import threading
import time

from tests.store._helpers import msg


def test_sync_append_returns_after_the_commitlog_is_flushed(open_store) -> None:
    store = open_store(flush_mode="sync")
    store.append([msg()])
    assert store.commitlog.flushed_end == store.commitlog.write_end


def test_concurrent_sync_appenders_share_fsyncs(open_store) -> None:
    store = open_store(flush_mode="sync", commitlog_segment_bytes=1 << 20)
    per_thread = 40

    def appender(i: int) -> None:
        for _ in range(per_thread):
            store.append([msg(queue_id=i)])

    threads = [threading.Thread(target=appender, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [store.max_offset("T", i) for i in range(8)] == [per_thread] * 8
    assert store.stats()["fsyncs"] < 8 * per_thread
    assert store.commitlog.flushed_end == store.commitlog.write_end


def test_async_mode_flushes_within_the_interval(open_store) -> None:
    store = open_store(flush_mode="async", flush_interval_ms=20)
    store.append([msg()])
    deadline = time.monotonic() + 2
    while store.commitlog.flushed_end < store.commitlog.write_end and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.commitlog.flushed_end == store.commitlog.write_end


def test_checkpoint_advances_while_running(open_store) -> None:
    store = open_store(checkpoint_interval_ms=20)
    store.append([msg() for _ in range(5)])
    end = store.commitlog.write_end
    deadline = time.monotonic() + 2
    while store.checkpoint.current.dispatch_flushed < end and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.checkpoint.current.commitlog_flushed == end == store.checkpoint.current.dispatch_flushed
