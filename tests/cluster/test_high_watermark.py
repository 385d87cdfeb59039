"""The high watermark (what readers see; RocketMQ's confirm offset) does not advance while the
in-sync set is smaller than --min-insync (KIP-966): a write admitted while followers were in sync,
left unacknowledged when they fell out of the set, is not published by the shrink itself."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.cluster.test_replication import TOPIC, read_bodies
from txmq.broker import errors
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message

# in-sync sets shrinking under leader kills: make test-faults, not the default suite
pytestmark = pytest.mark.faults


def test_a_write_left_unacknowledged_as_the_in_sync_set_shrank_below_min_insync_is_not_published(group_factory):
    group = group_factory(replicas=3, args=["--replication", "sync", "--min-insync", "1"])
    leader = group.wait_leader().endpoint
    followers = [r for r in group.replicas if r.endpoint != leader]
    with NativeClient(leader, timeout_s=30) as direct:
        direct.send([Message(TOPIC, b"acknowledged")])
        for f in followers:
            f.pause()  # both silent: they leave the in-sync set after --replica-lag-max (2 s)
        try:
            with pytest.raises((errors.ReplicationTimeout, errors.NotLeader)):
                direct.send([Message(TOPIC, b"never acknowledged")])
            assert len(group.view.in_sync().members) == 1, "the followers were not dropped from the in-sync set"
            assert read_bodies(direct, TOPIC) == Counter({b"acknowledged": 1}), \
                "a write no follower holds was published when the in-sync set shrank below --min-insync"
        finally:
            for f in followers:
                f.resume()
        # once a follower holds it again, the write (indeterminate to its sender) is published
        deadline = time.monotonic() + 30
        while read_bodies(direct, TOPIC) != Counter({b"acknowledged": 1, b"never acknowledged": 1}):
            assert time.monotonic() < deadline, read_bodies(direct, TOPIC)
            time.sleep(0.5)


def test_a_new_leader_with_no_follower_in_sync_serves_without_waiting_for_one(group_factory):
    group = group_factory(replicas=3, args=["--replication", "sync", "--replica-lag-max", "6s"])
    with NativeClient(group.endpoints, timeout_s=30) as client:
        client.send([Message(TOPIC, b"held by two")])
    old = group.wait_leader()
    absent, heir = [r for r in group.replicas if r.endpoint != old.endpoint]
    absent.kill()
    deadline = time.monotonic() + 20  # the dead follower leaves the in-sync set after --replica-lag-max
    while len(group.view.in_sync().members) > 2:
        assert time.monotonic() < deadline, "the dead follower stayed in the in-sync set"
        time.sleep(0.1)
    group.replica(old.endpoint).kill()
    killed = time.monotonic()
    with NativeClient(heir.endpoint, timeout_s=5, retry_unavailable_s=0) as direct:
        while True:
            try:
                seen = read_bodies(direct, TOPIC)
                break
            except errors.BrokerUnavailable:
                time.sleep(0.05)
    # the old leader's lease (2 s), then a take-over whose in-sync set is the heir alone: nobody
    # to wait for, so not the 6 s of --replica-lag-max
    assert time.monotonic() - killed < 5.0, f"served {time.monotonic() - killed:.1f}s after the kill"
    assert seen == Counter({b"held by two": 1})
