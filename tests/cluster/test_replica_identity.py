"""A replica's identity is bound to its log (DESIGN.md invariant 10): a replica whose data
directory was wiped or replaced never leads nor counts as in sync until it has copied the
group's log again, so it can never erase the acknowledged writes the others hold."""

from __future__ import annotations

import shutil
import time
from collections import Counter

import pytest

from tests.cluster.test_replication import TOPIC, read_bodies
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.coordination import InSyncSet, may_lead

# wiped and foreign replicas started first: make test-faults, not the default suite
pytestmark = pytest.mark.faults


def test_a_wiped_replica_started_first_does_not_lead_and_every_acknowledged_write_survives(group_factory):
    group = group_factory(args=["--replication", "sync"])
    acked = [f"w{i}".encode() for i in range(300)]
    with NativeClient(group.endpoints, timeout_s=20) as client:
        for i in range(0, len(acked), 50):
            client.send([Message(TOPIC, body) for body in acked[i:i + 50]])
    end = group.wait_same_log_end()
    deadline = time.monotonic() + 5  # the leader records what its in-sync set holds about once a second
    while group.view.in_sync().vouched < end:
        assert time.monotonic() < deadline, f"etcd never recorded the acknowledged log end {end}"
        time.sleep(0.1)
    assert set(group.view.in_sync().ids) == {r.endpoint for r in group.replicas}
    before = group.wait_leader().epoch  # the wiped replica may have led this epoch: its record lasts a lease
    for r in group.replicas:  # a power cut: every replica down at once, the in-sync set names all three
        r.kill()
    wiped = group.replicas[0]
    shutil.rmtree(wiped.data_dir)  # its disk replaced: an empty data directory
    wiped.start()
    deadline = time.monotonic() + 5.0  # the old leader's 2 s lease runs out, then an election takes ~0.1 s
    while time.monotonic() < deadline:
        leader = group.leader()
        assert leader is None or leader.epoch <= before or leader.endpoint != wiped.endpoint, \
            "a replica with an empty log took the lead"
        time.sleep(0.05)
    deadline = time.monotonic() + 5
    while "data directory" not in next((m.get("may_not_lead", "") for m in group.status()["members"]
                                        if m["endpoint"] == wiped.endpoint), ""):
        assert time.monotonic() < deadline, f"the wiped replica does not say why it may not lead: {group.status()}"
        time.sleep(0.1)
    for r in group.replicas[1:]:
        r.start()
    leader = group.wait_leader()
    assert leader.endpoint != wiped.endpoint
    group.wait_in_sync(3, timeout_s=30)  # the wiped one copied the log and was vouched for again
    group.wait_same_log_end()
    with NativeClient(group.endpoints, timeout_s=20) as client:
        assert read_bodies(client, TOPIC) == Counter({body: 1 for body in acked})


@pytest.mark.slow  # ~20-40 s: the wiped-first test above covers invariant 10 in CI (make test-faults)
def test_a_leader_with_no_history_of_the_log_never_makes_the_others_cut_it(group_factory):
    group = group_factory(args=["--replication", "sync"])
    with NativeClient(group.endpoints, timeout_s=20) as client:
        client.send([Message(TOPIC, f"w{i}".encode()) for i in range(100)])
    end = group.wait_same_log_end()
    for r in group.replicas:
        r.kill()
    wiped, *others = group.replicas
    shutil.rmtree(wiped.data_dir)
    group.view.delete(group.view.prefix + "isr")  # an operator told etcd to forget the in-sync set
    wiped.start()
    deadline = time.monotonic() + 10  # the old lease runs out, then it founds the group anew
    while (leader := group.leader()) is None or leader.endpoint != wiped.endpoint:
        assert time.monotonic() < deadline, f"the wiped replica did not found the group anew: {group.status()}"
        time.sleep(0.1)
    for r in others:
        r.start()
    deadline = time.monotonic() + 5
    while True:
        members = {m["endpoint"]: m for m in group.view.members().values()}
        states = [members.get(r.endpoint, {}) for r in others]
        if all(s.get("error") for s in states):
            break
        assert time.monotonic() < deadline, f"a replica followed a leader with no history of its log: {states}"
        time.sleep(0.1)
    assert [s["log_end"] for s in states] == [end, end], "a replica cut acknowledged writes"
    assert all("holds no epoch as old" in s["error"] for s in states)


def isr(**kw) -> InSyncSet:
    base = dict(epoch=3, members=("a:1", "b:1"), revision=7, ids={"a:1": "id-a", "b:1": "id-b"}, vouched=4096)
    return InSyncSet(**{**base, **kw})


def test_a_member_with_its_own_log_long_enough_may_lead():
    assert may_lead(isr(), "a:1", "id-a", 4096) is None


def test_a_replica_outside_the_in_sync_set_may_not_lead():
    assert "not in the in-sync set" in may_lead(isr(), "c:1", "id-c", 8192)


def test_a_member_whose_data_directory_changed_may_not_lead():
    assert "data directory" in may_lead(isr(), "a:1", "id-new", 8192)


def test_a_member_whose_log_is_shorter_than_the_in_sync_set_vouched_for_may_not_lead():
    assert "shorter" in may_lead(isr(), "a:1", "id-a", 4095)


def test_any_replica_may_found_a_new_group():
    assert may_lead(InSyncSet(0, (), 0), "a:1", "id-a", 0) is None
