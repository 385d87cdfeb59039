"""The data plane follows a leader change by itself (issue 38): a Flight put that cannot reach
the leader it knew (nothing sent) asks the control channel where the group's data plane is now
and goes there, within seconds of the new leader's election, instead of failing (a Spark task
attempt) or waiting for a timeout."""

from __future__ import annotations

import threading
import time

import pyarrow as pa

from txmq.broker.client.native_client import NativeClient
from txmq.broker.errors import BrokerUnavailable

TOPIC = "orders"


def _rows(n: int, tag: str) -> pa.Table:
    return pa.table({"body": [f"{tag}-{i}".encode() for i in range(n)]})


def _election_watch(group, old_epoch: int) -> tuple[dict, threading.Thread]:
    """A thread noting when (monotonic) a leader of a later epoch serves."""
    seen: dict = {}

    def watch() -> None:
        try:
            seen["leader"] = group.wait_leader(not_epoch=old_epoch, timeout_s=30)
            seen["at"] = time.monotonic()
        except Exception as exc:  # the test failed first and its group is gone
            seen["error"] = exc

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return seen, thread


def _group_leader_first(group_factory):
    """A 3-replica sync group in sync, and its endpoints with the leader first (the client's control
    channel and Flight connection are on the leader when it goes)."""
    group = group_factory(args=["--replication", "sync"])
    leader = group.wait_leader()
    group.wait_in_sync(3)
    return group, leader, ";".join([leader.endpoint] + [r.endpoint for r in group.replicas if r.endpoint != leader.endpoint])


def test_a_transactional_put_reaches_the_new_leader_within_seconds_of_its_election_after_a_kill(group_factory):
    group, leader, endpoints = _group_leader_first(group_factory)
    with NativeClient(endpoints, timeout_s=30) as client:
        client.create_topic(TOPIC, 2)
        client.send_arrow(_rows(10, "warm"), topic=TOPIC)  # the data plane is connected to the leader
        old_location = client.data_plane()
        seen, watcher = _election_watch(group, leader.epoch)
        group.replica(leader.endpoint).kill()
        killed = time.monotonic()
        summary = client.prepare_stream("", [_rows(50, "half")], topic=TOPIC, producer_group="sink", sender="p0.a0")
        done = time.monotonic()
        watcher.join(30)
        assert summary.count == 50
        assert client.data_plane() != old_location
        client.end_transaction(summary.transaction_id, "COMMIT")
        assert client.get_transaction(summary.transaction_id).state == "COMMITTED"
    assert "at" in seen, seen
    elected = seen["at"]
    print(f"put done {done - killed:.2f}s after the kill, {done - elected:.2f}s after the election")
    # the put waits for the election, then needs one location look-up and one stream
    assert done - elected < 3.0, f"the put reached the new leader {done - elected:.1f}s after its election"


def test_a_plain_send_stream_reaches_the_new_leader_after_a_kill(group_factory):
    group, leader, endpoints = _group_leader_first(group_factory)
    with NativeClient(endpoints, timeout_s=60) as client:  # an election on a loaded host can outlast 30 s
        client.create_topic(TOPIC, 2)
        client.send_arrow(_rows(10, "warm"), topic=TOPIC)
        group.replica(leader.endpoint).kill()
        summary = client.send_stream([_rows(30, "after")], topic=TOPIC)
        assert summary.count == 30


def test_a_put_stream_open_to_a_leader_gone_silent_is_given_up_when_a_new_leader_serves(group_factory):
    """A paused leader keeps its TCP connections: without the control channel's word the stream
    would wait for its deadline (here 30 s x 20)."""
    group, leader, endpoints = _group_leader_first(group_factory)
    with NativeClient(endpoints, timeout_s=30) as client:
        client.create_topic(TOPIC, 2)
        client.send_arrow(_rows(10, "warm"), topic=TOPIC)
        seen, watcher = _election_watch(group, leader.epoch)
        silent = group.replica(leader.endpoint)
        silent.pause()
        try:
            outcome: dict = {}

            def put() -> None:
                try:
                    outcome["summary"] = client.prepare_stream("", [_rows(50, "half")], topic=TOPIC,
                                                               producer_group="sink", sender="p0.a0")
                except Exception as exc:
                    outcome["error"] = exc
                outcome["at"] = time.monotonic()

            putter = threading.Thread(target=put, daemon=True)
            putter.start()
            putter.join(25)
            assert not putter.is_alive(), "the put still waits on the silent leader 25 s after the pause"
            watcher.join(30)
            assert "at" in seen, seen
            # the stream was open to the silent leader: given up as soon as the new leader served,
            # as BrokerUnavailable (its halves may or may not be stored: a Spark task fails and its
            # retry sends as a new sender)
            assert isinstance(outcome.get("error"), BrokerUnavailable), outcome
            assert outcome["at"] - seen["at"] < 4.0, f"given up {outcome['at'] - seen['at']:.1f}s after the election"
            retried = client.prepare_stream("", [_rows(50, "half")], topic=TOPIC, producer_group="sink",
                                            sender="p0.a1")
            assert retried.count == 50
        finally:
            silent.resume()
