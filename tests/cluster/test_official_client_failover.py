"""The official RocketMQ 5 Python client, given every replica's endpoint, keeps sending across a
failover of the group's leader, and every send it saw acknowledged is stored exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from tests.cluster.test_replication import read_bodies
from tests.interop.conftest import official_client_available, run_client
from txmq.broker.client.native_client import NativeClient

# official client processes through leader kills: make test-faults, not the default suite
pytestmark = [pytest.mark.interop, pytest.mark.faults]


@pytest.mark.skipif(not official_client_available(), reason="the official client's venv is missing (make interop-venv)")
def test_the_official_client_keeps_sending_across_a_leader_kill(group_factory):
    group = group_factory(args=["--replication", "sync"])
    result: dict = {}
    driver = threading.Thread(target=lambda: result.update(run_client(
        group.endpoints, "produce", "--topic", "official", "--count", "150", "--interval-ms", "30",
        "--prefix", "o", timeout=180)))
    driver.start()
    time.sleep(2.0)
    group.leader_replica().kill()
    driver.join(200)
    acked = [s["body"] for s in result["sent"]]
    assert "o-149" in acked, f"the client stopped sending after the failover: {result['errors'][:3]}"
    with NativeClient(group.endpoints) as client:
        seen = read_bodies(client, "official")
    assert all(seen[b.encode()] == 1 for b in acked), "an acknowledged send was lost or stored twice"
    assert max(seen.values()) == 1


@pytest.mark.skipif(not official_client_available(), reason="the official client's venv is missing (make interop-venv)")
def test_official_client_transactions_across_a_leader_kill_are_all_or_nothing_and_commits_stay(group_factory):
    group = group_factory(args=["--replication", "sync"])
    result: dict = {}
    driver = threading.Thread(target=lambda: result.update(run_client(
        group.endpoints, "transaction", "--topic", "official-tx", "--mode", "commit", "--count", "100",
        "--interval-ms", "60", "--prefix", "t", timeout=180)))
    driver.start()
    time.sleep(2.0)
    group.leader_replica().kill()
    driver.join(200)
    committed = result["ended"]
    assert "t-99" in committed, f"the client stopped committing after the failover: {result['errors'][:3]}"
    with NativeClient(group.endpoints) as client:
        seen = read_bodies(client, "official-tx")
    assert all(seen[b.encode()] == 1 for b in committed), "a committed transaction was lost or shown twice"
    assert max(seen.values()) == 1


def test_check_back_resumes_on_the_new_leader(group_factory):
    from txmq.broker.client.types import Message

    group = group_factory(args=["--replication", "sync"])
    with NativeClient(group.endpoints, timeout_s=20) as client:
        orphan = client.prepare("", [Message("orphans", b"left open")], producer_group="shop",
                                sender="s1").transaction_id
        old = group.wait_leader()
        group.replica(old.endpoint).kill()
        group.wait_leader(not_epoch=old.epoch)
        asked: list[str] = []

        def answer(check):
            asked.append(check.transaction_id)
            return "COMMIT"

        with client.checkback_session("shop", ["orphans"], answer):
            deadline = time.monotonic() + 30
            while client.get_transaction(orphan).state == "PENDING":
                assert time.monotonic() < deadline, "the new leader never checked the orphan back"
                time.sleep(0.2)
        assert orphan in asked
        assert read_bodies(client, "orphans") == Counter({b"left open": 1})
