"""Queues that move between groups (docs/cluster.md, "Moving queues"): the queue keeps its name
and offsets, new writes go to the new group, the history is read where it lies. Real etcd, real
broker processes; producers run transactions through the move while a consumer reads cuts."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import Counter

import pytest

from txmq.broker import errors
from txmq.broker.cli import main as txmq_main
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.coordination import cluster_status
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

# queue moves through leader kills: make test-faults, not the default suite
pytestmark = [pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed (make etcd)"),
              pytest.mark.faults]

FAST = ["--transaction-timeout", "2s", "--check-interval", "1s"]


class Load:
    """A producer committing small transactions in a loop (what it acknowledged is recorded) and a
    consumer reading consistent cuts of the topic, recording (queue, offset, body)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: list[bytes] = []
        self.read: list[tuple[tuple[str, int], int, bytes]] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.position: dict[tuple[str, int], int] = {}
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> "Load":
        for t in self._threads:
            t.start()
        return self

    def _produce(self) -> None:
        with ClusterClient(self.bootstrap) as client:
            i = 0
            while not self.stop.is_set():
                bodies = [f"m-{i}-{k}".encode() for k in range(1 + i % 3)]
                try:
                    tx = client.prepare("", [Message(self.topic, b) for b in bodies], producer_group="movers")
                    client.end_transaction(tx.transaction_id, "COMMIT")
                except errors.TxmqError as exc:  # not acknowledged: may or may not be visible, never twice
                    self.errors.append(exc)
                    time.sleep(0.05)
                else:
                    self.acked.extend(bodies)
                i += 1

    def _consume(self) -> None:
        with ClusterClient(self.bootstrap) as client:
            while not self.stop.is_set():
                self.read_once(client)
                time.sleep(0.02)

    def read_once(self, client: ClusterClient) -> None:
        start = {self.topic: dict(self.position)}
        cut = client.consistent_cut([self.topic], start)[self.topic]
        for queue, end in sorted(cut.items()):
            begin = self.position.get(queue, 0)
            assert end >= begin, f"queue {queue} went back from {begin} to {end}"
            for r in client.read_queue(self.topic, queue, begin, end):
                offsets = r.batch.column("queueOffset").to_pylist()
                ids = set(r.batch.column("queueId").to_pylist())
                assert ids <= {queue[1]}, f"queue {queue} read rows of queues {ids}"
                for off, body in zip(offsets, r.batch.column("body").to_pylist()):
                    self.read.append((queue, off, body))
            self.position[queue] = end

    def finish(self, bootstrap: str) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(60)
        with ClusterClient(bootstrap) as client:
            self.read_once(client)

    def check_exactly_once_in_order(self) -> None:
        counts = Counter(body for _, _, body in self.read)
        twice = [b for b, n in counts.items() if n > 1]
        assert not twice, f"read twice: {twice[:5]}"
        missing = set(self.acked) - set(counts)
        assert not missing, f"{len(missing)} acknowledged messages never read, e.g. {sorted(missing)[:5]}"
        by_queue: dict[tuple[str, int], list[int]] = {}
        for queue, off, _ in self.read:
            by_queue.setdefault(queue, []).append(off)
        for queue, offsets in by_queue.items():
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), \
                f"queue {queue}: offsets not contiguous in order"


@pytest.fixture
def two_groups(tmp_path):
    etcd = EtcdProcess(tmp_path / "etcd").start()
    groups = []
    try:
        for name in ("a", "b"):
            groups.append(LocalGroup(tmp_path, etcd, name, replicas=1, args=["--replication", "async", *FAST]).start())
        yield groups
    finally:
        for g in groups:
            g.stop()
        etcd.kill()


def queue_on(client: ClusterClient, topic: str, group: str) -> tuple[str, int]:
    return next(q.key for q in client.queues(topic) if q.group == group)


def test_a_queue_moved_under_transactional_load_is_read_exactly_once_in_order(two_groups):
    a, b = two_groups
    with ClusterClient(a.endpoints) as client:
        client.create_topic("mv", 4)
        moving = queue_on(client, "mv", "a")
    load = Load(a.endpoints, "mv").start()
    time.sleep(1.5)
    with NativeClient(b.endpoints) as admin:
        result = admin.move_queues(topic="mv", queue=f"{moving[0]}:{moving[1]}", to="b")
        assert admin.stats()["moves"]["counts"]["done"] == 1
    assert [m["state"] for m in result["moves"]] == ["done"]
    base = result["moves"][0]["base"]
    status = cluster_status([("127.0.0.1", a.etcd.client_port)])
    assert [(m["queue"], m["on"], m["segments"][-1]["from_offset"]) for m in status["moved"]] == \
        [(f"{moving[0]}:{moving[1]}", "b", base)]
    time.sleep(1.5)
    load.finish(a.endpoints)
    load.check_exactly_once_in_order()
    with ClusterClient(a.endpoints) as client:
        q = next(q for q in client.queues("mv") if q.key == moving)
        assert q.current.group == "b" and q.current.base == base
        end = client.snapshot_offsets(["mv"])["mv"][moving]
    after = [off for queue, off, _ in load.read if queue == moving and off >= base]
    assert base > 0 and after, "the moved queue took no writes before or after the move"
    assert end == max(off for queue, off, _ in load.read if queue == moving) + 1


