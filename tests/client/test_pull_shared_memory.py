"""Pulls through shared memory on the broker's host, and the inline fallback everywhere else."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from tests.client.helpers import bodies_batch
from tests.support.broker_process import BrokerProcess
from txmq.broker.client import NativeClient
from txmq.broker.client.pull_shm import (DECLINED, OFF, PROBE_AGAIN_AFTER_S, UNTRIED, VERIFIED, SharedMemoryPulls,
                                         SharedMemoryUnreadable)
from txmq.broker.protocol.shared_memory import PROBE_PREFIX, shm_dir_from_env

pytestmark = pytest.mark.skipif(shm_dir_from_env() is None, reason="no shared-memory directory on this host")


@pytest.fixture
def client(shared_broker):
    """A client that takes pulls as payloads: with local reads on, the broker would answer a
    same-host pull with a read plan instead (tests/client/test_local_read.py)."""
    with NativeClient(shared_broker.endpoint, timeout_s=20, local_reads=False) as c:
        yield c


def _one_queue_with(client, topic, n: int) -> None:
    client.delete_topic(topic)
    client.create_topic(topic, 1)
    client.send_arrow(bodies_batch(n), topic=topic)


def _pulled_bodies(client, topic, n: int) -> list[bytes]:
    return client.pull_arrow(topic, 0, 0, n).batch.column("body").to_pylist()


def test_a_pull_on_the_broker_host_goes_through_shared_memory(client, topic):
    _one_queue_with(client, topic, 5)
    assert client._pull_shm.state == UNTRIED
    assert _pulled_bodies(client, topic, 5) == [b"m%d" % i for i in range(5)]
    assert client._pull_shm.state == VERIFIED
    assert _pulled_bodies(client, topic, 5) == [b"m%d" % i for i in range(5)]  # by the remembered token


def test_a_shared_memory_pull_leaves_no_file_behind(client, topic):
    _one_queue_with(client, topic, 5)
    directory = shm_dir_from_env()
    before = set(os.listdir(directory))
    _pulled_bodies(client, topic, 5)
    _pulled_bodies(client, topic, 5)
    left = {name for name in set(os.listdir(directory)) - before if name.startswith(PROBE_PREFIX)}
    assert left == set()
    assert not any(f"{PROBE_PREFIX}{os.getpid()}-" in name for name in os.listdir(directory))


def test_a_probe_the_broker_cannot_see_falls_back_inline_and_stops_offering(client, topic, tmp_path):
    _one_queue_with(client, topic, 5)
    client._pull_shm = SharedMemoryPulls(tmp_path)  # like a client on another host: its own directory
    assert _pulled_bodies(client, topic, 5) == [b"m%d" % i for i in range(5)]
    assert client._pull_shm.state == DECLINED
    assert client._pull_shm.offer() == (None, None)
    assert os.listdir(tmp_path) == []


def test_a_payload_file_the_client_cannot_map_is_pulled_again_inline(client, topic, monkeypatch):
    _one_queue_with(client, topic, 5)

    def unreadable(path, size):
        os.unlink(path)
        raise SharedMemoryUnreadable("not mappable here")

    monkeypatch.setattr(client._pull_shm, "read", unreadable)
    assert _pulled_bodies(client, topic, 5) == [b"m%d" % i for i in range(5)]
    assert client._pull_shm.state == OFF


def test_a_shared_memory_batch_outlives_its_file(client, topic):
    _one_queue_with(client, topic, 3)
    batch = client.pull_arrow(topic, 0, 0, 3).batch
    assert client._pull_shm.state == VERIFIED
    assert pa.Table.from_batches([batch]).column("body").to_pylist() == [b"m0", b"m1", b"m2"]


def test_an_empty_directory_setting_turns_shared_memory_off(monkeypatch):
    monkeypatch.setenv("TXMQ_PULL_SHM_DIR", "")
    assert shm_dir_from_env() is None and SharedMemoryPulls(shm_dir_from_env()).state == OFF


@pytest.fixture(scope="module")
def broker_without_shm_room(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("capped") / "data", flush="async",
                       extra_args=["--pull-shm-max-bytes", "0"]) as proc:
        yield proc


def test_a_broker_without_room_in_shared_memory_answers_inline(broker_without_shm_room, unique):
    topic = f"t_{unique}"
    with NativeClient(broker_without_shm_room.endpoint, timeout_s=20, local_reads=False) as capped:
        capped.create_topic(topic, 1)
        capped.send_arrow(bodies_batch(5), topic=topic)
        assert _pulled_bodies(capped, topic, 5) == [b"m%d" % i for i in range(5)]
        assert capped._pull_shm.state == DECLINED


def test_a_declined_client_probes_again_after_a_while(tmp_path):
    now = [100.0]
    pulls = SharedMemoryPulls(tmp_path, clock=lambda: now[0])
    offer, probe = pulls.offer()
    pulls.settle(offer, probe, used=False)
    probe.unlink()
    assert pulls.offer() == (None, None)
    now[0] += PROBE_AGAIN_AFTER_S
    offer, probe = pulls.offer()
    assert offer is not None and offer.probe_path == str(probe)
