"""Transactions across broker groups with real replica processes and a real etcd (DESIGN.md
invariant 9): a coordinator group records the decision before any participant commits;
kill -9 of the coordinator or of a participant at every step ends all-or-nothing and
exactly once after restart/failover and check-back; conflicting decisions are refused;
with the coordinator down nothing commits."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pyarrow as pa
import pytest

from tests.spark.support import topic_bodies
from txmq.broker import errors
from txmq.broker.client.cross_group import CrossGroupTransaction
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.protocol import coordinator_pb2 as cpb
from txmq.broker.transaction.decision import coordinator_for

# coordinators and participants killed at each step of a cross-group commit: make test-faults, not the default suite
pytestmark = pytest.mark.faults

PRODUCER_GROUP = "shop"
FAST_CHECKS = ["--transaction-timeout", "1s", "--check-interval", "0.5s"]


def tx_id_coordinated_by(coordinator: str, groups: list[str]) -> str:
    """A fresh transaction id whose coordinator (derived from the id) is `coordinator`."""
    while True:
        tx_id = uuid.uuid4().hex.upper()
        if coordinator_for(tx_id, groups) == coordinator:
            return tx_id


def bodies(group, topic: str) -> Counter:
    with NativeClient(group.endpoints, timeout_s=20) as client:
        try:
            return Counter(topic_bodies(client, topic))
        except errors.TopicNotFound:
            return Counter()


def pending(group) -> list[str]:
    with NativeClient(group.endpoints, timeout_s=20) as client:
        return [t.transaction_id for t in client.list_transactions(state="PENDING")]


def wait_until(predicate, timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout_s}s"
        time.sleep(0.1)


class Cluster:
    """Groups by name, a client per group, and the topic each group's halves go to."""

    def __init__(self, groups: dict) -> None:
        self.groups = groups
        self.clients = {name: NativeClient(g.endpoints, timeout_s=20) for name, g in groups.items()}
        self.topics = {name: f"t-{name[-1]}" for name in groups}

    def names(self) -> list[str]:
        return sorted(self.groups)

    def transaction(self, coordinator: str | None = None, **kw) -> CrossGroupTransaction:
        names = self.names()
        tx_id = tx_id_coordinated_by(coordinator, names) if coordinator else None
        return CrossGroupTransaction(self.clients, producer_group=PRODUCER_GROUP, transaction_id=tx_id, **kw)

    def prepare_all(self, tx: CrossGroupTransaction, n: int = 3) -> dict[str, list[bytes]]:
        sent = {}
        for name in self.names():
            sent[name] = [f"{tx.transaction_id[:8]}-{name}-{i}".encode() for i in range(n)]
            tx.prepare(name, [Message(self.topics[name], b) for b in sent[name]])
        return sent

    def visible(self, sent: dict[str, list[bytes]]) -> dict[str, int]:
        """Per group, how many of `sent`'s messages are visible, asserting none is visible twice."""
        out = {}
        for name, wanted in sent.items():
            seen = bodies(self.groups[name], self.topics[name])
            assert all(seen[b] <= 1 for b in wanted), f"a message is visible twice on {name}: {seen}"
            out[name] = sum(1 for b in wanted if seen[b])
        return out

    def wait_all_or_nothing(self, sent: dict[str, list[bytes]], committed: bool, timeout_s: float = 40.0) -> None:
        expected = {name: len(b) if committed else 0 for name, b in sent.items()}
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.visible(sent)
            if seen == expected and (committed or not any(pending(g) for g in self.groups.values())):
                return
            assert time.monotonic() < deadline, f"expected {expected}, saw {seen}"
            time.sleep(0.2)

    def close(self) -> None:
        for c in self.clients.values():
            c.close()


@pytest.fixture
def cluster_of(group_factory):
    made = []

    def make(n: int = 2, *, replicas: int = 1, coordinator_replicas: int | None = None, args=None) -> Cluster:
        groups = {}
        prefix = f"x{uuid.uuid4().hex[:8]}"  # parametrized tests would share group_factory's names in one etcd
        for i in range(n):
            count = coordinator_replicas if (coordinator_replicas and i == 0) else replicas
            # a lone replica has no follower to wait for: sync replication would refuse every write
            alone = ["--replication", "async"] if count == 1 else []
            g = group_factory(f"{prefix}-{i}", args=[*FAST_CHECKS, *alone, *(args or [])], replicas=count)
            groups[g.name] = g
        c = Cluster(groups)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def answer_checks(cluster: Cluster, answer: str):
    """Check-back sessions of the producer group on every group, all answering `answer`."""
    sessions = []
    for name, client in cluster.clients.items():
        s = client.checkback_session(PRODUCER_GROUP, [cluster.topics[name]], lambda request: answer)
        s.wait_registered(10)
        sessions.append(s)
    return sessions


