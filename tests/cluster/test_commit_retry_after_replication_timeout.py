"""A COMMIT whose replication times out is in the leader's log (and its table): retried once the
followers are back, it answers COMMITTED, newly_ended False, and each message is visible once
(issue 38, item 2: it used to commit, and publish, a second time)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.cluster.test_replication import read_bodies
from txmq.broker import errors
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message

TOPIC = "orders"


def test_a_commit_retried_after_a_replication_timeout_publishes_each_message_once(group_factory):
    group = group_factory(args=["--replication", "sync", "--min-insync", "1"])
    leader = group.wait_leader()
    followers = [r for r in group.replicas if r.endpoint != leader.endpoint]
    with NativeClient(leader.endpoint, timeout_s=30) as client:
        client.create_topic(TOPIC, 1)
        tx = client.prepare("", [Message(TOPIC, b"a"), Message(TOPIC, b"b")]).transaction_id
        for f in followers:
            f.pause()  # a silent drop between the leader and its followers: the COMMIT is not replicated
        try:
            with pytest.raises(errors.ReplicationTimeout):
                client.end_transaction(tx, "COMMIT")
        finally:
            for f in followers:
                f.resume()
        group.wait_in_sync(3)
        retried = client.end_transaction(tx, "COMMIT")
        assert (retried.state, retried.newly_ended) == ("COMMITTED", False)
        assert client.get_transaction(tx).state == "COMMITTED"
        assert read_bodies(client, TOPIC) == Counter({b"a": 1, b"b": 1})
