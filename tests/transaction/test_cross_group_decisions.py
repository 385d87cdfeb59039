"""Cross-group transactions in the engine: the coordinator's decision record (first wins,
rebuilt by recovery and snapshots), participants that resolve only as the coordinator
decided, and check-back that asks the coordinator first. Groups are engines over memory
stores joined by an in-process DecisionAuthority."""

from __future__ import annotations

import shutil

import pytest

from txmq.broker.errors import BadRequest, CoordinatorUnavailable, TransactionConflict
from txmq.broker.transaction import CheckbackService, Resolution, TransactionConfig, TransactionEngine, TxState
from txmq.broker.transaction.decision import (
    PROP_COORDINATOR,
    PROP_PARTICIPANTS,
    CrossGroup,
    coordinator_for,
    cross_group_properties,
)

from .conftest import msg
from .memory_store import MemoryStore

COMMIT, ROLLBACK = Resolution.COMMIT, Resolution.ROLLBACK
GROUPS = ("ga", "gb")


class InProcessAuthority:
    """Engines by group name; `down` holds the groups that cannot be reached."""

    def __init__(self, engines: dict[str, TransactionEngine]) -> None:
        self.engines = engines
        self.down: set[str] = set()
        self.calls = 0

    def of(self, me: str) -> "GroupAuthority":
        return GroupAuthority(self, me)

    def _coordinator(self, cross: CrossGroup) -> TransactionEngine:
        self.calls += 1
        if cross.coordinator in self.down:
            raise CoordinatorUnavailable(f"{cross.coordinator} is down")
        return self.engines[cross.coordinator]

    def settle(self, transaction_id, cross, proposal, senders=None):
        return self._coordinator(cross).decide(transaction_id, proposal, cross.participants, senders)

    def lookup(self, transaction_id, cross):
        return self._coordinator(cross).decision(transaction_id)


class GroupAuthority:
    """One group's view of the in-process authority: it decides its own transactions itself."""

    def __init__(self, shared: InProcessAuthority, me: str) -> None:
        self.shared = shared
        self.me = me

    def is_coordinator(self, cross):
        return cross.coordinator == self.me

    def settle(self, transaction_id, cross, proposal, senders=None):
        return self.shared.settle(transaction_id, cross, proposal, senders)

    def lookup(self, transaction_id, cross):
        return self.shared.lookup(transaction_id, cross)


class NoProducer:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def request_check(self, tx, half) -> bool:
        self.asked.append(tx.transaction_id)
        return False


@pytest.fixture
def cluster(tmp_path, clock):
    stores = {g: MemoryStore(tmp_path / g) for g in GROUPS}
    engines = {g: TransactionEngine(stores[g], TransactionConfig(transaction_timeout_s=1, check_interval_s=1),
                                    clock=clock) for g in GROUPS}
    authority = InProcessAuthority(engines)
    for g, e in engines.items():
        e.authority = authority.of(g)
    return engines, stores, authority


def tx_for(coordinator: str) -> str:
    i = 0
    while coordinator_for(f"tx{i}", GROUPS) != coordinator:
        i += 1
    return f"tx{i}"


def cross_msg(tx_id: str, body: bytes = b"x"):
    return msg("orders", body, **cross_group_properties(tx_id, GROUPS))


def test_the_coordinator_is_derived_from_the_id_over_the_sorted_distinct_groups():
    assert coordinator_for("abc", ["gb", "ga", "gb"]) == coordinator_for("abc", ["ga", "gb"])
    assert {coordinator_for(f"t{i}", GROUPS) for i in range(50)} == set(GROUPS)
    props = cross_group_properties("abc", ["gb", "ga"])
    assert props == {PROP_COORDINATOR: coordinator_for("abc", GROUPS), PROP_PARTICIPANTS: "ga,gb"}


def test_the_first_decision_wins_and_survives_restart_with_or_without_a_snapshot(cluster, clock):
    engines, stores, _ = cluster
    ga = engines["ga"]
    first = ga.decide("t", ROLLBACK, ["gb", "ga"])
    assert first.newly_decided and first.participants == GROUPS
    again = ga.decide("t", COMMIT, GROUPS)
    assert (again.resolution, again.newly_decided) == (ROLLBACK, False)
    ga.snapshot()
    ga.decide("u", COMMIT, GROUPS)  # in the op queue's tail after the snapshot
    reopened = TransactionEngine(stores["ga"], TransactionConfig(), clock=clock)
    assert reopened.decision("t").resolution is ROLLBACK and reopened.decision("u").resolution is COMMIT
    shutil.rmtree(reopened.state_dir)
    replayed = TransactionEngine(stores["ga"], TransactionConfig(), clock=clock)
    assert replayed.decision("t").resolution is ROLLBACK and replayed.decision("u").participants == GROUPS
    assert replayed.decide("t", COMMIT, GROUPS).resolution is ROLLBACK


def test_a_decision_changes_nothing_in_the_table(cluster):
    engines, _, _ = cluster
    ga = engines["ga"]
    ga.prepare([msg("orders")], transaction_id="plain")
    ga.decide("plain", ROLLBACK, GROUPS)
    assert ga.get("plain").state is TxState.PENDING


