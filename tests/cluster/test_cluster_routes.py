"""A cluster of broker groups: topics spread over groups through the route registry in etcd,
routes from any broker, the native client's choice of group, the official client from one
bootstrap endpoint (real etcd, real broker processes, one replica per group to stay quick)."""

from __future__ import annotations

import shutil
import time
from collections import Counter

import pytest

from txmq.broker import errors
from tests.spark.support import topic_bodies
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed (make etcd)")

FAST_CHECKS = ["--transaction-timeout", "1s", "--check-interval", "1s"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """etcd of its own and three groups of one replica each."""
    root = tmp_path_factory.mktemp("cluster")
    etcd = EtcdProcess(root / "etcd").start()
    groups = []
    try:
        for name in ("g1", "g2", "g3"):
            groups.append(LocalGroup(root, etcd, name, replicas=1, args=["--replication", "async", *FAST_CHECKS]).start())
        yield groups
    finally:
        for g in groups:
            g.stop()
        etcd.kill()


def cluster_bodies(client: ClusterClient, topic: str) -> Counter:
    return Counter(topic_bodies(client, topic))


def test_a_topic_created_through_one_broker_spreads_its_queues_over_every_group(cluster):
    with ClusterClient(cluster[1].endpoints) as client:
        queues = client.create_topic("spread", 7)
    order = [q.group for q in queues]
    assert sorted(order[:3]) == ["g1", "g2", "g3"] and order[3:] == order[:3] + order[:1], "not round-robin"
    assert [q.queue_id for q in queues] == [0, 0, 0, 1, 1, 1, 2]
    for g in cluster:
        with NativeClient(g.endpoints) as c:
            assert c.describe_topic("spread").queue_count == order.count(g.name)


def test_any_broker_answers_the_same_routes_with_each_groups_leader(cluster):
    with ClusterClient(cluster[0].endpoints) as client:
        client.create_topic("routes", 3)
    answers = []
    for g in cluster:
        with NativeClient(g.endpoints) as c:
            routes = c.routes(["routes"])
        answers.append((routes.topics["routes"], routes.leaders))
    assert all(a == answers[0] for a in answers)
    assert answers[0][1] == {g.name: g.wait_leader().endpoint for g in cluster}


def test_the_native_client_spreads_sends_over_the_groups_and_reads_each_once(cluster):
    with ClusterClient(cluster[2].endpoints) as client:
        client.create_topic("orders", 6)
        groups = Counter()
        for i in range(60):
            summary = client.send([Message("orders", f"o-{i}".encode())], topic="orders")
            groups[summary.group] += 1
        assert groups == Counter({"g1": 20, "g2": 20, "g3": 20})
        seen = cluster_bodies(client, "orders")
    assert seen == Counter({f"o-{i}".encode(): 1 for i in range(60)})


def test_growing_a_cluster_topic_keeps_every_queue_in_its_group(cluster):
    with ClusterClient(cluster[0].endpoints) as client:
        before = client.create_topic("grows", 3)
        after = client.create_topic("grows", 5)
        assert after[:3] == before
        with pytest.raises(errors.IllegalQueue, match="cannot shrink"):
            client.create_topic("grows", 2)


def test_a_topic_of_one_broker_routes_as_a_single_unnamed_group(tmp_path):
    from txmq.broker.embedded import EmbeddedBroker

    with EmbeddedBroker(tmp_path / "single") as broker, ClusterClient(broker.endpoint) as client:
        client.create_topic("alone", 2)
        assert [(q.group, q.queue_id) for q in client.queues("alone")] == [("", 0), ("", 1)]
        assert client.send([Message("alone", b"x")], topic="alone").group == ""
        assert cluster_bodies(client, "alone") == Counter({b"x": 1})


def test_sends_avoid_a_group_that_is_down_and_its_queues_leave_the_routes(tmp_path):
    etcd = EtcdProcess(tmp_path / "etcd").start()
    groups = [LocalGroup(tmp_path, etcd, name, replicas=1, args=["--lease-ttl", "1s", "--replication", "async"]).start()
              for name in ("a", "b")]
    try:
        with ClusterClient(groups[0].endpoints) as client:
            client.create_topic("failing", 4)
            groups[1].replicas[0].kill()
            sent = Counter()
            for i in range(20):
                sent[client.send([Message("failing", f"f-{i}".encode())], topic="failing").group] += 1
            assert sent == Counter({"a": 20})
            deadline = time.monotonic() + 10
            while {q.group for q in client.queues("failing")} and client.routes(refresh=True).leaders.get("b"):
                assert time.monotonic() < deadline, "the dead group's leader never left the routes"
                time.sleep(0.2)
    finally:
        for g in groups:
            g.stop()
        etcd.kill()


def test_the_official_client_spreads_over_groups_from_one_bootstrap_endpoint_and_consumes_each_once(cluster):
    from tests.interop.conftest import official_client_available, run_client

    if not official_client_available():
        pytest.skip("the official client's venv is missing (make interop-venv)")
    with ClusterClient(cluster[0].endpoints) as client:
        client.create_topic("official-spread", 6)
        sent = run_client(cluster[0].replicas[0].endpoint, "produce", "--topic", "official-spread",
                          "--count", "60", "--prefix", "s", timeout=120)
        assert not sent["errors"], sent["errors"][:3]
        stored = cluster_bodies(client, "official-spread")
    assert stored == Counter({f"s-{i}".encode(): 1 for i in range(60)})
    per_group = Counter()
    for g in cluster:
        with NativeClient(g.endpoints) as c:
            per_group[g.name] = sum(q.max_offset for q in c.describe_topic("official-spread").queues.values())
    assert all(per_group[g.name] > 0 for g in cluster), f"a group took no sends: {per_group}"
    got = run_client(cluster[0].replicas[0].endpoint, "simple", "--topic", "official-spread", "--group", "readers",
                     "--expect", "60", "--timeout", "60", timeout=120)
    acked = Counter(r["body"] for r in got["received"] if r.get("acked"))
    assert acked == Counter({f"s-{i}": 1 for i in range(60)}), got["errors"][:3]


def test_the_cli_creates_a_cluster_topic_and_describes_each_queue_with_its_group_and_leader(cluster):
    import json
    import subprocess
    import sys

    def txmq(*args: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "txmq.broker.cli", "--broker", cluster[2].endpoints, *args,
                              "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    txmq("topic", "create", "cli-spread", "--queues", "4")
    data = txmq("topic", "describe", "cli-spread")
    leaders = {g.name: g.wait_leader().endpoint for g in cluster}
    rows = [(q["queue_id"], q["group"], q["leader"]) for q in data["queues"]]
    assert [r[0] for r in rows] == [0, 0, 0, 1] and sorted(r[1] for r in rows[:3]) == ["g1", "g2", "g3"]
    assert rows[3][1] == rows[0][1] and all(leader == leaders[group] for _, group, leader in rows)


def test_the_cli_sets_a_fifo_consumer_group_on_every_group_of_the_cluster(cluster):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "txmq.broker.cli", "--broker", cluster[0].endpoints, "group", "create",
                          "cluster-ordered", "--fifo", "--retry-max-times", "2"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for g in cluster:
        with NativeClient(g.endpoints) as c:
            settings = c.describe_consumer_group("cluster-ordered")
        assert (settings.fifo, settings.retry_max_times) == (True, 2), g.name


def test_any_broker_lists_a_groups_members_with_the_queues_each_holds_from_etcd(cluster):
    from tests.client.test_pull_consumer import _join
    from txmq.broker.client import PullConsumer

    with ClusterClient(cluster[0].endpoints) as c0, ClusterClient(cluster[1].endpoints) as c1:
        c0.create_topic("listed", 4)
        a = PullConsumer(c0, ["listed"], group="listed-readers", allocation="average", member_id="a",
                         heartbeat_ttl_ms=3000)
        b = PullConsumer(c1, ["listed"], group="listed-readers", allocation="average", member_id="b",
                         heartbeat_ttl_ms=3000)
        _join(a, b)
        for client in (c0, c1):  # a heartbeats to c0's broker, b to c1's: etcd holds both
            held = {m.client_id: {(g, q) for _, g, q in m.queues} for m in client.list_group_members("listed-readers")}
            assert held == {"a": a.assigned["listed"], "b": b.assigned["listed"]}
        for g in cluster:  # a group with live members only is listed by every broker (the console's index)
            with NativeClient(g.endpoints) as c:
                assert "listed-readers" in {x.name for x in c.list_consumer_groups()}, g.name
        a.close()
        b.close()


def test_consumers_of_a_group_divide_a_cluster_topics_queues_through_etcd(cluster):
    from tests.client.test_pull_consumer import _join
    from txmq.broker.client import PullConsumer

    with ClusterClient(cluster[0].endpoints) as c0, ClusterClient(cluster[1].endpoints) as c1:
        c0.create_topic("shared", 6)
        a = PullConsumer(c0, ["shared"], group="readers", allocation="consistent_hash", member_id="a",
                         heartbeat_ttl_ms=300)
        b = PullConsumer(c1, ["shared"], group="readers", allocation="consistent_hash", member_id="b",
                         heartbeat_ttl_ms=300)
        _join(a, b)
        assert a.assigned["shared"].isdisjoint(b.assigned["shared"])
        assert a.assigned["shared"] | b.assigned["shared"] == {(q.group, q.queue_id) for q in c0.queues("shared")}
        for i in range(30):
            c0.send([Message("shared", f"s-{i}".encode())], topic="shared")
        got = Counter()
        deadline = time.monotonic() + 20
        while sum(got.values()) < 30 and time.monotonic() < deadline:
            for consumer in (a, b):
                for batch in consumer.poll(timeout_ms=200):
                    got.update(batch.column("body").to_pylist())
        assert got == Counter({f"s-{i}".encode(): 1 for i in range(30)})
        a.close()
        b.close()


def test_a_transaction_producer_over_the_cluster_commits_on_every_group_and_check_back_finds_its_halves(cluster):
    from txmq.broker.client import LocalTransactionState, TransactionProducer

    class Listener:
        def execute_local_transaction(self, message, arg):
            return LocalTransactionState.UNKNOWN if arg % 3 == 0 else LocalTransactionState.COMMIT

        def check_local_transaction(self, message):
            return LocalTransactionState.COMMIT

    with ClusterClient(cluster[1].endpoints) as client:
        client.create_topic("cluster-tx", 6)
        used = Counter()
        with TransactionProducer(client, "cluster-shop", Listener(), topics=["cluster-tx"]) as producer:
            for i in range(30):
                result = producer.send_message_in_transaction(Message("cluster-tx", f"t-{i}".encode()), i)
                used[client.transaction_group(result.transaction_id)] += 1
            deadline = time.monotonic() + 30
            while client.list_transactions(state="PENDING"):
                assert time.monotonic() < deadline, "check-back left transactions pending"
                time.sleep(0.3)
        assert set(used) == {"g1", "g2", "g3"}
        assert cluster_bodies(client, "cluster-tx") == Counter({f"t-{i}".encode(): 1 for i in range(30)})


def test_the_official_client_commits_transactions_on_every_group_from_one_bootstrap_endpoint(cluster):
    from tests.interop.conftest import official_client_available, run_client

    if not official_client_available():
        pytest.skip("the official client's venv is missing (make interop-venv)")
    with ClusterClient(cluster[0].endpoints) as client:
        client.create_topic("official-tx-spread", 6)
        result = run_client(cluster[2].replicas[0].endpoint, "transaction", "--topic", "official-tx-spread",
                            "--mode", "commit", "--count", "30", "--prefix", "x", timeout=120)
        assert not result["errors"], result["errors"][:3]
        stored = cluster_bodies(client, "official-tx-spread")
    assert stored == Counter({f"x-{i}".encode(): 1 for i in range(30)})


def test_a_transaction_producer_sending_to_topics_on_two_groups_commits_both_or_neither(cluster):
    from txmq.broker.client import LocalTransactionState, TransactionProducer

    with ClusterClient(cluster[0].endpoints) as client:
        homes = {}
        for i in range(12):  # one-queue topics until two sit on different groups
            name = f"pair-{i}"
            homes[name] = client.create_topic(name, 1)[0].group
            if len(set(homes.values())) > 1:
                break
        first = next(iter(homes))
        second = next(t for t, g in homes.items() if g != homes[first])

        class Listener:
            def execute_local_transaction(self, message, arg):
                return arg

            def check_local_transaction(self, message):
                return LocalTransactionState.COMMIT

        outcomes = [LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN]
        with TransactionProducer(client, "pairs", Listener(), topics=[first, second]) as producer:
            results = [producer.send_messages_in_transaction(
                [Message(first, f"a-{n}".encode()), Message(second, f"b-{n}".encode())], outcome)
                for n, outcome in enumerate(outcomes)]
            deadline = time.monotonic() + 30
            while client.list_transactions(state="PENDING"):
                assert time.monotonic() < deadline, "check-back left the cross-group transaction pending"
                time.sleep(0.3)
        assert [r.state for r in results] == ["COMMITTED", "ROLLED_BACK", "PENDING"]
        assert cluster_bodies(client, first) == Counter({b"a-0": 1, b"a-2": 1})
        assert cluster_bodies(client, second) == Counter({b"b-0": 1, b"b-2": 1})
