"""TransactionEngine rules: prepare, end, idempotence, conflicts, atomic commit."""

from __future__ import annotations

import threading

import pytest

from txmq.broker.errors import (
    IllegalDeliveryTime,
    IllegalTopic,
    InvalidTransactionId,
    StoreError,
    TransactionAlreadyEnded,
    TransactionConflict,
    UnknownTransaction,
)
from txmq.broker.store.message import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROP_PRODUCER_GROUP,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TRANSACTION_ID,
    PROP_TX_SENDER,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
)
from txmq.broker.transaction import Resolution, TxState

from .conftest import msg

COMMIT, ROLLBACK = Resolution.COMMIT, Resolution.ROLLBACK


def test_prepare_parks_halves_in_the_half_topic_with_their_real_destination(engine, memory_store):
    engine.prepare([msg("orders", b"a", 2)], transaction_id="t1", producer_group="pg", sender="s1")
    [half] = memory_store.visible(HALF_TOPIC, 0)
    assert half.properties[PROP_REAL_TOPIC] == "orders"
    assert half.properties[PROP_REAL_QUEUE_ID] == "2"
    assert half.properties[PROP_TRANSACTION_ID] == "t1"
    assert half.properties[PROP_PRODUCER_GROUP] == "pg"
    assert half.properties[PROP_TX_SENDER] == "s1"


def test_halves_carry_sysflag_prepared(engine, memory_store):
    engine.prepare([msg("orders", b"a")], transaction_id="t1")
    [half] = memory_store.visible(HALF_TOPIC, 0)
    assert half.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED


def test_halves_are_invisible_in_the_real_topic_until_commit(engine, memory_store):
    engine.prepare([msg("orders", b"a")], transaction_id="t1")
    assert memory_store.visible("orders", 0) == []


def test_prepare_without_id_generates_one(engine):
    result = engine.prepare([msg()])
    assert result.transaction_id
    assert engine.get(result.transaction_id).state is TxState.PENDING


def test_commit_makes_every_half_of_every_sender_visible(engine, memory_store):
    engine.prepare([msg("a", b"1", 0), msg("b", b"2", 1)], transaction_id="t", sender="x")
    engine.prepare([msg("a", b"3", 1)], transaction_id="t", sender="y")
    result = engine.end("t", COMMIT)
    assert result.state is TxState.COMMITTED and result.newly_ended
    assert len(result.committed) == 3
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1"]
    assert [m.body for m in memory_store.visible("b", 1)] == [b"2"]
    assert [m.body for m in memory_store.visible("a", 1)] == [b"3"]


def test_commit_is_one_store_group_of_finals_and_op(engine, memory_store):
    engine.prepare([msg("a", b"1"), msg("a", b"2")], transaction_id="t")
    before = memory_store.appends
    engine.end("t", COMMIT)
    assert memory_store.appends == before + 1
    assert len(memory_store.visible(OP_HALF_TOPIC, 0)) == 1


def test_final_record_restores_topic_and_points_at_its_half(engine, memory_store):
    prepared = engine.prepare([msg("orders", b"body", 3, KEYS="k1")], transaction_id="t")
    engine.end("t", COMMIT)
    [final] = memory_store.visible("orders", 3)
    assert final.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT
    assert final.prepared_transaction_offset == prepared.results[0].physical_offset
    assert final.properties["KEYS"] == "k1"
    # kept (RocketMQ's EndTransaction clears REAL_TOPIC and REAL_QID; txmq keeps them: a system
    # property no reader shows, and cutting them out of every half costs a COMMIT ~9%: docs/TRANSACTIONS.md)
    assert final.properties[PROP_REAL_TOPIC] == "orders"
    assert final.properties[PROP_TRANSACTION_ID] == "t"


def test_rollback_writes_only_an_op_record(engine, memory_store):
    engine.prepare([msg("orders")], transaction_id="t")
    result = engine.end("t", ROLLBACK)
    assert result.state is TxState.ROLLED_BACK and result.newly_ended
    assert memory_store.visible("orders", 0) == []
    assert len(memory_store.visible(OP_HALF_TOPIC, 0)) == 1


@pytest.mark.parametrize("resolution", [COMMIT, ROLLBACK])
def test_repeated_resolution_is_acknowledged_and_writes_nothing(engine, memory_store, resolution):
    engine.prepare([msg()], transaction_id="t")
    first = engine.end("t", resolution)
    appends = memory_store.appends
    again = engine.end("t", resolution)
    assert again.state is first.state and not again.newly_ended
    assert memory_store.appends == appends


@pytest.mark.parametrize("first,second", [(COMMIT, ROLLBACK), (ROLLBACK, COMMIT)])
def test_contradicting_resolution_is_refused_and_writes_nothing(engine, memory_store, first, second):
    engine.prepare([msg()], transaction_id="t")
    engine.end("t", first)
    appends = memory_store.appends
    with pytest.raises(TransactionConflict):
        engine.end("t", second)
    assert memory_store.appends == appends


@pytest.mark.parametrize("resolution,state", [(COMMIT, "COMMITTED"), (ROLLBACK, "ROLLED_BACK")])
def test_adding_halves_to_an_ended_transaction_is_refused_with_its_state(engine, resolution, state):
    engine.prepare([msg()], transaction_id="t")
    engine.end("t", resolution)
    with pytest.raises(TransactionAlreadyEnded) as refused:
        engine.prepare([msg()], transaction_id="t")
    assert refused.value.state == state


