"""A million scheduled messages: the broker's own (anonymous) memory stays flat while they wait,
because the TimerLog and the wheel are mapped files; then every one is delivered exactly once."""

from __future__ import annotations

import time

import pytest

from tests.support.broker_process import BrokerProcess
from tests.timer.conftest import now_ms
from txmq.broker.client import Message
from txmq.broker.client.batches import to_arrow_table
from txmq.broker.client.native_client import NativeClient

pytestmark = pytest.mark.slow

TOTAL = 1_000_000
BATCH = 10_000


def rss_anon_mb(pid: int) -> float:
    """The process's anonymous resident memory (heap, not the mapped files the kernel may drop)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc status")


def test_a_million_scheduled_messages_keep_memory_flat_and_are_each_delivered_once(tmp_path):
    with BrokerProcess(tmp_path / "data", flush="async") as broker, NativeClient(broker.endpoint) as client:
        topic = "scale"
        client.create_topic(topic, 4)
        due = now_ms() + 90_000  # all wait while they are sent and indexed, then fall due over 20 s
        batch = lambda first: to_arrow_table([  # noqa: E731
            Message(topic=topic, body=b"s" * 64, deliver_at_ms=due + (first + i) * 20_000 // TOTAL)
            for i in range(BATCH)])
        rss = {}
        for first in range(0, TOTAL, BATCH):
            client.send_arrow(batch(first))
            if first + BATCH in (100_000, TOTAL):
                time.sleep(2.0)  # the timer indexes what was sent
                rss[first + BATCH] = rss_anon_mb(broker.proc.pid)
        assert rss[TOTAL] - rss[100_000] < 100, rss  # 900k more waiting messages: under 100 MB more heap
        deadline = time.monotonic() + (due - now_ms()) / 1000 + 120
        delivered = lambda: sum(q.max_offset for q in client.describe_topic(topic).queues.values())  # noqa: E731
        while delivered() < TOTAL and time.monotonic() < deadline:
            time.sleep(2.0)
        time.sleep(3.0)  # nothing more arrives: each once, none twice
        assert delivered() == TOTAL