# --- the happy path and the rules --------------------------------------------------------------


def test_a_cross_group_commit_is_visible_on_every_group_once_and_its_repeats_are_idempotent(cluster_of):
    cluster = cluster_of(2)
    tx = cluster.transaction()
    sent = cluster.prepare_all(tx)
    assert cluster.visible(sent) == {name: 0 for name in sent}, "halves are invisible"
    result = tx.commit()
    assert result.decision == "COMMIT" and not result.unsettled
    assert set(result.ended) == set(cluster.names())
    assert tx.get_decision() == "COMMIT"
    assert cluster.visible(sent) == {name: 3 for name in sent}
    again = tx.commit()  # idempotent: the decision stands, every group acknowledges without writing
    assert all(not e.newly_ended for e in again.ended.values())
    with pytest.raises(errors.TransactionConflict):
        tx.rollback()
    assert cluster.visible(sent) == {name: 3 for name in sent}


def test_a_batch_decided_with_its_senders_commits_only_theirs_on_every_group_through_check_back(cluster_of):
    """As a Spark batch across groups: one successful task attempt per group and a failed attempt's
    rows on each, sent as Arrow with the participants named; the driver records COMMIT of the
    successful senders and dies before telling anyone. Each group's check-back applies the
    decision, senders included: the failed attempt's rows are never visible."""
    cluster = cluster_of(2)
    names = cluster.names()
    tx_id = uuid.uuid4().hex.upper()
    sent = {}
    for name in names:
        client, topic = cluster.clients[name], cluster.topics[name]
        for sender in ("ok", "failed"):
            rows = [f"{sender}-{name}-{i}".encode() for i in range(3)]
            client.prepare_stream(tx_id, [pa.table({"body": rows})], topic=topic, producer_group=PRODUCER_GROUP,
                                  sender=f"{sender}-{name}", participants=names)
            sent.setdefault(name, {})[sender] = rows
    driver = CrossGroupTransaction(cluster.clients, producer_group=PRODUCER_GROUP, transaction_id=tx_id)
    assert driver.decide("COMMIT", include_senders=[f"ok-{n}" for n in names]) == "COMMIT"
    wait_until(lambda: not any(pending(g) for g in cluster.groups.values()), what="check-back settled every group")
    for name in names:
        seen = bodies(cluster.groups[name], cluster.topics[name])
        assert [seen[b] for b in sent[name]["ok"]] == [1, 1, 1]
        assert not any(seen[b] for b in sent[name]["failed"]), f"a failed attempt's rows are visible on {name}"


def test_a_single_group_transaction_has_no_coordinator_round_trip(cluster_of):
    cluster = cluster_of(1)
    (name,) = cluster.names()
    tx = CrossGroupTransaction(cluster.clients, producer_group=PRODUCER_GROUP)
    assert tx.coordinator is None and not tx.cross
    tx.prepare(name, [Message(cluster.topics[name], b"solo")])
    assert tx.commit().coordinator is None
    assert cluster.visible({name: [b"solo"]}) == {name: 1}


def test_a_conflicting_decision_is_refused_and_the_first_one_applies_everywhere(cluster_of):
    cluster = cluster_of(2)
    tx = cluster.transaction()
    sent = cluster.prepare_all(tx)
    other = next(n for n in cluster.names() if n != tx.coordinator)
    misrouted = cpb.DecideRequest(transaction_id=tx.transaction_id, decision=cpb.DECISION_COMMIT,
                                  participants=cluster.names(), coordinator=tx.coordinator)
    with pytest.raises(errors.BadRequest, match="coordinated by"):
        cluster.clients[other]._call("Decide", misrouted)  # only the coordinator group records a decision
    assert tx.decide("ROLLBACK") == "ROLLBACK"
    assert tx.decide("COMMIT") == "ROLLBACK", "the first decision wins"
    with pytest.raises(errors.TransactionConflict):
        tx.commit()  # rolls every participant back, then reports the conflict
    # a participant told COMMIT directly asks the coordinator first and refuses it too
    with pytest.raises(errors.TransactionConflict):
        cluster.clients[other].end_transaction(tx.transaction_id, "COMMIT", producer_group=PRODUCER_GROUP)
    cluster.wait_all_or_nothing(sent, committed=False)


