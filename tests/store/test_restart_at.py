"""A replica's store restarted at its leader's log start (what retention kept): its log, queues
and reads from there are the leader's, across a reopen too."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from txmq.broker.errors import DataDeleted
from txmq.broker.store import MessageStore
from tests.store._helpers import msg, small_config


def copy_log(leader: MessageStore, replica: MessageStore) -> None:
    """Replicate the leader's bytes from the replica's log end, as a follower does."""
    while (offset := replica.commitlog.write_end) < leader.commitlog.write_end:
        replica.append_replicated(offset, leader.read_log(offset, 1 << 20))
    replica.dispatch_replicated()


def queue_bodies(store: MessageStore) -> list[bytes]:
    low, high = store.min_offset("T", 0), store.max_offset("T", 0)
    return [m.body for m in store.read_queue("T", 0, low, high - low).messages]


@pytest.fixture
def stores(tmp_path: Path):
    leader = MessageStore(small_config(tmp_path / "leader"))
    for i in range(60):
        leader.append([msg(body=b"%04d" % i * 100)])
    leader.delete_expired(now_ms=int(time.time() * 1000) + 100 * 3600 * 1000)  # all but the active segment
    replica = MessageStore(small_config(tmp_path / "replica", replica=True))
    yield leader, replica, tmp_path / "replica"
    leader.close()
    replica.close()


def test_a_replica_restarted_at_its_leaders_log_start_holds_the_leaders_queue_from_there(stores):
    leader, replica, _ = stores
    start = leader.commitlog.min_offset
    assert start > 0
    replica.restart_log_at(start)
    copy_log(leader, replica)
    assert replica.commitlog.min_offset == start and replica.commitlog.write_end == leader.commitlog.write_end
    assert (replica.min_offset("T", 0), replica.max_offset("T", 0)) == (leader.min_offset("T", 0),
                                                                         leader.max_offset("T", 0))
    assert replica.min_offset("T", 0) > 0
    assert queue_bodies(replica) == queue_bodies(leader)
    with pytest.raises(DataDeleted):
        replica.read_queue("T", 0, replica.min_offset("T", 0) - 1, 1)


def test_a_replica_restarted_at_its_leaders_log_start_reopens_with_the_same_queue(stores):
    leader, replica, path = stores
    replica.restart_log_at(leader.commitlog.min_offset)
    copy_log(leader, replica)
    low = replica.min_offset("T", 0)
    replica.close()
    reopened = MessageStore(small_config(path, replica=True))
    try:
        assert reopened.min_offset("T", 0) == low
        assert queue_bodies(reopened) == queue_bodies(leader)
    finally:
        reopened.close()
