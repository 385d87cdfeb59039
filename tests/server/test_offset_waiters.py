"""Long polls and push subscriptions wait per topic: a write wakes the waiters of the topics it
wrote to and no other."""

from __future__ import annotations

import threading
import time

import pytest

from txmq.broker.server.offset_waiters import OffsetWaiters, TopicSignals
from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import Message
from txmq.broker.store.message_store import MessageStore


@pytest.fixture
def store(tmp_path):
    s = MessageStore(StoreConfig(data_dir=tmp_path / "data"))
    for topic in ("waited", "other"):
        s.topics.create(topic, 1)
    yield s
    s.close()


def wait_in_thread(waiters: OffsetWaiters, store: MessageStore, reads: list, timeout_s: float):
    outcome: list = []

    def read():
        reads.append(1)
        return {"waited": {0: store.max_offset("waited", 0)}}

    thread = threading.Thread(target=lambda: outcome.append(
        waiters.wait(read, ["waited"], {"waited": {0: 0}}, time.monotonic() + timeout_s)))
    thread.start()
    return thread, outcome


def test_a_write_to_another_topic_does_not_wake_a_waiter(store):
    waiters, reads = OffsetWaiters(store), []
    thread, outcome = wait_in_thread(waiters, store, reads, timeout_s=0.5)
    time.sleep(0.1)
    for _ in range(20):
        store.append([Message(topic="other", body=b"x")])
    thread.join(5)
    assert outcome == [(False, {"waited": {0: 0}})]
    assert len(reads) == 2  # the first look and the one at the deadline


def test_a_write_to_the_waited_topic_wakes_its_waiter_at_once(store):
    waiters, reads = OffsetWaiters(store), []
    thread, outcome = wait_in_thread(waiters, store, reads, timeout_s=60)
    time.sleep(0.1)
    store.append([Message(topic="waited", body=b"x")])
    thread.join(10)
    assert outcome == [(True, {"waited": {0: 1}})]


def test_a_signal_sets_the_events_of_its_topics_waiters_only():
    signals = TopicSignals()
    with signals.watching(["a", "b"]) as ab, signals.watching(["c"]) as c:
        signals.signal({"b", "z"})
        assert ab.is_set() and not c.is_set()


def test_once_closed_no_waiter_waits():
    signals = TopicSignals()
    with signals.watching(["a"]) as event:
        signals.close()
        assert event.is_set()
        event.clear()
        started = time.monotonic()
        signals.wait(event, 30)
        assert time.monotonic() - started < 5