def test_a_participant_told_commit_directly_records_the_decision_at_the_coordinator_first(cluster_of):
    cluster = cluster_of(2)
    tx = cluster.transaction()
    sent = cluster.prepare_all(tx)
    other = next(n for n in cluster.names() if n != tx.coordinator)
    cluster.clients[other].end_transaction(tx.transaction_id, "COMMIT", producer_group=PRODUCER_GROUP)
    assert tx.get_decision() == "COMMIT"
    # the coordinator's own halves are settled by its check-back, which finds its decision
    cluster.wait_all_or_nothing(sent, committed=True)


def test_halves_naming_a_coordinator_outside_the_participants_are_refused(cluster_of):
    cluster = cluster_of(1)
    (name,) = cluster.names()
    bad = Message(cluster.topics[name], b"x", properties={"__TXMQ_COORD__": "elsewhere", "__TXMQ_GROUPS__": name})
    with pytest.raises(errors.BadRequest):
        cluster.clients[name].prepare("", [bad], producer_group=PRODUCER_GROUP)
    assert pending(cluster.groups[name]) == []


# --- kill -9 at every step ----------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["COMMIT", "ROLLBACK"])
def test_coordinator_killed_before_the_decision_settles_through_check_back_all_or_nothing(cluster_of, answer):
    cluster = cluster_of(2)
    coordinator = cluster.names()[0]
    tx = cluster.transaction(coordinator)
    sent = cluster.prepare_all(tx)
    cluster.groups[coordinator].replicas[0].kill()
    cluster.groups[coordinator].replicas[0].restart()
    cluster.groups[coordinator].wait_leader()
    sessions = answer_checks(cluster, answer)  # the producer answers check-backs only now
    try:
        cluster.wait_all_or_nothing(sent, committed=answer == "COMMIT")
    finally:
        for s in sessions:
            s.close()
    assert tx.get_decision() == answer


def test_participant_killed_before_the_decision_then_commit_succeeds_everywhere(cluster_of):
    cluster = cluster_of(2)
    coordinator = cluster.names()[0]
    participant = cluster.names()[1]
    tx = cluster.transaction(coordinator)
    sent = cluster.prepare_all(tx)
    cluster.groups[participant].replicas[0].kill()
    cluster.groups[participant].replicas[0].restart()
    cluster.groups[participant].wait_leader()
    tx.commit()
    cluster.wait_all_or_nothing(sent, committed=True)


def test_coordinator_killed_after_the_decision_before_any_participant_commits(cluster_of):
    cluster = cluster_of(2)
    coordinator = cluster.names()[0]
    tx = cluster.transaction(coordinator)
    sent = cluster.prepare_all(tx)
    assert tx.decide("COMMIT") == "COMMIT"
    cluster.groups[coordinator].replicas[0].kill()  # the decision is in its log: recovery derives it again
    assert cluster.visible({n: b for n, b in sent.items() if n != coordinator}) == {
        n: 0 for n in sent if n != coordinator}
    cluster.groups[coordinator].replicas[0].restart()
    cluster.groups[coordinator].wait_leader()
    # no producer answers: the participants' check-back finds the decision at the coordinator
    cluster.wait_all_or_nothing(sent, committed=True)
    assert tx.get_decision() == "COMMIT"


def test_participant_killed_midway_through_the_commits_catches_up_from_the_coordinator(cluster_of):
    cluster = cluster_of(3)
    coordinator, first, last = cluster.names()
    tx = cluster.transaction(coordinator)
    sent = cluster.prepare_all(tx)
    assert tx.decide("COMMIT") == "COMMIT"
    tx.end_on(coordinator, "COMMIT")
    tx.end_on(first, "COMMIT")
    assert cluster.visible(sent) == {coordinator: 3, first: 3, last: 0}
    cluster.groups[last].replicas[0].kill()
    cluster.groups[last].replicas[0].restart()
    cluster.groups[last].wait_leader()
    cluster.wait_all_or_nothing(sent, committed=True)


