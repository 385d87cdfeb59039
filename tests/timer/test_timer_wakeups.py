"""The timer thread sleeps while nothing can be due, and is woken for what needs it at once: a
scheduled record written, a recall, the stop. An idle broker's timer does not poll."""

from __future__ import annotations

import time

import pytest

from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import Message
from txmq.broker.store.message_store import MessageStore
from txmq.broker.timer import service
from txmq.broker.timer.schedule import scheduled
from txmq.broker.timer.service import TimerService


@pytest.fixture
def timer(tmp_path):
    store = MessageStore(StoreConfig(data_dir=tmp_path / "data"))
    store.topics.create("orders", 1)
    timer = TimerService(store, tmp_path / "data" / "timer", max_delay_s=3600)
    timer.start()
    assert timer.wait_ready(10)
    try:
        yield store, timer
    finally:
        timer.stop()
        store.close()


def delivered(store: MessageStore) -> list[bytes]:
    return [m.body for m in store.read_queue("orders", 0, 0, 100).messages]


def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_an_idle_timer_passes_about_once_a_second_instead_of_polling(timer, monkeypatch):
    _, t = timer
    passes = []
    real = t._deliver
    monkeypatch.setattr(t, "_deliver", lambda: passes.append(1) or real())
    time.sleep(2.0)
    assert len(passes) <= 6, f"{len(passes)} passes in 2 s"


def test_a_message_scheduled_on_a_sleeping_timer_is_delivered_at_its_time(timer, monkeypatch):
    store, t = timer
    monkeypatch.setattr(service, "IDLE_WAIT_S", 60.0)
    time.sleep(1.2)  # the thread is in an idle sleep, which is now a minute long
    due_ms = int(time.time() * 1000) + 300
    store.append([scheduled(Message(topic="orders", body=b"soon"), due_ms)], allow_system=True)
    wait_until(lambda: delivered(store) == [b"soon"], 10.0)
    assert time.time() * 1000 >= due_ms