def test_a_move_completes_when_the_source_groups_leader_is_killed_while_it_waits_for_a_pending_transaction(tmp_path):
    etcd = EtcdProcess(tmp_path / "etcd").start()
    a = LocalGroup(tmp_path, etcd, "a", replicas=3, args=["--lease-ttl", "2s", *FAST]).start()
    b = LocalGroup(tmp_path, etcd, "b", replicas=1, args=["--replication", "async", *FAST]).start()
    try:
        with ClusterClient(a.endpoints) as client:
            client.create_topic("kill", 2)
            moving = queue_on(client, "kill", "a")
        load = Load(b.endpoints, "kill").start()
        with NativeClient(a.endpoints) as on_a:  # halves on a's only queue of the topic, left pending
            held = on_a.prepare("", [Message("kill", b"held-1"), Message("kill", b"held-2")], producer_group="movers")
        outcome: dict = {}

        def move() -> None:
            try:
                with NativeClient(b.endpoints) as admin:
                    outcome["result"] = admin.move_queues(topic="kill", queue=f"{moving[0]}:{moving[1]}", to="b",
                                                          wait_s=40)
            except errors.TxmqError as exc:
                outcome["error"] = exc

        mover = threading.Thread(target=move, daemon=True)
        mover.start()
        time.sleep(1.5)
        assert mover.is_alive(), f"the move did not wait for the pending transaction: {outcome}"
        old = a.wait_leader()
        a.replica(old.endpoint).kill()
        a.wait_leader(not_epoch=old.epoch)
        deadline = time.monotonic() + 30
        with NativeClient(a.endpoints) as on_a:
            while True:  # the new leader takes writes once a follower is in sync again
                try:
                    on_a.end_transaction(held.transaction_id, "COMMIT")
                    break
                except (errors.NotEnoughReplicas, errors.BrokerUnavailable, errors.NotLeader):
                    assert time.monotonic() < deadline, "the held transaction could not be committed"
                    time.sleep(0.3)
        load.acked.extend([b"held-1", b"held-2"])
        mover.join(90)
        assert not mover.is_alive(), "the move never ended"
        assert "error" not in outcome, outcome
        assert [m["state"] for m in outcome["result"]["moves"]] == ["done"]
        time.sleep(1.0)
        load.finish(b.endpoints)
        load.check_exactly_once_in_order()
        with ClusterClient(b.endpoints) as client:
            q = next(q for q in client.queues("kill") if q.key == moving)
            assert q.current.group == "b" and not q.sealing
        held_offsets = [off for queue, off, body in load.read if body.startswith(b"held-")]
        assert held_offsets and max(held_offsets) < q.current.base, "the held halves committed past the seal"
    finally:
        b.stop()
        a.stop()
        etcd.kill()


