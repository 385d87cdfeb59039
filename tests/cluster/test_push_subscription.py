"""A push subscription to a broker group: the stream is the leader's (a follower forwards the
client to it), carries only what the group acknowledged, and follows the next leader after
a kill -9 from where the subscriber was."""

from __future__ import annotations

import time
from collections import Counter

from tests.client.helpers import Collector
from tests.cluster.test_replication import Load, read_bodies
from txmq.broker.client.native_client import NativeClient

TOPIC = "pushed"


def test_a_subscription_follows_the_next_leader_and_gets_each_acknowledged_write_once(group_factory):
    group = group_factory(args=["--replication", "sync", "--min-insync", "1"])
    with NativeClient(group.endpoints, timeout_s=20, retry_unavailable_s=60) as client:
        client.create_topic(TOPIC, 2)
        got = Collector(client.subscribe({TOPIC: {0: 0, 1: 0}}))
        try:
            with Load(client, TOPIC) as load:
                load.wait_acks(20, timeout_s=90)
                old = group.wait_leader()
                group.replica(old.endpoint).kill()
                group.wait_leader(not_epoch=old.epoch)
                load.wait_acks(20, timeout_s=90)
            deadline = time.monotonic() + 60
            while not set(load.acked) <= set(got.bodies()) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # a duplicate would have come by now
            assert got.failure is None, got.failure
            seen = Counter(got.bodies())
            assert all(seen[body] == 1 for body in load.acked), "an acknowledged write was not pushed, or twice"
            assert all(n == 1 for n in seen.values()), "a message was pushed twice"
            assert got.subscription.reconnects >= 1
            # nothing pushed that the new leader does not hold: pushes carry confirmed records only
            assert set(seen) <= set(read_bodies(client, TOPIC))
        finally:
            got.close()