def test_a_participant_commits_only_after_the_coordinator_recorded_commit(cluster):
    engines, stores, authority = cluster
    tx = tx_for("ga")
    for g in GROUPS:
        engines[g].prepare([cross_msg(tx, g.encode())], transaction_id=tx)
    assert engines["gb"].end(tx, COMMIT).newly_ended
    assert engines["ga"].decision(tx).resolution is COMMIT, "recorded before the participant committed"
    assert [m.body for m in stores["gb"].visible("orders", 0)] == [b"gb"]
    with pytest.raises(TransactionConflict):
        engines["ga"].end(tx, ROLLBACK)  # the coordinator's own halves follow its decision
    assert engines["ga"].get(tx).state is TxState.COMMITTED
    assert [m.body for m in stores["ga"].visible("orders", 0)] == [b"ga"]


def test_a_participant_told_the_losing_resolution_applies_the_decision_and_refuses(cluster):
    engines, stores, _ = cluster
    tx = tx_for("ga")
    engines["gb"].prepare([cross_msg(tx)], transaction_id=tx)
    engines["ga"].decide(tx, ROLLBACK, GROUPS)
    with pytest.raises(TransactionConflict):
        engines["gb"].end(tx, COMMIT)
    assert engines["gb"].get(tx).state is TxState.ROLLED_BACK
    assert stores["gb"].visible("orders", 0) == []


def test_with_the_coordinator_unreachable_nothing_is_resolved(cluster, clock):
    engines, stores, authority = cluster
    tx = tx_for("ga")
    engines["gb"].prepare([cross_msg(tx)], transaction_id=tx)
    authority.down.add("ga")
    with pytest.raises(CoordinatorUnavailable):
        engines["gb"].end(tx, COMMIT)
    with pytest.raises(CoordinatorUnavailable):
        engines["gb"].discard(tx)
    producer = NoProducer()
    service = CheckbackService(engines["gb"], producer)
    clock.advance(5)
    round_ = service.run_once()
    assert (round_.coordinator_down, round_.checked, producer.asked) == (1, 0, [])
    assert engines["gb"].get(tx).state is TxState.PENDING
    assert stores["gb"].visible("orders", 0) == []
    authority.down.clear()
    engines["ga"].decide(tx, COMMIT, GROUPS)
    clock.advance(2)
    assert service.run_once().decided == 1, "check-back asked the coordinator again and applied its decision"
    assert engines["gb"].get(tx).state is TxState.COMMITTED


def test_check_back_asks_the_producer_only_when_the_coordinator_has_no_decision(cluster, clock):
    engines, _, _ = cluster
    tx = tx_for("ga")
    engines["gb"].prepare([cross_msg(tx)], transaction_id=tx)
    producer = NoProducer()
    clock.advance(5)
    CheckbackService(engines["gb"], producer).run_once()
    assert producer.asked == [tx]


def test_a_discard_at_max_checks_records_rollback_at_the_coordinator_first(cluster, clock):
    engines, _, _ = cluster
    tx = tx_for("ga")
    engines["gb"].prepare([cross_msg(tx)], transaction_id=tx)
    assert engines["gb"].discard(tx, reason="max-checks")
    assert engines["ga"].decision(tx).resolution is ROLLBACK
    assert engines["gb"].get(tx).state is TxState.DISCARDED
    assert not engines["gb"].end(tx, ROLLBACK).newly_ended


def test_a_discard_finds_commit_decided_and_commits_instead(cluster):
    engines, stores, _ = cluster
    tx = tx_for("ga")
    engines["gb"].prepare([cross_msg(tx)], transaction_id=tx)
    engines["ga"].decide(tx, COMMIT, GROUPS)
    assert not engines["gb"].discard(tx)
    assert engines["gb"].get(tx).state is TxState.COMMITTED
    assert len(stores["gb"].visible("orders", 0)) == 1


def test_the_coordinator_of_a_pending_transaction_survives_restart(cluster, clock):
    engines, stores, authority = cluster
    tx = tx_for("ga")
    engines["gb"].prepare([cross_msg(tx)], transaction_id=tx)
    engines["gb"].snapshot()
    for drop_snapshots in (False, True):
        if drop_snapshots:
            shutil.rmtree(engines["gb"].state_dir)
        reopened = TransactionEngine(stores["gb"], TransactionConfig(), clock=clock)
        reopened.authority = authority.of("gb")
        authority.down.add("ga")
        with pytest.raises(CoordinatorUnavailable):
            reopened.end(tx, COMMIT)
        authority.down.clear()
    assert reopened.end(tx, COMMIT).newly_ended


def test_halves_of_one_call_must_agree_on_their_coordinator(cluster):
    engines, _, _ = cluster
    tx = tx_for("ga")
    with pytest.raises(BadRequest):
        engines["ga"].prepare([cross_msg(tx), msg("orders")], transaction_id=tx)
    engines["ga"].prepare([cross_msg(tx)], transaction_id=tx)
    other = msg("orders", **{PROP_COORDINATOR: "gb", PROP_PARTICIPANTS: "gb,gc"})
    with pytest.raises(BadRequest):
        engines["ga"].prepare([other], transaction_id=tx)


