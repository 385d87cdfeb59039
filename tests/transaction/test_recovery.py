"""Rebuilding the transaction table on restart (a new engine over the same store)."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from txmq.broker.errors import TransactionAlreadyEnded, TransactionConflict
from txmq.broker.transaction import CheckbackService, Resolution, TransactionConfig, TransactionEngine, TxState

from .conftest import msg
from .memory_store import clone

COMMIT, ROLLBACK = Resolution.COMMIT, Resolution.ROLLBACK


def reopen(store, clock, **cfg) -> TransactionEngine:
    return TransactionEngine(store, TransactionConfig(**cfg), clock=clock)


def test_pending_transaction_stays_pending_and_commits_after_restart(engine, memory_store, clock):
    engine.prepare([msg("a", b"1"), msg("b", b"2", 1)], transaction_id="t", sender="s")
    again = reopen(memory_store, clock)
    info = again.get("t")
    assert (info.state, info.half_count, info.senders) == (TxState.PENDING, 2, ("s",))
    assert again.end("t", COMMIT).newly_ended
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1"]
    assert [m.body for m in memory_store.visible("b", 1)] == [b"2"]


def test_halves_added_after_restart_join_the_same_transaction(engine, memory_store, clock):
    engine.prepare([msg("a", b"1")], transaction_id="t")
    again = reopen(memory_store, clock)
    again.prepare([msg("a", b"2")], transaction_id="t")
    again.end("t", COMMIT)
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1", b"2"]


@pytest.mark.parametrize("first,state", [(COMMIT, TxState.COMMITTED), (ROLLBACK, TxState.ROLLED_BACK)])
def test_ended_transaction_stays_ended_after_restart(engine, memory_store, clock, first, state):
    engine.prepare([msg("a", b"1")], transaction_id="t")
    engine.end("t", first)
    again = reopen(memory_store, clock)
    assert again.get("t").state is state
    assert not again.end("t", first).newly_ended
    with pytest.raises(TransactionConflict):
        again.end("t", ROLLBACK if first is COMMIT else COMMIT)
    with pytest.raises(TransactionAlreadyEnded):
        again.prepare([msg()], transaction_id="t")
    assert len(memory_store.visible("a", 0)) == (1 if first is COMMIT else 0)


def test_recovery_without_any_snapshot_replays_the_queues(engine, memory_store, clock):
    engine.prepare([msg("a", b"1")], transaction_id="p")
    engine.prepare([msg("a", b"2")], transaction_id="c")
    engine.end("c", COMMIT)
    shutil.rmtree(engine.state_dir)
    again = reopen(memory_store, clock)
    assert not again.recovery_stats["from_snapshot"]
    assert again.get("p").state is TxState.PENDING
    assert again.get("c").state is TxState.COMMITTED


def test_recovery_replays_only_the_tail_after_the_snapshot(engine, memory_store, clock):
    for i in range(20):
        engine.prepare([msg("a")], transaction_id=f"old{i}")
        engine.end(f"old{i}", COMMIT)
    engine.snapshot()
    engine.prepare([msg("a")], transaction_id="new")
    again = reopen(memory_store, clock)
    assert again.recovery_stats["from_snapshot"]
    assert (again.recovery_stats["halves_replayed"], again.recovery_stats["ops_replayed"]) == (1, 0)
    assert again.get("old7").state is TxState.COMMITTED
    assert again.get("new").state is TxState.PENDING


def test_a_snapshot_ahead_of_the_store_is_not_trusted(engine, memory_store, clock, tmp_path):
    engine.prepare([msg("a", b"kept")], transaction_id="kept")
    survivor = clone(memory_store, tmp_path / "survivor")  # the store as a crash leaves it
    engine.end("kept", COMMIT)
    engine.prepare([msg("a", b"lost")], transaction_id="lost")
    engine.snapshot()
    shutil.copytree(engine.state_dir, tmp_path / "survivor" / "transaction")
    again = reopen(survivor, clock)  # falls back to the older snapshot (written at start), replays its tail
    assert again.recovery_stats["halves_replayed"] == 1
    assert again.get("kept").state is TxState.PENDING
    assert again.pending() and [i.transaction_id for i in again.pending()] == ["kept"]


def test_discarded_transaction_stays_discarded_and_resumable_after_restart(memory_store, clock):
    engine = reopen(memory_store, clock, max_checks=0)
    engine.prepare([msg("a", b"1")], transaction_id="t")
    clock.advance(6)
    CheckbackService(engine, listener=None).run_once()
    assert engine.get("t").state is TxState.DISCARDED
    again = reopen(memory_store, clock)
    assert again.get("t").state is TxState.DISCARDED
    again.resume("t")
    third = reopen(memory_store, clock)
    assert third.get("t").state is TxState.PENDING
    third.end("t", COMMIT)
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1"]


def test_check_counts_survive_a_clean_restart(memory_store, clock):
    class Yes:
        def request_check(self, tx, half):
            return True

    engine = reopen(memory_store, clock)
    engine.prepare([msg()], transaction_id="t")
    clock.advance(6)
    CheckbackService(engine, Yes()).run_once()
    engine.close()
    assert reopen(memory_store, clock).get("t").checks == 1


def test_pending_transactions_are_checked_back_after_restart(engine, memory_store, clock):
    asked = []

    class Listener:
        def request_check(self, tx, half):
            asked.append((tx.transaction_id, half.body))
            return True

    engine.prepare([msg("a", b"1")], transaction_id="t")
    again = reopen(memory_store, clock)
    clock.advance(6)
    CheckbackService(again, Listener()).run_once()
    assert asked == [("t", b"1")]


def test_metrics_count_pending_halves_after_restart(engine, memory_store, clock):
    engine.prepare([msg("a"), msg("b")], transaction_id="t")
    assert reopen(memory_store, clock).metrics.snapshot()["pending_halves"] == {"a": 1, "b": 1}


def test_with_only_snapshots_ahead_of_the_store_recovery_replays_everything(engine, memory_store, clock, tmp_path):
    engine.prepare([msg("a", b"kept")], transaction_id="kept")
    survivor = clone(memory_store, tmp_path / "survivor")
    engine.end("kept", COMMIT)
    engine.snapshot()
    target = tmp_path / "survivor" / "transaction"
    target.mkdir(parents=True)
    newest = sorted(engine.state_dir.iterdir())[-1]
    shutil.copy(newest, target / newest.name)
    again = reopen(survivor, clock)
    assert not again.recovery_stats["from_snapshot"]
    assert again.get("kept").state is TxState.PENDING


def test_snapshots_taken_under_concurrent_writes_recover_the_same_table(tmp_path):
    import threading
    import time

    from .memory_store import MemoryStore

    store = MemoryStore(tmp_path / "data")
    store.pause_after_append_s = 0.002  # appended, not yet in the table: what a snapshot must not split
    engine = TransactionEngine(store, TransactionConfig())
    stop = threading.Event()

    def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            tx = f"w{w}-{i}"
            engine.prepare([msg("a", b"1"), msg("b", b"2")], transaction_id=tx, sender=str(w))
            if i % 3:
                engine.end(tx, COMMIT if i % 3 == 1 else ROLLBACK)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(6):
            engine.snapshot()
            time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join()
    again = TransactionEngine(store, TransactionConfig())
    assert again.recovery_stats["from_snapshot"]
    live = {i.transaction_id: (i.state, i.half_count) for i in engine.pending(limit=10**6)}
    assert {i.transaction_id: (i.state, i.half_count) for i in again.pending(limit=10**6)} == live
    assert again.metrics.snapshot()["pending_halves"] == engine.metrics.snapshot()["pending_halves"]
    assert again.recovery_stats["finals"] == len(engine._finals)


def test_a_periodic_snapshot_gives_way_to_a_long_commit(engine):
    """A COMMIT of millions of halves holds the engine's gate (shared) for seconds; a periodic
    snapshot waiting for it would hold every other prepare and end back that long."""
    engine._gate.acquire_shared()  # a COMMIT in flight
    try:
        started = time.monotonic()
        assert engine.snapshot(wait=False) is None
        assert time.monotonic() - started < 1
        other = threading.Thread(target=lambda: engine.prepare([msg("a")], transaction_id="meanwhile"))
        other.start()
        other.join(5)
        assert not other.is_alive()  # no snapshot attempt left waiting in front of it
    finally:
        engine._gate.release_shared()
    assert engine.snapshot(wait=False) is not None


def test_a_snapshot_restores_every_half_of_a_transaction_exactly(engine, memory_store, clock):
    engine.prepare([msg("a", b"1"), msg("b", b"2", 1)], transaction_id="t", sender="s1")
    engine.prepare([msg("a", b"3", 2)], transaction_id="t", sender="s2")
    engine.snapshot()
    again = reopen(memory_store, clock)
    assert again.recovery_stats["from_snapshot"] and again.recovery_stats["halves_replayed"] == 0
    assert again._table["t"].halves == engine._table["t"].halves


def test_a_half_prepared_while_a_snapshot_is_written_is_recovered_once(
        engine, memory_store, clock, monkeypatch):
    """The snapshot is captured under the table's gate, with the half queue's offset, and written
    after the gate is released: a half prepared in between is recovered once, from the queue."""
    from txmq.broker.transaction import engine as engine_module

    engine.prepare([msg("a", b"1")], transaction_id="t")
    real_write = engine_module.write_snapshot

    def write_after_another_prepare(state_dir, snap):
        engine.prepare([msg("a", b"2")], transaction_id="t")  # the gate is free again: it goes in
        return real_write(state_dir, snap)

    monkeypatch.setattr(engine_module, "write_snapshot", write_after_another_prepare)
    engine.snapshot()
    again = reopen(memory_store, clock)
    assert again.recovery_stats["from_snapshot"] and again.recovery_stats["halves_replayed"] == 1
    assert again.get("t").half_count == 2
    again.end("t", COMMIT)
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1", b"2"]