def test_coordinator_killed_midway_through_the_commits_still_ends_all_or_nothing(cluster_of):
    cluster = cluster_of(3)
    coordinator, first, last = cluster.names()
    tx = cluster.transaction(coordinator)
    sent = cluster.prepare_all(tx)
    assert tx.decide("COMMIT") == "COMMIT"
    tx.end_on(first, "COMMIT")
    cluster.groups[coordinator].replicas[0].kill()
    # the last participant cannot reach the coordinator: it stays pending rather than guess
    with pytest.raises(errors.CoordinatorUnavailable):
        cluster.clients[last].end_transaction(tx.transaction_id, "COMMIT", producer_group=PRODUCER_GROUP)
    assert cluster.visible({last: sent[last]}) == {last: 0}
    cluster.groups[coordinator].replicas[0].restart()
    cluster.groups[coordinator].wait_leader()
    result = tx.settle("COMMIT")  # the client's retry, idempotent where it already committed
    assert not result.unsettled
    cluster.wait_all_or_nothing(sent, committed=True)


def test_with_the_coordinator_down_participants_stay_pending_and_nothing_commits(cluster_of):
    cluster = cluster_of(2)
    coordinator, participant = cluster.names()
    tx = cluster.transaction(coordinator)
    sent = cluster.prepare_all(tx)
    cluster.groups[coordinator].replicas[0].kill()
    sessions = answer_checks(cluster_subset(cluster, participant), "COMMIT")
    try:
        time.sleep(4)  # several check-back rounds: the producer would say COMMIT, the coordinator cannot record it
        assert cluster.visible({participant: sent[participant]}) == {participant: 0}
        assert tx.transaction_id in pending(cluster.groups[participant])
        with pytest.raises(errors.CoordinatorUnavailable):
            cluster.clients[participant].end_transaction(tx.transaction_id, "COMMIT", producer_group=PRODUCER_GROUP)
        cluster.groups[coordinator].replicas[0].restart()
        cluster.groups[coordinator].wait_leader()
        sessions += answer_checks(cluster_subset(cluster, coordinator), "COMMIT")
        cluster.wait_all_or_nothing(sent, committed=True)
    finally:
        for s in sessions:
            s.close()


def cluster_subset(cluster: Cluster, name: str) -> Cluster:
    view = Cluster.__new__(Cluster)
    view.groups = {name: cluster.groups[name]}
    view.clients = {name: cluster.clients[name]}
    view.topics = {name: cluster.topics[name]}
    return view


def test_a_three_replica_coordinator_keeps_its_decision_across_a_leader_kill(cluster_of):
    cluster = cluster_of(2, coordinator_replicas=3)
    coordinator = next(n for n, g in cluster.groups.items() if len(g.replicas) == 3)
    tx = cluster.transaction(coordinator)
    sent = cluster.prepare_all(tx)
    assert tx.decide("COMMIT") == "COMMIT"
    group = cluster.groups[coordinator]
    old = group.wait_leader()
    group.replica(old.endpoint).kill()
    group.wait_leader(not_epoch=old.epoch)
    assert tx.decide("ROLLBACK") == "COMMIT", "the new leader derived the decision from the replicated log"
    cluster.wait_all_or_nothing(sent, committed=True)


