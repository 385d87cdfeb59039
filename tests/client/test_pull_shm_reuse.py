"""A client keeps the payload files it is done with and has the broker write later pulls over them."""

from __future__ import annotations

import gc
import os

import pytest

from tests.client.helpers import bodies_batch
from txmq.broker.client import NativeClient
from txmq.broker.client.pull_shm import VERIFIED, PayloadFiles, SharedMemoryPulls
from txmq.broker.protocol.shared_memory import PAYLOAD_PREFIX, shm_dir_from_env

pytestmark = pytest.mark.skipif(shm_dir_from_env() is None, reason="no shared-memory directory on this host")


@pytest.fixture
def client(shared_broker):
    """A client that takes pulls as payloads: with local reads on, the broker would answer a
    same-host pull with a read plan instead (tests/client/test_local_read.py)."""
    with NativeClient(shared_broker.endpoint, timeout_s=20, local_reads=False) as c:
        yield c


def _queue_with(client, topic, n: int) -> None:
    client.delete_topic(topic)
    client.create_topic(topic, 1)
    client.send_arrow(bodies_batch(n), topic=topic)


def _verified(client, topic) -> PayloadFiles:
    client.pull_arrow(topic, 0, 0, 1)  # the probe pull
    assert client._pull_shm.state == VERIFIED
    return client._pull_shm.files


def _bodies(client, topic, start: int, end: int):
    return client.pull_arrow(topic, 0, start, end).batch


def test_a_pull_is_written_into_the_file_of_a_batch_that_is_gone(client, topic):
    _queue_with(client, topic, 6)
    files = _verified(client, topic)
    first = _bodies(client, topic, 0, 3)
    assert first.column("body").to_pylist() == [b"m0", b"m1", b"m2"]
    (kept,) = files._lent
    del first
    gc.collect()
    assert files._free == [kept]
    second = _bodies(client, topic, 3, 6)
    assert files._lent == {kept}
    assert second.column("body").to_pylist() == [b"m3", b"m4", b"m5"]


def test_a_file_is_not_offered_while_a_batch_read_from_it_is_alive(client, topic):
    _queue_with(client, topic, 4)
    files = _verified(client, topic)
    first = _bodies(client, topic, 0, 2)
    second = _bodies(client, topic, 2, 4)
    assert len(files._lent) == 2
    assert first.column("body").to_pylist() == [b"m0", b"m1"]  # not overwritten by the second pull
    assert second.column("body").to_pylist() == [b"m2", b"m3"]


def test_an_empty_pull_gives_the_offered_file_back(client, topic):
    _queue_with(client, topic, 2)
    files = _verified(client, topic)
    gc.collect()
    free_before = len(files._free)
    assert client.pull_arrow(topic, 0, 2, 2).batch.num_rows == 0
    assert len(files._free) == max(free_before, 1) and not files._lent


def test_an_inline_answer_gives_the_offered_file_back(tmp_path):
    pulls = SharedMemoryPulls(tmp_path)
    pulls._set(VERIFIED)
    offer, _ = pulls.offer()
    assert offer.reuse_path and pulls.files.is_lent(offer.reuse_path)
    pulls.reclaim(offer, "")
    assert pulls.files._free == [offer.reuse_path]


def test_a_probe_offers_no_file_to_reuse(tmp_path):
    offer, probe = SharedMemoryPulls(tmp_path).offer()
    assert offer.reuse_path == "" and os.listdir(tmp_path) == [probe.name]


def test_a_free_file_removed_meanwhile_is_replaced_by_a_new_one(tmp_path):
    files = PayloadFiles(tmp_path)
    path = files.lend()
    files.give_back(path)
    os.unlink(path)  # the broker's sweep of idle payload files
    replacement = files.lend()
    assert replacement != path and os.path.exists(replacement)


def test_files_given_back_beyond_the_limit_are_removed(tmp_path):
    files = PayloadFiles(tmp_path, max_free=2)
    lent = [files.lend() for _ in range(3)]
    for path in lent:
        files.give_back(path)
    assert files.free_count == 2 and sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in lent[:2])


def test_every_file_is_removed_when_the_client_goes(tmp_path):
    files = PayloadFiles(tmp_path)
    free, lent = files.lend(), files.lend()
    files.give_back(free)
    assert len(os.listdir(tmp_path)) == 2
    files.remove_all()
    assert os.listdir(tmp_path) == [] and lent


def test_payload_files_are_named_for_the_brokers_sweeps_and_readable_by_the_owner_only(tmp_path):
    files = PayloadFiles(tmp_path)
    path = files.lend()
    assert os.path.basename(path).startswith(f"{PAYLOAD_PREFIX}{os.getpid()}-")
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_closing_the_client_removes_its_kept_files_and_live_batches_stay_readable(shared_broker, topic, client):
    from txmq.broker.client import NativeClient

    _queue_with(client, topic, 4)
    other = NativeClient(shared_broker.endpoint, timeout_s=20)
    files = _verified(other, topic)
    live = _bodies(other, topic, 0, 4)
    kept = set(files._all)
    assert kept and all(os.path.exists(p) for p in kept)
    other.close()
    assert not any(os.path.exists(p) for p in kept)
    assert live.column("body").to_pylist() == [b"m0", b"m1", b"m2", b"m3"]