def test_a_single_group_transaction_never_asks_a_coordinator(cluster):
    engines, _, authority = cluster
    engines["ga"].prepare([msg("orders")], transaction_id="plain")
    engines["ga"].end("plain", COMMIT)
    assert authority.calls == 0


def test_the_coordinators_own_commit_carries_its_decision_in_the_same_write(cluster, clock):
    engines, stores, _ = cluster
    tx = tx_for("ga")
    engines["ga"].prepare([cross_msg(tx)], transaction_id=tx)
    writes = len(stores["ga"].visible("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0))
    assert engines["ga"].end(tx, COMMIT).newly_ended
    ops = stores["ga"].visible("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0)[writes:]
    assert [op.body.count(b'"DECIDE"') for op in ops] == [1, 0], "the DECIDE op, then the COMMIT op"
    assert engines["ga"].decision(tx).resolution is COMMIT
    reopened = TransactionEngine(stores["ga"], TransactionConfig(), clock=clock)
    assert reopened.decision(tx).resolution is COMMIT and reopened.get(tx).state is TxState.COMMITTED
    with pytest.raises(TransactionConflict):
        engines["ga"].end(tx, ROLLBACK)


def test_the_coordinators_own_rollback_records_rollback(cluster):
    engines, stores, _ = cluster
    tx = tx_for("ga")
    for g in GROUPS:
        engines[g].prepare([cross_msg(tx)], transaction_id=tx)
    engines["ga"].end(tx, ROLLBACK)
    with pytest.raises(TransactionConflict):
        engines["gb"].end(tx, COMMIT)
    assert engines["gb"].get(tx).state is TxState.ROLLED_BACK


def test_a_cross_group_commit_op_names_the_participant_groups_for_a_cluster_wide_cut(cluster):
    from txmq.broker.transaction.op import OpKind, parse_op

    engines, stores, _ = cluster
    tx = tx_for("ga")
    engines["gb"].prepare([cross_msg(tx)], transaction_id=tx)
    engines["gb"].end(tx, COMMIT)
    [op] = [parse_op(m) for m in stores["gb"].visible("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0)]
    assert (op.kind, op.participants) == (OpKind.COMMIT, GROUPS)
    [final] = stores["gb"].visible("orders", 0)
    assert final.properties[PROP_COORDINATOR] == "ga" and final.properties[PROP_PARTICIPANTS] == "ga,gb"


def test_a_decision_restricted_to_senders_commits_only_their_halves_on_every_participant(cluster, clock):
    engines, stores, _ = cluster
    tx = tx_for("ga")
    for g in GROUPS:
        engines[g].prepare([cross_msg(tx, b"ok-" + g.encode())], transaction_id=tx, sender="task-ok")
        engines[g].prepare([cross_msg(tx, b"dead-" + g.encode())], transaction_id=tx, sender="task-dead")
    engines["ga"].end(tx, COMMIT, include_senders=["task-ok"])
    assert engines["ga"].decision(tx).senders == ("task-ok",)
    # gb is settled by check-back: the producer's answer is never asked, the decision names the senders
    producer = NoProducer()
    clock.advance(5)
    CheckbackService(engines["gb"], producer).run_once()
    assert producer.asked == []
    for g in GROUPS:
        assert [m.body for m in stores[g].visible("orders", 0)] == [b"ok-" + g.encode()]


def test_a_participant_applies_the_decisions_senders_whatever_its_caller_names(cluster):
    engines, stores, _ = cluster
    tx = tx_for("ga")
    engines["gb"].prepare([cross_msg(tx, b"a")], transaction_id=tx, sender="a")
    engines["gb"].prepare([cross_msg(tx, b"b")], transaction_id=tx, sender="b")
    engines["ga"].decide(tx, COMMIT, GROUPS, senders=["a"])
    engines["gb"].end(tx, COMMIT)  # an unrestricted COMMIT, e.g. a replayed batch's driver
    assert [m.body for m in stores["gb"].visible("orders", 0)] == [b"a"]


def test_a_decisions_senders_survive_restart_with_or_without_a_snapshot(cluster, clock):
    engines, stores, _ = cluster
    ga = engines["ga"]
    ga.decide("s1", COMMIT, GROUPS, senders=["x", "y"])
    ga.snapshot()
    ga.decide("s2", COMMIT, GROUPS, senders=["z"])
    for drop_snapshots in (False, True):
        if drop_snapshots:
            shutil.rmtree(ga.state_dir)
        again = TransactionEngine(stores["ga"], TransactionConfig(), clock=clock)
        assert again.decision("s1").senders == ("x", "y") and again.decision("s2").senders == ("z",)


def test_a_pending_cross_group_transaction_names_its_coordinator_and_participants(cluster):
    engines, _, _ = cluster
    tx = tx_for("gb")
    engines["ga"].prepare([cross_msg(tx)], transaction_id=tx)
    info = engines["ga"].get(tx)
    assert (info.coordinator, info.participants) == ("gb", tuple(sorted(GROUPS)))
    assert info.next_check_ms > 0  # the check-back it is scheduled for