def test_a_drained_group_can_stop_for_good_while_the_topic_stays_writable_and_readable(tmp_path, capsys):
    etcd = EtcdProcess(tmp_path / "etcd").start()
    a, b = (LocalGroup(tmp_path, etcd, n, replicas=1, args=["--replication", "async", *FAST]).start() for n in "ab")
    try:
        with ClusterClient(b.endpoints) as client:
            client.create_topic("drained", 4)
            for i in range(20):
                client.send([Message("drained", f"before-{i}".encode())], topic="drained")
            before = client.snapshot_offsets(["drained"])["drained"]
            client.commit_offsets("readers", {"drained": before})
        broker = ["--broker", b.endpoints.split(";")[0]]
        assert txmq_main([*broker, "topic", "move", "drained", "--even", "--dry-run", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["moves"] == [], "2 queues on each of 2 groups is even"
        assert txmq_main([*broker, "group", "drain", "a", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["retired"] == "a"
        a.stop()
        assert txmq_main([*broker, "topic", "describe", "drained", "--json"]) == 0
        described = json.loads(capsys.readouterr().out)["queues"]
        assert {r.get("on", r["group"]) for r in described} == {"b"}
        assert sum(r["max_offset"] for r in described) == 20
        with ClusterClient(b.endpoints) as client:
            assert {q.current.group for q in client.queues("drained")} == {"b"}
            sent = Counter(client.send([Message("drained", f"after-{i}".encode())], topic="drained").group
                           for i in range(20))
            assert sent == Counter({"b": 20})
            assert all(client.transaction_group(f"tx-{i}") == "b" for i in range(50))
            tx = client.prepare("", [Message("drained", b"in-a-transaction")], producer_group="movers")
            client.end_transaction(tx.transaction_id, "COMMIT")
            start = client.committed_offsets("readers", ["drained"])["drained"]
            assert start == before, "the consumer group's offsets did not carry over"
            end = client.snapshot_offsets(["drained"])["drained"]
            bodies = [body for queue, stop in sorted(end.items())
                      for r in client.read_queue("drained", queue, start.get(queue, 0), stop)
                      for body in r.batch.column("body").to_pylist()]
        assert Counter(bodies) == Counter([f"after-{i}".encode() for i in range(20)] + [b"in-a-transaction"])
    finally:
        b.stop()
        a.stop()
        etcd.kill()


def test_a_move_whose_queue_keeps_a_pending_transaction_past_the_wait_rolls_back_and_the_queue_takes_writes_again(
        two_groups):
    a, b = two_groups
    with ClusterClient(a.endpoints) as client:
        client.create_topic("stuck", 2)
        moving = queue_on(client, "stuck", "a")
    with NativeClient(a.endpoints) as on_a:
        held = on_a.prepare("", [Message("stuck", b"held")], producer_group="movers")
        with NativeClient(b.endpoints) as admin, pytest.raises(errors.RequestTimeout, match="rolled back.*pending"):
            admin.move_queues(topic="stuck", queue=f"{moving[0]}:{moving[1]}", to="b", wait_s=1)
        assert on_a.send([Message("stuck", b"after")], topic="stuck").count == 1  # unsealed: it takes writes
        on_a.end_transaction(held.transaction_id, "COMMIT")
    with ClusterClient(a.endpoints) as client:
        q = next(q for q in client.queues("stuck") if q.key == moving)
        assert not q.moves and not q.sealing
        assert client.snapshot_offsets(["stuck"])["stuck"][moving] == 2


def test_the_official_clients_pop_offsets_carry_over_a_move_nothing_read_twice_or_skipped(two_groups):
    """A SimpleConsumer group that read the queue before the move goes on after it from where it
    was: the moved queue's new physical queue is popped from its start, not from the logical offset
    the move carried over (which counts the old group's messages too)."""
    from tests.interop.conftest import official_client_available, run_client

    if not official_client_available():
        pytest.skip("the official client's venv is missing (make interop-venv)")
    a, b = two_groups
    endpoint = a.replicas[0].endpoint
    with ClusterClient(a.endpoints) as client:
        client.create_topic("pops", 2)
        moving = queue_on(client, "pops", "a")
    sent = run_client(endpoint, "produce", "--topic", "pops", "--count", "20", "--prefix", "p", timeout=120)
    assert not sent["errors"], sent["errors"][:3]
    before = run_client(endpoint, "simple", "--topic", "pops", "--group", "readers", "--expect", "20",
                        "--timeout", "30", timeout=120)
    assert Counter(r["body"] for r in before["received"] if r.get("acked")) == \
        Counter({f"p-{i}": 1 for i in range(20)}), before["errors"][:3]
    with NativeClient(b.endpoints) as admin:
        result = admin.move_queues(topic="pops", queue=f"{moving[0]}:{moving[1]}", to="b")
    assert [m["state"] for m in result["moves"]] == ["done"] and result["moves"][0]["base"] > 0
    sent = run_client(endpoint, "produce", "--topic", "pops", "--count", "20", "--prefix", "q", timeout=120)
    assert not sent["errors"], sent["errors"][:3]
    with ClusterClient(a.endpoints) as client:
        q = next(q for q in client.queues("pops") if q.key == moving)
        assert client.snapshot_offsets(["pops"])["pops"][moving] > q.current.base, "the new queue took no sends"
    after = run_client(endpoint, "simple", "--topic", "pops", "--group", "readers", "--expect", "21",
                       "--timeout", "12", timeout=120)
    assert Counter(r["body"] for r in after["received"] if r.get("acked")) == \
        Counter({f"q-{i}": 1 for i in range(20)}), after["errors"][:3]


def test_a_timer_message_scheduled_before_a_move_is_delivered_once_into_the_queue_where_it_lives_now(two_groups):
    """Scheduled on the old group for the queue that then moves: when due it is put into the
    queue's new segment (the new group), where readers of the queue find it, not past the seal."""
    a, b = two_groups
    with ClusterClient(a.endpoints) as client:
        client.create_topic("timed", 2)
        moving = queue_on(client, "timed", "a")
    with NativeClient(a.endpoints) as on_a:  # group a's only queue of the topic is the one that moves
        on_a.send([Message("timed", b"before")], topic="timed")
        on_a.send([Message("timed", b"due-later", tag="t", keys=["k1"], properties={"p": "v"},
                           deliver_at_ms=int(time.time() * 1000) + 3000)], topic="timed")
    with NativeClient(b.endpoints) as admin:
        result = admin.move_queues(topic="timed", queue=f"{moving[0]}:{moving[1]}", to="b")
    base = result["moves"][0]["base"]
    assert [m["state"] for m in result["moves"]] == ["done"] and base == 1
    with ClusterClient(a.endpoints) as client:
        deadline = time.monotonic() + 30
        while client.snapshot_offsets(["timed"])["timed"][moving] < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # a second delivery, if any, would land meanwhile
        end = client.snapshot_offsets(["timed"])["timed"][moving]
        rows = [row for r in client.read_queue("timed", moving, 0, end) for row in r.batch.to_pylist()]
    assert [(row["queueOffset"], row["body"]) for row in rows] == [(0, b"before"), (1, b"due-later")]
    props = rows[1]["properties"]
    assert rows[1]["tag"] == "t" and dict(props).get("p") == "v", rows[1]
    with NativeClient(a.endpoints) as on_a:  # nothing past the seal on the old group
        assert on_a.describe_topic("timed").queues[moving[1]].max_offset == base


def test_a_reader_with_stale_routes_learns_of_a_move_from_the_old_groups_answer_not_its_route_refresh(two_groups):
    """The old group refuses the end of a queue that moved away (QueueMoved, naming the new group):
    the reader refreshes its routes at once and reads the new segment, long before its timer would."""
    a, b = two_groups
    with ClusterClient(a.endpoints) as admin:
        admin.create_topic("stale", 4)
        moving = queue_on(admin, "stale", "a")
    with ClusterClient(a.endpoints, route_ttl_s=60.0) as reader:
        assert reader.snapshot_offsets(["stale"])["stale"][moving] == 0  # the routes are cached from here on
        with NativeClient(b.endpoints) as mover:
            base = mover.move_queues(topic="stale", queue=f"{moving[0]}:{moving[1]}", to="b")["moves"][0]["base"]
        deadline = time.monotonic() + 10
        while True:  # a broker's own view of the layout may lag the move by its refresh (not the reader's)
            with ClusterClient(a.endpoints) as fresh:
                now = next(q.current for q in fresh.queues("stale") if q.key == moving)
            if now.group == "b" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert now.group == "b"
        landed = 0
        with NativeClient(b.endpoints) as writer:  # sharding keys spread over b's queues: 6 on the moved one
            for i in range(300):
                sent = writer.send([Message("stale", f"after-{i}".encode(), sharding_key=f"k{i}")], topic="stale")
                landed += sum(s.count for s in sent.slices if s.queue_id == now.queue_id)
                if landed == 6:
                    break
        end = base + 6
        started = time.monotonic()
        seen = reader.snapshot_offsets(["stale"])["stale"][moving]
        elapsed = time.monotonic() - started
        bodies = [body for r in reader.read_queue("stale", moving, base, seen) for body in r.batch.column("body").to_pylist()]
    assert seen == end, "the stale reader did not see the moved queue's new messages"
    assert len(bodies) == 6 and all(body.startswith(b"after-") for body in bodies)
    assert elapsed < 1.5, f"the reader took {elapsed:.2f} s to learn of the move (its routes refresh in 60 s)"


def test_the_old_groups_answer_for_a_moved_queue_names_its_new_group(two_groups):
    a, b = two_groups
    with ClusterClient(a.endpoints) as admin:
        admin.create_topic("named", 4)
        moving = queue_on(admin, "named", "a")
    with NativeClient(b.endpoints) as mover:
        mover.move_queues(topic="named", queue=f"{moving[0]}:{moving[1]}", to="b")
    with NativeClient(a.endpoints) as old:
        with pytest.raises(errors.QueueMoved) as refused:
            old.snapshot_offsets(["named"], current={"named": [moving[1]]})
        assert refused.value.moved_to == "b" and "moved to group b" in str(refused.value)
        assert moving[1] in old.snapshot_offsets(["named"])["named"], "a plain snapshot still answers the history's end"