def test_ending_an_unknown_transaction_is_refused(engine):
    with pytest.raises(UnknownTransaction):
        engine.end("nope", COMMIT)
    with pytest.raises(UnknownTransaction):
        engine.get("nope")


@pytest.mark.parametrize("prop", ["DELAY", "__STARTDELIVERTIME"])
def test_a_delay_level_on_a_transactional_message_is_refused_and_writes_nothing(engine, memory_store, prop):
    with pytest.raises(IllegalDeliveryTime):
        engine.prepare([msg(), msg(**{prop: "3"})], transaction_id="t")
    assert memory_store.appends == 0
    with pytest.raises(UnknownTransaction):
        engine.get("t")


def test_system_topic_as_destination_is_refused(engine):
    with pytest.raises(IllegalTopic):
        engine.prepare([msg(HALF_TOPIC)])


@pytest.mark.parametrize("bad", ["", "has space", "x" * 300, "tab\there"])
def test_malformed_transaction_id_is_refused(engine, bad):
    with pytest.raises(InvalidTransactionId):
        engine.prepare([msg()], transaction_id=bad)


def test_include_senders_commits_only_listed_senders_halves(engine, memory_store):
    engine.prepare([msg("a", b"keep")], transaction_id="t", sender="attempt-2")
    engine.prepare([msg("a", b"drop")], transaction_id="t", sender="attempt-1")
    result = engine.end("t", COMMIT, include_senders=["attempt-2"])
    assert result.state is TxState.COMMITTED
    assert [m.body for m in memory_store.visible("a", 0)] == [b"keep"]


def test_failed_commit_append_leaves_the_transaction_pending_and_retryable(engine, memory_store):
    engine.prepare([msg("a", b"1")], transaction_id="t")
    memory_store.fail_next_append = True
    with pytest.raises(StoreError):
        engine.end("t", COMMIT)
    assert engine.get("t").state is TxState.PENDING
    assert engine.end("t", COMMIT).newly_ended
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1"]


def test_failed_first_prepare_leaves_no_transaction(engine, memory_store):
    memory_store.fail_next_append = True
    with pytest.raises(StoreError):
        engine.prepare([msg()], transaction_id="t")
    with pytest.raises(UnknownTransaction):
        engine.get("t")


def test_concurrent_prepares_and_commits_on_one_id_commit_each_half_once(engine, memory_store):
    barrier = threading.Barrier(8)
    outcomes: list[object] = []

    def sender(i: int) -> None:
        barrier.wait()
        for j in range(10):
            try:
                engine.prepare([msg("a", f"{i}-{j}".encode())], transaction_id="t", sender=str(i))
            except TransactionAlreadyEnded:
                pass
        outcomes.append(engine.end("t", COMMIT).newly_ended)

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count(True) == 1
    bodies = [m.body for m in memory_store.visible("a", 0)]
    halves = memory_store.visible(HALF_TOPIC, 0)
    assert sorted(bodies) == sorted(h.body for h in halves)  # every acknowledged half, once
    assert len(set(bodies)) == len(bodies)


def test_concurrent_commit_and_rollback_race_has_one_winner(engine, memory_store):
    for round_ in range(20):
        tx = f"t{round_}"
        engine.prepare([msg("a", tx.encode())], transaction_id=tx)
        results: list[object] = []

        def end(res: Resolution) -> None:
            try:
                results.append(engine.end(tx, res).state)
            except TransactionConflict:
                results.append("conflict")

        threads = [threading.Thread(target=end, args=(r,)) for r in (COMMIT, ROLLBACK)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results.count("conflict") == 1
    assert len(memory_store.visible(OP_HALF_TOPIC, 0)) == 20


def test_consistent_cut_leaves_out_system_topics(engine, memory_store):
    engine.prepare([msg("a", b"1", 0), msg("a", b"2", 1)], transaction_id="t")
    engine.end("t", COMMIT)
    assert engine.consistent_cut() == {("a", 0): 1, ("a", 1): 1}
    assert engine.consistent_cut(["a"]) == {("a", 0): 1, ("a", 1): 1}


def test_pending_lists_open_transactions_by_topic(engine):
    engine.prepare([msg("a")], transaction_id="t1")
    engine.prepare([msg("b")], transaction_id="t2")
    engine.prepare([msg("b")], transaction_id="t3")
    engine.end("t3", ROLLBACK)
    assert [i.transaction_id for i in engine.pending()] == ["t1", "t2"]
    assert [i.transaction_id for i in engine.pending(topic="b")] == ["t2"]


def test_metrics_count_pending_halves_and_resolutions(engine, clock):
    engine.prepare([msg("a"), msg("a"), msg("b")], transaction_id="t1")
    clock.advance(0.2)
    engine.prepare([msg("b")], transaction_id="t2")
    assert engine.metrics.snapshot()["pending_halves"] == {"a": 2, "b": 2}
    engine.end("t1", COMMIT)
    engine.end("t2", ROLLBACK)
    snap = engine.metrics.snapshot()
    assert snap["pending_halves"] == {}
    assert (snap["commits"], snap["rollbacks"], snap["committed_messages"]) == (1, 1, 3)
    assert snap["resolution_latency_s"]["count"] == 2
    buckets = dict(snap["resolution_latency_s"]["buckets"])
    assert (buckets[0.001], buckets[0.1], buckets[0.5]) == (1, 1, 2)  # t2 took 0 s, t1 0.2 s
