"""A cluster-wide consistent cut (client/cluster_cut.py): a transaction across groups that one
group has applied and another not yet is read on neither; once both hold it, the next cut
holds it whole (real etcd, two real broker groups)."""

from __future__ import annotations

import shutil

import pytest

from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.cross_group import CrossGroupTransaction
from txmq.broker.client.types import Message
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed (make etcd)")

TOPIC = "cut"
# check-back must not settle the half-applied transactions while a test looks at them
SLOW_CHECKS = ["--replication", "async", "--transaction-timeout", "120s", "--check-interval", "60s"]


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    root = tmp_path_factory.mktemp("cut")
    etcd = EtcdProcess(root / "etcd").start()
    made = []
    try:
        for name in ("c1", "c2"):
            made.append(LocalGroup(root, etcd, name, replicas=1, args=SLOW_CHECKS).start())
        with ClusterClient(made[0].endpoints) as client:
            client.create_topic(TOPIC, 4)
        yield made
    finally:
        for g in made:
            g.stop()
        etcd.kill()


def bodies_between(client: ClusterClient, start: dict, end: dict) -> set[bytes]:
    out = set()
    for key, stop in end[TOPIC].items():
        begin = start.get(TOPIC, {}).get(key, 0)
        if stop > begin:
            for r in client.read_queue(TOPIC, key, begin, stop):
                out.update(r.batch.column("body").to_pylist())
    return out


def half_applied(client: ClusterClient, tag: str) -> CrossGroupTransaction:
    """A transaction with halves on both groups, decided COMMIT and applied on c1 only."""
    tx = CrossGroupTransaction({g: client.group(g) for g in ("c1", "c2")}, producer_group="shop")
    for g in ("c1", "c2"):
        tx.prepare(g, [Message(TOPIC, f"{tag}-{g}-{i}".encode()) for i in range(3)])
    tx.decide("COMMIT")
    tx.end_on("c1", "COMMIT")
    return tx


def send_to(client: ClusterClient, group: str, body: bytes) -> None:
    client.group(group).send([Message(TOPIC, body)], topic=TOPIC)


def test_a_transaction_applied_on_one_group_only_is_read_on_neither_until_both_hold_it(groups):
    with ClusterClient(groups[0].endpoints) as client:
        start = client.snapshot_offsets([TOPIC])
        for g in ("c1", "c2"):
            send_to(client, g, f"before-{g}".encode())
        tx = half_applied(client, "t1")
        for g in ("c1", "c2"):
            send_to(client, g, f"after-{g}".encode())

        snapshot = client.snapshot_offsets([TOPIC])
        assert b"t1-c1-0" in bodies_between(client, start, snapshot), "the groups' own snapshots hold it on c1"
        cut = client.consistent_cut([TOPIC], start, snapshot)
        read = bodies_between(client, start, cut)
        assert not any(b.startswith(b"t1-") for b in read)
        # c1 goes back to just before the transaction; c2 keeps all it had
        assert read == {b"before-c1", b"before-c2", b"after-c2"}

        tx.end_on("c2", "COMMIT")
        after = client.consistent_cut([TOPIC], cut, None)
        read2 = bodies_between(client, cut, after)
        assert {f"t1-{g}-{i}".encode() for g in ("c1", "c2") for i in range(3)} <= read2
        assert b"after-c1" in read2 and not read2 & read


def test_a_cut_with_no_transaction_across_groups_is_the_groups_snapshot(groups):
    with ClusterClient(groups[1].endpoints) as client:
        start = client.snapshot_offsets([TOPIC])
        for g in ("c1", "c2"):
            send_to(client, g, f"plain-{g}".encode())
        snapshot = client.snapshot_offsets([TOPIC])
        assert client.consistent_cut([TOPIC], start, snapshot) == snapshot


def test_a_group_restarted_since_it_applied_a_half_applied_transaction_holds_its_range_back(groups):
    with ClusterClient(groups[0].endpoints) as client:
        start = client.snapshot_offsets([TOPIC])
        tx = half_applied(client, "t2")
    c1 = groups[0].replicas[0]
    c1.stop()
    c1.start()
    groups[0].wait_leader()
    with ClusterClient(groups[1].endpoints) as client:
        send_to(client, "c2", b"later-c2")
        snapshot = client.snapshot_offsets([TOPIC])
        cut = client.consistent_cut([TOPIC], start, snapshot)
        assert {k: v for k, v in cut[TOPIC].items() if k[0] == "c1"} == \
            {k: v for k, v in start[TOPIC].items() if k[0] == "c1"}, "c1 cannot tell where the transaction began"
        assert b"later-c2" in bodies_between(client, start, cut)
        tx.clients = {g: client.group(g) for g in ("c1", "c2")}
        tx.end_on("c2", "COMMIT")
        whole = client.consistent_cut([TOPIC], start, None)
        read = bodies_between(client, start, whole)
        assert {f"t2-{g}-{i}".encode() for g in ("c1", "c2") for i in range(3)} <= read


def test_a_window_beyond_a_queue_is_refused_naming_the_queues_end_and_the_broker_keeps_serving(groups):
    from txmq.broker import errors

    with ClusterClient(groups[0].endpoints) as client:
        c1 = client.group("c1")
        end = c1.snapshot_offsets([TOPIC])[TOPIC][0]
        with pytest.raises(errors.IllegalOffset, match=f"within the queue \\[0, {end}\\)"):
            c1.cross_group_commits([(TOPIC, 0, 0, end + 5)])
        assert c1.cut_before([TOPIC], "no-such-topic", 0, 0) is None
        assert c1.cross_group_commits([(TOPIC, 0, 0, end)])[1] == {}
