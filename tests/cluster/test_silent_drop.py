"""A silent drop (a paused process: TCP stays up, nothing answers, as behind a partition) is
noticed by gRPC keepalive in ~2-3 s, not when a call times out (issue 38, item 5): the native
client fails over to the new leader within about as long as a kill takes, and its check-back
session moves there too, so transactions left to check-back do not stay pending."""

from __future__ import annotations

import threading
import time

import pytest

from tests.cluster.test_replication import Load
from tests.interop.conftest import official_client_available, run_client
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message

# failovers after a leader's packets are dropped: make test-faults, not the default suite
pytestmark = pytest.mark.faults

TOPIC = "orders"


def first_ack_after(load: Load, since: float, timeout_s: float = 30.0) -> float:
    """Seconds from `since` (monotonic) to the first write acknowledged after it."""
    count = len(load.acked)
    deadline = since + timeout_s
    while len(load.acked) == count:
        assert time.monotonic() < deadline, f"no write acknowledged within {timeout_s}s of the drop"
        time.sleep(0.01)
    return time.monotonic() - since


def test_the_native_client_fails_over_within_seconds_of_a_silent_drop_of_the_leader(group_factory):
    group = group_factory(args=["--replication", "sync"])
    leader = group.wait_leader()
    # the leader first: the client is talking to it when it goes silent
    endpoints = ";".join([leader.endpoint] + [r.endpoint for r in group.replicas if r.endpoint != leader.endpoint])
    with NativeClient(endpoints, timeout_s=30) as client:
        client.create_topic(TOPIC, 2)
        with Load(client) as load:
            load.wait_acks(20)
            silent = group.replica(leader.endpoint)
            silent.pause()
            try:
                dropped = time.monotonic()
                took = first_ack_after(load, dropped)
            finally:
                silent.resume()
    print(f"first acknowledged write {took:.2f}s after the leader went silent")
    assert took < 8.0, f"{took:.1f}s from a silent drop of the leader to the next acknowledged write"  # ~3.3-4 s measured


def test_a_check_back_session_moves_to_the_new_leader_after_a_silent_drop(group_factory):
    group = group_factory(args=["--replication", "sync"])
    leader = group.wait_leader()
    endpoints = ";".join([leader.endpoint] + [r.endpoint for r in group.replicas if r.endpoint != leader.endpoint])
    asked: list[str] = []
    lock = threading.Lock()

    def answer(check):
        with lock:
            asked.append(check.transaction_id)
        return "COMMIT"

    with NativeClient(endpoints, timeout_s=30) as client:
        client.create_topic(TOPIC, 2)
        with client.checkback_session("shop", [TOPIC], answer) as session:
            assert session.wait_registered(10)
            silent = group.replica(leader.endpoint)
            silent.pause()
            try:
                new = group.wait_leader(not_epoch=leader.epoch)
                with NativeClient(new.endpoint, timeout_s=30) as producer:
                    # left to check-back on the new leader: only a session registered there is asked
                    orphan = producer.prepare("", [Message(TOPIC, b"left open")], producer_group="shop",
                                              sender="s1").transaction_id
                    dropped = time.monotonic()
                    while producer.get_transaction(orphan).state == "PENDING":
                        assert time.monotonic() - dropped < 20, "the orphan stayed pending: no session on the new leader"
                        time.sleep(0.1)
            finally:
                silent.resume()
    assert orphan in asked


@pytest.mark.interop
@pytest.mark.slow  # ~60 s: an official client process through a failover
@pytest.mark.skipif(not official_client_available(), reason="the official client's venv is missing (make interop-venv)")
def test_the_official_client_given_every_replica_sends_again_within_seconds_of_a_silent_drop(group_factory):
    group = group_factory(args=["--replication", "sync"])
    leader = group.wait_leader()
    endpoints = ";".join([leader.endpoint] + [r.endpoint for r in group.replicas if r.endpoint != leader.endpoint])
    with NativeClient(leader.endpoint) as admin:
        admin.create_topic("official", 4)
    result: dict = {}
    driver = threading.Thread(target=lambda: result.update(run_client(
        endpoints, "produce", "--topic", "official", "--count", "150", "--interval-ms", "40", "--prefix", "o",
        timeout=120)))
    driver.start()
    time.sleep(4.0)
    silent = group.replica(leader.endpoint)
    dropped = time.time()
    silent.pause()
    try:
        driver.join(150)
    finally:
        silent.resume()
    after = [s["acked_at"] for s in result["sent"] if s["acked_at"] > dropped]
    assert after, f"no send acknowledged after the drop: {result['errors'][:3]}"
    took = min(after) - dropped
    print(f"official client: first acknowledged send {took:.2f}s after the leader went silent")
    assert took < 8.0, f"{took:.1f}s from a silent drop of the leader to the official client's next acknowledged send"


@pytest.mark.interop
@pytest.mark.slow  # ~40 s: an official client process through a failover
@pytest.mark.skipif(not official_client_available(), reason="the official client's venv is missing (make interop-venv)")
def test_the_official_clients_orphans_are_checked_back_by_the_new_leader_after_a_silent_drop(group_factory):
    """Its Telemetry streams through the other replicas are relayed on to the new leader (roles.py):
    it is asked there, not 5 minutes later when its settings sync would open them again."""
    group = group_factory(args=["--replication", "sync", "--transaction-timeout", "6s"])
    leader = group.wait_leader()
    endpoints = ";".join([leader.endpoint] + [r.endpoint for r in group.replicas if r.endpoint != leader.endpoint])
    topic = "official-orphans"
    with NativeClient(leader.endpoint) as admin:
        admin.create_topic(topic, 4)
        result: dict = {}
        driver = threading.Thread(target=lambda: result.update(run_client(
            endpoints, "transaction", "--topic", topic, "--mode", "orphan-commit", "--count", "2", "--prefix", "o",
            "--timeout", "60", timeout=120)))
        driver.start()
        deadline = time.monotonic() + 60
        while len(admin.list_transactions(topic=topic)) < 2:
            assert time.monotonic() < deadline and driver.is_alive(), f"the orphans were never sent: {result}"
            time.sleep(0.05)
        time.sleep(1.0)  # the client has its answers (the orphans' immunity is 6 s)
    silent = group.replica(leader.endpoint)
    silent.pause()
    try:
        driver.join(130)
    finally:
        silent.resume()
    assert len(result["transaction_ids"]) == 2, result["errors"]
    assert result["checked"] == ["o-0", "o-1"], "the new leader never asked the official client about its orphans"
