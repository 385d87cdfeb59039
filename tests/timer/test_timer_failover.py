"""Timer messages in a broker group: followers copy only the CommitLog, so a new leader derives the
timer from it and delivers what was still waiting, once, and nothing already delivered again."""

from __future__ import annotations

import time
from collections import Counter

from tests.cluster.test_replication import read_bodies
from tests.timer.conftest import now_ms
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message

TOPIC = "later"


def wait_bodies(client: NativeClient, count: int, timeout_s: float) -> Counter:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = read_bodies(client, TOPIC)
        if sum(seen.values()) >= count or time.monotonic() > deadline:
            return seen
        time.sleep(0.2)


def test_after_a_leader_kill_the_new_leader_delivers_the_waiting_messages_exactly_once(group_factory):
    group = group_factory(args=["--replication", "sync"])
    with NativeClient(group.endpoints, timeout_s=20) as client:
        now = now_ms()
        early = [Message(TOPIC, f"e{i}".encode(), deliver_at_ms=now + 300) for i in range(20)]
        late = [Message(TOPIC, f"l{i}".encode(), deliver_at_ms=now + 6000) for i in range(20)]
        client.send(early + late)
        assert sum(wait_bodies(client, 20, 15).values()) == 20  # the early ones, from the first leader
        old = group.wait_leader()
        group.replica(old.endpoint).kill()
        group.wait_leader(not_epoch=old.epoch)
        wait_bodies(client, 40, 30)
        time.sleep(2.0)  # anything delivered twice would show by now
        seen = read_bodies(client, TOPIC)
    assert seen == Counter({m.body: 1 for m in early + late})
