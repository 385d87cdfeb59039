"""Every group size has defaults that acknowledge, and nothing is stored that the group cannot
acknowledge (DESIGN.md invariant 11): a write refused for want of in-sync followers is refused
before it is stored (Kafka's NotEnoughReplicas), and a configuration that could never
acknowledge a write refuses to start."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest

from tests.cluster.test_replication import TOPIC, read_bodies
from tests.interop.conftest import official_client_available, run_client
from txmq.broker import errors
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message


def test_a_group_of_one_replica_with_the_defaults_acknowledges_sends(group_factory):
    group = group_factory(replicas=1, declare_size=False)  # no --replicas, no --min-insync
    with NativeClient(group.endpoints, timeout_s=20) as client:
        t0 = time.monotonic()
        client.send([Message(TOPIC, b"alone")])
        assert time.monotonic() - t0 < 2.0, "the send waited for followers the group does not have"
        assert read_bodies(client, TOPIC) == Counter({b"alone": 1})


def test_a_write_that_cannot_be_acknowledged_is_refused_and_not_stored(group_factory):
    group = group_factory(replicas=1, declare_size=False, args=["--min-insync", "1"])
    leader = group.wait_leader().endpoint
    with NativeClient(group.endpoints, timeout_s=20) as client:
        with pytest.raises(errors.NotEnoughReplicas):
            client.send([Message(TOPIC, b"never acknowledged")])
        time.sleep(0.6)  # a member status later: the log end as it is now
        assert group.view.members()[leader]["log_end"] == 0, "the refused write was stored"
        assert read_bodies(client, TOPIC) == Counter()


def test_a_group_that_lost_its_followers_refuses_writes_before_storing_them(group_factory):
    group = group_factory(replicas=2, args=["--replication", "sync"])
    with NativeClient(group.endpoints, timeout_s=20) as client:
        client.send([Message(TOPIC, b"held by both")])
        leader = group.wait_leader().endpoint
        follower = next(r for r in group.replicas if r.endpoint != leader)
        follower.kill()
        deadline = time.monotonic() + 15  # the follower leaves the in-sync set after --replica-lag-max
        while len(group.view.in_sync().members) > 1:
            assert time.monotonic() < deadline, "the dead follower stayed in the in-sync set"
            time.sleep(0.1)
        with NativeClient(leader, timeout_s=20) as direct:
            with pytest.raises(errors.NotEnoughReplicas):
                direct.send([Message(TOPIC, b"refused")])
            assert read_bodies(direct, TOPIC) == Counter({b"held by both": 1})


def test_a_group_that_could_never_acknowledge_refuses_to_start(etcd, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "txmq.broker.server", "--data-dir", str(tmp_path / "r"), "--listen", "127.0.0.1:0",
         "--etcd", etcd.endpoint, "--group", "alone", "--replicas", "1", "--min-insync", "1"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    reason = proc.stderr.strip().splitlines()
    assert len(reason) == 1 and "--min-insync 1" in reason[0] and "--replicas 1" in reason[0]


@pytest.mark.interop
@pytest.mark.skipif(not official_client_available(), reason="the official client's venv is missing (make interop-venv)")
def test_the_official_client_sends_to_a_group_of_one_replica_with_the_defaults_once_each(group_factory):
    group = group_factory(replicas=1, declare_size=False)
    result = run_client(group.endpoints, "produce", "--topic", "official-one", "--count", "20", "--prefix", "o",
                        timeout=120)
    acked = [s["body"] for s in result["sent"]]
    assert len(acked) == 20, f"sends were not acknowledged: {result['errors'][:3]}"
    with NativeClient(group.endpoints) as client:
        assert read_bodies(client, "official-one") == Counter({b.encode(): 1 for b in acked})
