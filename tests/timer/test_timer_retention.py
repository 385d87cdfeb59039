"""Retention against the timer's horizon: a scheduled message may wait as long as retention keeps
data, so the segment of the oldest undelivered one (and every later one) is kept; older ones go."""

from __future__ import annotations

import time

import pytest

from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import TIMER_TOPIC, Message
from txmq.broker.store.message_store import MessageStore
from txmq.broker.timer.schedule import scheduled
from txmq.broker.timer.service import TimerService

HOUR_MS = 3600 * 1000
SEGMENT = 4096


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def fill_segments(store: MessageStore, segments: int, tag: bytes) -> None:
    """Plain messages enough to fill `segments` CommitLog segments."""
    for i in range(segments * 4):
        store.append([Message(topic="filler", body=tag + b"%d" % i + b"." * 900)])


def wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def waiting(tmp_path):
    """A store with old segments, then one message scheduled 2 h ahead, then more segments;
    the timer has indexed it. Yields (store, timer, clock, the scheduled record's offset)."""
    store = MessageStore(StoreConfig(data_dir=tmp_path / "data", commitlog_segment_bytes=SEGMENT, retention_hours=1))
    clock = Clock()
    timer = TimerService(store, tmp_path / "data" / "timer", max_delay_s=3 * 3600, clock=clock)
    try:
        for topic in ("filler", "orders"):
            store.topics.create(topic, 1)
        fill_segments(store, 3, b"before")
        due_ms = int(clock.now * 1000) + 2 * HOUR_MS
        [result] = store.append([scheduled(Message(topic="orders", body=b"due in 2 h"), due_ms)], allow_system=True)
        fill_segments(store, 3, b"after")
        timer.start()
        wait_until(lambda: timer.wait_ready(0) and timer.stats()["indexed"] == 1)
        yield store, timer, clock, result.physical_offset
    finally:
        timer.stop()
        store.close()


def test_retention_keeps_the_segment_of_an_undelivered_scheduled_message_and_deletes_those_before_it(waiting):
    store, timer, clock, phys = waiting
    assert timer.lowest_needed_offset() == phys
    deleted = store.delete_expired(now_ms=int(time.time() * 1000) + 2 * HOUR_MS)  # every segment past retention
    assert deleted == phys // SEGMENT  # the segments wholly before it, and no more
    assert store.commitlog.min_offset == phys // SEGMENT * SEGMENT
    assert store.read_queue(TIMER_TOPIC, 0, 0, 1).messages[0].body == b"due in 2 h"


def test_a_scheduled_message_older_than_retention_is_still_delivered_at_its_time(waiting):
    store, timer, clock, _ = waiting
    store.delete_expired(now_ms=int(time.time() * 1000) + 2 * HOUR_MS)
    clock.now += 2 * 3600 + 1
    wait_until(lambda: store.max_offset("orders", 0) == 1)
    assert store.read_queue("orders", 0, 0, 1).messages[0].body == b"due in 2 h"


def test_once_delivered_its_segment_expires_as_usual(waiting):
    store, timer, clock, _ = waiting
    clock.now += 2 * 3600 + 1
    wait_until(lambda: store.max_offset("orders", 0) == 1)
    wait_until(lambda: timer.lowest_needed_offset() is None)
    store.delete_expired(now_ms=int(time.time() * 1000) + 2 * HOUR_MS)
    assert len(store.commitlog.segments) == 1  # only the one being written is left
