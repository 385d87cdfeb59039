"""A follower's retention keeps what its leader keeps: it does not know what the leader's timer
still needs, and it may lead next (the leader's log start rides on every Fetch answer)."""

from __future__ import annotations

from types import SimpleNamespace

from txmq.broker.cluster.node import ReplicaNode
from txmq.broker.server.config import BrokerConfig


def node(tmp_path) -> ReplicaNode:
    return ReplicaNode(BrokerConfig(data_dir=tmp_path, etcd="127.0.0.1:2379", group="g"))


def test_a_follower_keeps_everything_from_its_leaders_log_start(tmp_path):
    n = node(tmp_path)
    n.follower = SimpleNamespace(leader_log_start=4096)
    assert n.lowest_needed_offset() == 4096


def test_a_replica_that_has_not_heard_from_a_leader_keeps_everything(tmp_path):
    n = node(tmp_path)
    assert n.lowest_needed_offset() == 0
    n.follower = SimpleNamespace(leader_log_start=None)
    assert n.lowest_needed_offset() == 0


def test_a_leader_leaves_retention_to_its_own_floors(tmp_path):
    n = node(tmp_path)
    n.lead = object()
    assert n.lowest_needed_offset() is None
