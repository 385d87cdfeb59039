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
