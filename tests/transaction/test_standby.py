"""A follower's standby transaction table: kept current from the log it replicates, handed over
when it leads, and dropped when its log is cut below what it replayed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.store._helpers import small_config
from txmq.broker.errors import UnknownTransaction
from txmq.broker.store import MessageStore
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine
from txmq.broker.transaction.recovery import RecoveredTable, recover_table, replay_tail, start_table
from txmq.broker.transaction.standby import StandbyTable

from .conftest import FakeClock, msg

CONFIG = TransactionConfig()


def replicate(leader: MessageStore, replica: MessageStore) -> None:
    """Copy the leader's bytes from the replica's log end and dispatch them, as a follower does."""
    while (offset := replica.commitlog.write_end) < leader.commitlog.write_end:
        replica.append_replicated(offset, leader.read_log(offset, 1 << 20))
    replica.dispatch_replicated()


def table_view(table: RecoveredTable) -> tuple:
    """What a take-over keeps of a table: each transaction's state and halves, the finals, the decisions."""
    txs = {tx_id: (tx.state, tx.producer_group, tuple(tx.halves))
           for tx_id, tx in table.table.items()}
    finals = {k: f.state for k, f in table.finals.items()}
    return txs, finals, dict(table.decisions)


def make(tmp: Path) -> tuple[MessageStore, TransactionEngine, MessageStore]:
    leader = MessageStore(small_config(tmp / "leader"))
    engine = TransactionEngine(leader, CONFIG, clock=FakeClock())
    replica = MessageStore(small_config(tmp / "replica", replica=True))
    return leader, engine, replica


STEPS = st.lists(st.tuples(st.sampled_from(["prepare", "commit", "rollback", "advance"]), st.integers(1, 4)),
                 min_size=1, max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_a_standby_advanced_at_any_points_equals_one_replay_of_the_followers_log(tmp_path, steps):
    tmp = tmp_path / "run"
    shutil.rmtree(tmp, ignore_errors=True)
    leader, engine, replica = make(tmp)
    try:
        standby = StandbyTable(replica, CONFIG, clock=FakeClock())
        pending: list[str] = []
        for n, (op, k) in enumerate(steps):
            if op == "prepare":
                tx = f"t{n}"
                engine.prepare([msg("orders", b"%d" % i, i % 2) for i in range(k)], transaction_id=tx)
                pending.append(tx)
            elif op in ("commit", "rollback") and pending:
                engine.end(pending.pop(k % len(pending)), Resolution.COMMIT if op == "commit" else Resolution.ROLLBACK)
            replicate(leader, replica)
            if op == "advance":
                standby.advance()
        taken = standby.take() or start_table(replica, [])  # no advance yet: the engine starts from nothing
        replay_tail(taken, replica, default_immunity_s=CONFIG.transaction_timeout_s,
                    max_immunity_s=CONFIG.max_immunity_s)  # what the engine does with what it takes
        whole = recover_table(replica, [], default_immunity_s=CONFIG.transaction_timeout_s,
                              max_immunity_s=CONFIG.max_immunity_s)
        assert table_view(taken) == table_view(whole)
    finally:
        engine.close()
        leader.close()
        replica.close()


def test_the_table_taken_over_needs_only_what_arrived_since_its_last_advance(tmp_path):
    leader, engine, replica = make(tmp_path)
    for i in range(20):
        engine.prepare([msg(body=b"a"), msg(body=b"b")], transaction_id=f"t{i}")
        if i % 2:
            engine.end(f"t{i}", Resolution.COMMIT)
    replicate(leader, replica)
    standby = StandbyTable(replica, CONFIG, clock=FakeClock())
    standby.advance()
    engine.prepare([msg(body=b"late")], transaction_id="late")
    replicate(leader, replica)
    taken = standby.take()
    promoted = TransactionEngine(replica, CONFIG, clock=FakeClock(), warm=taken)
    assert promoted.recovery_stats["halves_replayed"] == 1  # the late one: the advance had replayed the 40
    assert promoted.get("late").half_count == 1 and promoted.get("t1").state.name == "COMMITTED"
    for store in (engine, leader):
        store.close()
    promoted.close()
    replica.close()


def test_a_cut_below_what_the_standby_replayed_voids_it(tmp_path):
    leader, engine, replica = make(tmp_path)
    engine.prepare([msg(body=b"kept")], transaction_id="kept")
    kept_end = leader.commitlog.write_end
    engine.prepare([msg(body=b"cut")], transaction_id="cut")
    replicate(leader, replica)
    standby = StandbyTable(replica, CONFIG, clock=FakeClock())
    standby.advance()
    replica.truncate_log(kept_end)  # a divergent tail the next leader does not hold
    assert standby.take() is None
    promoted = TransactionEngine(replica, CONFIG, clock=FakeClock(), warm=None)
    assert promoted.get("kept").half_count == 1
    with pytest.raises(UnknownTransaction):
        promoted.get("cut")
    for store in (engine, leader, promoted, replica):
        store.close()


def test_a_cut_past_what_the_standby_replayed_keeps_it(tmp_path):
    leader, engine, replica = make(tmp_path)
    engine.prepare([msg(body=b"kept")], transaction_id="kept")
    replicate(leader, replica)
    standby = StandbyTable(replica, CONFIG, clock=FakeClock())
    standby.advance()
    kept_end = leader.commitlog.write_end
    leader.append([msg(body=b"plain")])
    replicate(leader, replica)
    replica.truncate_log(kept_end)
    taken = standby.take()
    assert taken is not None and set(taken.table) == {"kept"}
    for store in (engine, leader, replica):
        store.close()
