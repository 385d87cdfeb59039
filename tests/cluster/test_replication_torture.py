"""Torture (make torture): a sync group under transactional and plain load while, round after round,
a random fault hits it: kill -9 of the leader or of a follower, the leader paused past its lease,
etcd killed and brought back. Afterwards every invariant of DESIGN.md is checked on what the
group serves."""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest

from tests.cluster.test_replication import read_bodies
from txmq.broker import errors
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message

pytestmark = pytest.mark.torture

ROUNDS = int(os.environ.get("TXMQ_TORTURE_ROUNDS", "50"))
TOPIC = "torture"


class Transactions:
    """Transactions of 5 messages, committed or rolled back at random; remembers what was acknowledged."""

    def __init__(self, client: NativeClient) -> None:
        self.client = client
        self.members: dict[str, list[bytes]] = {}  # transaction id -> its bodies
        self.committed: set[str] = set()
        self.rolled_back: set[str] = set()
        self.plain_acked: list[bytes] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._transactions, daemon=True),
                         threading.Thread(target=self._plain, daemon=True)]

    def _transactions(self) -> None:
        k = 0
        while not self._stop.is_set():
            k += 1
            bodies = [b"tx%d-%d" % (k, j) for j in range(5)]
            try:
                tx = self.client.prepare("", [Message(TOPIC, b) for b in bodies]).transaction_id
            except errors.TxmqError:
                time.sleep(0.05)
                continue
            self.members[tx] = bodies
            resolution = random.choice(("COMMIT", "ROLLBACK"))
            try:
                self.client.end_transaction(tx, resolution)
                (self.committed if resolution == "COMMIT" else self.rolled_back).add(tx)
            except errors.TxmqError:
                time.sleep(0.05)  # left to the end of the run: resolved then

    def _plain(self) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            body = b"p%d" % i
            try:
                self.client.send([Message(TOPIC, body)], return_message_ids=False)
                self.plain_acked.append(body)
            except errors.TxmqError:
                time.sleep(0.05)

    def __enter__(self) -> "Transactions":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)


def fault(group, etcd, rng: random.Random) -> str:
    kind = rng.choice(("kill leader", "kill follower", "pause leader", "kill etcd"))
    if kind == "kill etcd":
        etcd.kill()
        time.sleep(rng.uniform(0.5, 3.0))
        etcd.start()
        return kind
    leader = group.wait_leader(timeout_s=60)
    if kind == "kill follower":
        victim = group.replica(rng.choice([r.endpoint for r in group.replicas if r.endpoint != leader.endpoint]))
    else:
        victim = group.replica(leader.endpoint)
    if kind == "pause leader":
        victim.pause()
        time.sleep(rng.uniform(2.5, 4.0))  # past its 2 s lease
        victim.resume()
        return kind
    victim.kill()
    time.sleep(rng.uniform(0.2, 2.0))
    victim.restart()
    return kind


def test_a_group_keeps_every_invariant_through_random_faults(group_factory, etcd):
    rng = random.Random(int(os.environ.get("TXMQ_TORTURE_SEED", time.time())))
    group = group_factory(args=["--replication", "sync"])
    faults: Counter = Counter()
    with NativeClient(group.endpoints, timeout_s=20) as client:
        client.create_topic(TOPIC, 4)
        with Transactions(client) as load:
            for _ in range(ROUNDS):
                faults[fault(group, etcd, rng)] += 1
                group.wait_leader(timeout_s=60)
                group.wait_in_sync(3, timeout_s=60)
                time.sleep(rng.uniform(0.2, 1.0))
        for tx in client.list_transactions(state="PENDING", limit=100000):  # left pending by faults
            client.end_transaction(tx.transaction_id, "COMMIT")
            load.committed.add(tx.transaction_id)
        seen = read_bodies(client, TOPIC)
    assert sum(faults.values()) == ROUNDS
    assert max(seen.values(), default=1) == 1, "a message is visible twice"
    assert all(seen[b] == 1 for b in load.plain_acked), "an acknowledged send was lost"
    for tx, bodies in load.members.items():
        visible = sum(seen[b] for b in bodies)
        assert visible in (0, len(bodies)), f"transaction {tx} is partly visible"
        if tx in load.committed:
            assert visible == len(bodies), f"committed transaction {tx} is not visible"
        if tx in load.rolled_back:
            assert visible == 0, f"rolled-back transaction {tx} is visible"
    print(f"faults: {dict(faults)}; transactions {len(load.members)} (committed {len(load.committed)}, rolled back "
          f"{len(load.rolled_back)}); plain sends acknowledged {len(load.plain_acked)}")
