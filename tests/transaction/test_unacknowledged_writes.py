"""A write whose acknowledgement fails after its append (ReplicationTimeout, NotLeader, a failed
fsync) is in the log: the engine's table holds it too, the caller gets the acknowledgement's error
(the outcome is indeterminate), and a retry finds the write there. It only waits for that write's
acknowledgement and writes nothing again, so a COMMIT retried after a ReplicationTimeout publishes
each message once (issue 38, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from txmq.broker.errors import NotLeader, ReplicationTimeout, TransactionConflict
from txmq.broker.store import MessageStore, StoreConfig
from txmq.broker.store.message import OP_HALF_TOPIC
from txmq.broker.store.message_store import COPY_PART_BYTES
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine, TxState

from .conftest import FakeClock, msg
from .memory_store import MemoryStore

COMMIT, ROLLBACK = Resolution.COMMIT, Resolution.ROLLBACK
TIMEOUT = ReplicationTimeout("a write is not held by 1 in-sync follower(s) after 5s (simulated)")


# --- against the in-memory store: acknowledge() fails after each append ---------------------------

def test_a_commit_whose_acknowledgement_fails_is_committed_and_its_retry_writes_nothing(engine, memory_store):
    engine.prepare([msg("a", b"1"), msg("a", b"2")], transaction_id="t")
    memory_store.fail_acknowledgements = TIMEOUT
    with pytest.raises(ReplicationTimeout):
        engine.end("t", COMMIT)
    appends = memory_store.appends
    memory_store.fail_acknowledgements = None  # the followers hold the log again
    result = engine.end("t", COMMIT)
    assert (result.state, result.newly_ended) == (TxState.COMMITTED, False)
    assert memory_store.appends == appends
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1", b"2"]


def test_a_retry_while_the_acknowledgement_still_fails_fails_again_and_writes_nothing(engine, memory_store):
    engine.prepare([msg("a", b"1")], transaction_id="t")
    memory_store.fail_acknowledgements = TIMEOUT
    with pytest.raises(ReplicationTimeout):
        engine.end("t", COMMIT)
    appends = memory_store.appends
    for _ in range(3):
        with pytest.raises(ReplicationTimeout):
            engine.end("t", COMMIT)
    assert memory_store.appends == appends
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1"]


def test_a_rollback_whose_acknowledgement_fails_is_rolled_back_and_a_commit_after_it_conflicts(engine, memory_store):
    engine.prepare([msg("a", b"1")], transaction_id="t")
    memory_store.fail_acknowledgements = NotLeader("fenced (simulated)")
    with pytest.raises(NotLeader):
        engine.end("t", ROLLBACK)
    memory_store.fail_acknowledgements = None
    with pytest.raises(TransactionConflict):
        engine.end("t", COMMIT)
    assert engine.end("t", ROLLBACK).newly_ended is False
    assert memory_store.visible("a", 0) == []


def test_halves_whose_acknowledgement_fails_belong_to_the_transaction(engine, memory_store):
    engine.prepare([msg("a", b"1")], transaction_id="t")
    memory_store.fail_acknowledgements = TIMEOUT
    with pytest.raises(ReplicationTimeout):
        engine.prepare([msg("a", b"2")], transaction_id="t")
    memory_store.fail_acknowledgements = None
    assert engine.get("t").half_count == 2  # as a new leader rebuilding the table from this log would count
    assert engine.end("t", COMMIT).newly_ended
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1", b"2"]


def test_the_state_of_a_transaction_is_told_only_once_its_ending_write_is_acknowledged(engine, memory_store):
    engine.prepare([msg("a", b"1")], transaction_id="t")
    memory_store.fail_acknowledgements = TIMEOUT
    with pytest.raises(ReplicationTimeout):
        engine.end("t", COMMIT)
    with pytest.raises(ReplicationTimeout):
        engine.get("t")
    memory_store.fail_acknowledgements = None
    assert engine.get("t").state is TxState.COMMITTED


def test_a_decision_whose_acknowledgement_fails_is_the_decision(engine, memory_store):
    memory_store.fail_acknowledgements = TIMEOUT
    with pytest.raises(ReplicationTimeout):
        engine.decide("t", COMMIT, ["g1", "g2"])
    with pytest.raises(ReplicationTimeout):  # no participant is told a decision its group may still lose
        engine.decision("t")
    appends = memory_store.appends
    memory_store.fail_acknowledgements = None
    second = engine.decide("t", ROLLBACK, ["g1", "g2"])
    assert (second.resolution, second.newly_decided) == (COMMIT, False)
    assert memory_store.appends == appends
    assert len(memory_store.visible(OP_HALF_TOPIC, 0)) == 1


def test_a_failed_acknowledgement_is_settled_by_any_later_acknowledged_write(engine, memory_store):
    engine.prepare([msg("a", b"1")], transaction_id="t")
    engine.prepare([msg("a", b"2")], transaction_id="u")
    memory_store.fail_acknowledgements = TIMEOUT
    with pytest.raises(ReplicationTimeout):
        engine.end("t", COMMIT)
    memory_store.fail_acknowledgements = None
    assert engine.end("u", COMMIT).newly_ended  # acknowledges every write before it, t's COMMIT included
    acknowledged = memory_store.acknowledged
    memory_store.fail_acknowledgements = TIMEOUT  # not asked again: nothing of t waits for acknowledgement
    assert engine.end("t", COMMIT).newly_ended is False
    assert memory_store.acknowledged == acknowledged


# --- against the real store: a replicated group's acknowledgement (the ReplicationHook seam) fails ----

class Replicas:
    """A group's followers as the store's ReplicationHook sees them: they hold every write, or
    (`holding` False) none, and then every acknowledgement times out."""

    def __init__(self) -> None:
        self.holding = True

    def admit(self) -> None:
        pass  # the write is admitted (the replicas were there when it was stored)

    def written(self, end: int) -> None:
        pass

    def acknowledge(self, end: int) -> None:
        if not self.holding:
            raise TIMEOUT


@pytest.fixture
def replicated(tmp_path: Path):
    store = MessageStore(StoreConfig(tmp_path / "data", flush_mode="async"))
    replicas = Replicas()
    store.write_lock.replication = replicas
    engine = TransactionEngine(store, TransactionConfig(), clock=FakeClock())
    yield store, replicas, engine
    engine.close()
    store.close()


def test_a_commit_retried_after_a_replication_timeout_publishes_each_message_once(replicated):
    store, replicas, engine = replicated
    engine.prepare([msg("orders", b"%d" % i) for i in range(5)], transaction_id="t")
    replicas.holding = False
    with pytest.raises(ReplicationTimeout):
        engine.end("t", COMMIT)
    end = store.commitlog.write_end
    replicas.holding = True
    assert engine.end("t", COMMIT).newly_ended is False
    assert store.commitlog.write_end == end
    assert [m.body for m in store.read_queue("orders", 0, 0, 100).messages] == [b"%d" % i for i in range(5)]
    assert store.max_offset(OP_HALF_TOPIC, 0) == 1


def test_a_commit_written_in_parts_is_acknowledged_only_once_the_replicas_hold_it(replicated):
    store, replicas, engine = replicated
    body = b"x" * (3 << 20)
    count = COPY_PART_BYTES // len(body) + 2  # more than one part
    for i in range(count):
        engine.prepare([msg("orders", body)], transaction_id="t")
    replicas.holding = False
    with pytest.raises(ReplicationTimeout):
        engine.end("t", COMMIT)
    replicas.holding = True
    assert engine.end("t", COMMIT).newly_ended is False
    assert store.max_offset("orders", 0) == count