def test_groups_serving_tls_and_auth_reach_each_others_coordinator_and_check_the_caller(cluster_of, tmp_path):
    import json

    from tests.support.tls import self_signed

    cert, key = self_signed(tmp_path)
    accounts = tmp_path / "auth.json"
    accounts.write_text(json.dumps({"accounts": [
        {"access_key": "ops", "secret_key": "ops-secret", "admin": True, "publish": ["*"], "subscribe": ["*"]},
        {"access_key": "shop-app", "secret_key": "s1", "producer_groups": [PRODUCER_GROUP], "publish": ["*"],
         "subscribe": ["*"]},
        {"access_key": "other-app", "secret_key": "s2", "producer_groups": ["other"], "publish": ["*"],
         "subscribe": ["*"]}]}))
    cluster = cluster_of(2, args=["--tls-cert", str(cert), "--tls-key", str(key), "--auth-file", str(accounts)])

    def clients(access_key: str, secret_key: str) -> dict[str, NativeClient]:
        return {n: NativeClient(g.endpoints, tls=True, ca_file=str(cert), access_key=access_key,
                                secret_key=secret_key, timeout_s=20) for n, g in cluster.groups.items()}

    shop, other = clients("shop-app", "s1"), clients("other-app", "s2")
    try:
        coordinator, participant = cluster.names()
        tx = CrossGroupTransaction(shop, producer_group=PRODUCER_GROUP,
                                   transaction_id=tx_id_coordinated_by(coordinator, cluster.names()))
        for name in cluster.names():
            tx.prepare(name, [Message(cluster.topics[name], f"secure-{name}".encode())])
        intruder = CrossGroupTransaction(other, producer_group=PRODUCER_GROUP, transaction_id=tx.transaction_id)
        with pytest.raises(errors.Forbidden):
            intruder.decide("ROLLBACK")  # not an owner of the producer group
        # the participant reaches the coordinator over TLS, signed as the replicas' admin account
        shop[participant].end_transaction(tx.transaction_id, "COMMIT", producer_group=PRODUCER_GROUP)
        assert tx.get_decision() == "COMMIT"
        assert tx.commit().decision == "COMMIT"
        with NativeClient(cluster.groups[participant].endpoints, tls=True, ca_file=str(cert), access_key="ops",
                          secret_key="ops-secret") as admin:
            assert Counter(topic_bodies(admin, cluster.topics[participant])) == Counter(
                {f"secure-{participant}".encode(): 1})
    finally:
        for c in (*shop.values(), *other.values()):
            c.close()


@pytest.mark.slow
def test_kill_9_of_a_random_group_at_a_random_step_always_ends_all_or_nothing_exactly_once(cluster_of):
    import random

    rng = random.Random(27)
    cluster = cluster_of(3)
    names = cluster.names()
    sessions = answer_checks(cluster, "ROLLBACK")  # a producer asked before any decision says ROLLBACK
    try:
        for _ in range(8):
            tx = cluster.transaction(rng.choice(names))
            sent = cluster.prepare_all(tx)
            step = rng.choice(["before the decision", "after the decision", "midway through the commits"])
            victim = rng.choice(names)
            if step != "before the decision":
                assert tx.decide("COMMIT") == "COMMIT"
            if step == "midway through the commits":
                tx.end_on(next(n for n in names if n != victim), "COMMIT")
            cluster.groups[victim].replicas[0].kill()
            cluster.groups[victim].replicas[0].restart()
            cluster.groups[victim].wait_leader()
            if step == "before the decision" and rng.random() < 0.5:
                try:  # the client's commit races the check-backs' ROLLBACK: whichever is recorded first wins
                    tx.commit()
                except errors.TransactionConflict:
                    pass
            wait_until(lambda: tx.get_decision() is not None, what=f"a decision ({step}, {victim} killed)")
            cluster.wait_all_or_nothing(sent, committed=tx.get_decision() == "COMMIT")
    finally:
        for s in sessions:
            s.close()


def test_an_unreachable_coordinator_is_given_up_on_quickly_for_a_while(tmp_path):
    """A check-back round over many transactions of one dead coordinator must not wait for each."""
    from txmq.broker.cluster.cross_tx import DOWN_HOLD_S, ClusterDecisions
    from txmq.broker.transaction import Resolution
    from txmq.broker.transaction.decision import CrossGroup

    class NoLeaders:
        asked = 0

        def leader_of(self, group):
            NoLeaders.asked += 1
            return None

    decisions = ClusterDecisions(engine=None, group="ga", leaders=NoLeaders(), channel_to=None,
                                 metadata=lambda: [], reach_timeout_s=0.3)
    cross = CrossGroup("gb", ("ga", "gb"))
    t0 = time.monotonic()
    with pytest.raises(errors.CoordinatorUnavailable):
        decisions.settle("t1", cross, Resolution.COMMIT)
    asked = NoLeaders.asked
    for i in range(20):
        with pytest.raises(errors.CoordinatorUnavailable):
            decisions.lookup(f"t{i}", cross)
    assert NoLeaders.asked == asked and time.monotonic() - t0 < 0.3 + DOWN_HOLD_S
