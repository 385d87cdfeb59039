"""A follower keeps its transaction table while it replicates: a take-over replays only the tail."""

from __future__ import annotations

import time

import pytest

from tests.cluster.test_replication import TOPIC
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message

# a new leader's replay after a leader kill: make test-faults, not the default suite
pytestmark = pytest.mark.faults


def took_over(group, endpoint: str, timeout_s: float = 10.0) -> dict:
    """The take-over a replica reports in its status (written to etcd every second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        member = next((m for m in group.status()["members"] if m["endpoint"] == endpoint), {})
        if "last_take_over" in member:
            return member["last_take_over"]
        assert time.monotonic() < deadline, f"{endpoint} reported no take-over: {member}"
        time.sleep(0.2)


def test_a_new_leader_replays_only_what_its_standby_table_had_not_seen(group_factory):
    group = group_factory(args=["--replication", "sync"])
    with NativeClient(group.endpoints, timeout_s=20) as client:
        for i in range(300):
            tx = client.prepare("", [Message(TOPIC, b"a%d" % i), Message(TOPIC, b"b%d" % i)]).transaction_id
            if i % 3:
                client.end_transaction(tx, "COMMIT")
        pending = client.prepare("", [Message(TOPIC, b"pending")]).transaction_id
        time.sleep(2.0)  # the followers' standby tables advance every 0.5 s
        old = group.wait_leader()
        group.replica(old.endpoint).kill()
        new = group.wait_leader(not_epoch=old.epoch)
        took = took_over(group, new.endpoint)
        # a replay of the whole log would be 601 halves (the followers never snapshot)
        assert took["standby_table"] and took["halves_replayed"] < 50, took
        assert client.get_transaction(pending).state == "PENDING"
        client.end_transaction(pending, "COMMIT")
