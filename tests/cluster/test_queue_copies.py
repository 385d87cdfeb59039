"""A moved queue's history copied into its new group, throttled (docs/cluster.md, "Copying the
history"): the copy keeps the queue's logical offsets, bodies, tags, keys, user properties and
message ids; it resumes after kill -9 of the target's leader without a record twice or missing;
it holds its byte rate; and a drained group, once safe to stop, is killed for good with its whole
history still read exactly once. Real etcd, real broker processes."""

from __future__ import annotations

import shutil
import time
from collections import Counter

import pytest

from tests.cluster.test_queue_moves import two_groups  # noqa: F401 - the fixture: two groups of one replica
from tests.interop.conftest import official_client_available, run_client
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.coordination import cluster_status
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

# queue copies through kill -9 of movers and leaders: make test-faults, not the default suite
pytestmark = [pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed (make etcd)"),
              pytest.mark.faults]

FAST = ["--transaction-timeout", "2s", "--check-interval", "1s", "--move-resume-after", "2s"]
ROW_FIELDS = ("queueOffset", "messageId", "tag", "keys", "body", "properties")


def queue_on(client: ClusterClient, topic: str, group: str) -> tuple[str, int]:
    return next(q.key for q in client.queues(topic) if q.group == group)


def rows_of(client: NativeClient, topic: str, queue_id: int, start: int, end: int) -> list[tuple]:
    return [tuple(sorted(row[f]) if f == "properties" else row[f] for f in ROW_FIELDS)
            for r in client.read_queue(topic, queue_id, start, end) for row in r.batch.to_pylist()]


def fill(group: LocalGroup, topic: str, count: int, *, body_bytes: int = 100, prefix: str = "h") -> None:
    """`count` messages with tags, keys, user properties and ids into `group`'s only queue of `topic`."""
    pad = b"x" * body_bytes
    with NativeClient(group.endpoints) as c:
        for start in range(0, count, 200):
            c.send([Message(topic, f"{prefix}-{i}-".encode() + pad, tag=f"t{i % 3}", keys=[f"k{i}"],
                            properties={"n": str(i)}, message_id=f"{prefix}-id-{i}")
                    for i in range(start, min(count, start + 200))], topic=topic)


def copy_of(client: ClusterClient, topic: str, queue: tuple[str, int]):
    """(the queue's layout entry, the copy segment that replaced its first segment, or None)."""
    q = next(q for q in client.routes([topic], refresh=True).queues(topic) if q.key == queue)
    first = q.segments[0]
    copies = [s for s in q.segments[1:] if s.base == first.base and s.group != first.group]
    return q, (copies[0] if copies else None)


def wait_copied(client: ClusterClient, topic: str, queue: tuple[str, int], timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        q, copy = copy_of(client, topic, queue)
        if copy is not None:
            return q, copy
        assert time.monotonic() < deadline, f"the history of {queue} was not copied within {timeout_s:g}s"
        time.sleep(0.3)


def test_a_moved_queues_history_is_copied_record_by_record_with_its_offsets_keys_and_message_ids(two_groups):
    a, b = two_groups
    with ClusterClient(a.endpoints) as client:
        client.create_topic("hist", 2)
        moving = queue_on(client, "hist", "a")
    fill(a, "hist", 500)
    with NativeClient(a.endpoints) as on_a:
        source = rows_of(on_a, "hist", moving[1], 0, 500)
    with NativeClient(b.endpoints) as admin:
        result = admin.move_queues(topic="hist", queue=f"{moving[0]}:{moving[1]}", to="b", rate=0)
    assert [m["state"] for m in result["moves"]] == ["done"] and result["moves"][0]["base"] == 500
    assert result["moves"][0]["copy"]["from"] == f"a:{moving[1]}" and result["copies_left"] == 0
    with ClusterClient(a.endpoints) as client:
        q, copy = wait_copied(client, "hist", moving)
        assert copy.group == "b" and copy.base == 0 and q.current.group == "b"
        with NativeClient(b.endpoints) as on_b:
            copied = rows_of(on_b, "hist", copy.queue_id, 0, 500)
        assert copied == source, "the copy differs from the source record by record"
        logical = [(row["queueOffset"], row["body"]) for r in client.read_queue("hist", moving, 0, 500)
                   for row in r.batch.to_pylist()]
    assert logical == [(off, body) for off, _, _, _, body, _ in source]
    status = cluster_status([("127.0.0.1", a.etcd.client_port)])
    done = [c for c in status["copies"] if c["queue"] == f"{moving[0]}:{moving[1]}"]
    assert done and done[0]["state"] == "done" and done[0]["copied"] == done[0]["total"] == 500


def read_all(consumer, expect: int, timeout_s: float = 30.0) -> list[bytes]:
    bodies: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(bodies) < expect and time.monotonic() < deadline:
        for batch in consumer.poll(500):
            bodies += batch.column("body").to_pylist()
    time.sleep(1.0)  # anything read twice would come meanwhile
    for batch in consumer.poll(500):
        bodies += batch.column("body").to_pylist()
    return bodies


def test_a_drained_group_killed_for_good_leaves_its_whole_history_read_exactly_once_from_the_earliest_offset(
        tmp_path, capsys):
    """Group a holds the history of two queues (one moved earlier keeping its history there, one
    written until the drain) and a timer message: the drain copies both histories to b, reports a
    safe to stop once the timer message is delivered, then a is killed with -9 and a new consumer
    group reads every message from the earliest offset, each once."""
    from txmq.broker.cli import main as txmq_main
    from txmq.broker.client import PullConsumer
    import json

    etcd = EtcdProcess(tmp_path / "etcd").start()
    a, b = (LocalGroup(tmp_path, etcd, n, replicas=1, args=["--replication", "async", *FAST]).start() for n in "ab")
    try:
        with ClusterClient(b.endpoints) as client:
            client.create_topic("gone", 4)
            on_a = [q.key for q in client.queues("gone") if q.group == "a"]
        with NativeClient(a.endpoints) as c:
            for i in range(200):
                c.send([Message("gone", f"old-{i}".encode(), keys=[f"k{i}"])], topic="gone")
            c.send([Message("gone", b"timed", deliver_at_ms=int(time.time() * 1000) + 4000)], topic="gone")
        with NativeClient(b.endpoints) as admin:  # an earlier move that left its history on a
            admin.move_queues(topic="gone", queue=f"{on_a[0][0]}:{on_a[0][1]}", to="b", keep_history=True)
        with ClusterClient(b.endpoints) as client:
            for i in range(100):
                client.send([Message("gone", f"mid-{i}".encode())], topic="gone")
        broker = ["--broker", b.endpoints.split(";")[0]]
        deadline = time.monotonic() + 60
        while True:  # the drain is repeated until the group is safe to stop (its timer message delivered)
            assert txmq_main([*broker, "group", "drain", "a", "--rate", "0", "--json"]) == 0
            drained = json.loads(capsys.readouterr().out)
            if drained["safe_to_stop"]:
                break
            assert time.monotonic() < deadline, drained
            assert all("timer" in r for r in drained["waiting_for"]), drained
            time.sleep(1.0)
        for p in a.replicas:
            p.kill()
        with ClusterClient(b.endpoints) as client:
            for i in range(50):
                client.send([Message("gone", f"new-{i}".encode())], topic="gone")
            for key in on_a:
                q = next(q for q in client.routes(["gone"], refresh=True).queues("gone") if q.key == key)
                assert all(s.group == "b" for s in q.segments[1:]), q
            with PullConsumer(client, ["gone"], group="late-readers", start="earliest") as consumer:
                bodies = read_all(consumer, 351)
        expected = [f"old-{i}".encode() for i in range(200)] + [f"mid-{i}".encode() for i in range(100)] + \
            [f"new-{i}".encode() for i in range(50)] + [b"timed"]
        counts = Counter(bodies)
        assert [b for b, n in counts.items() if n > 1] == [], "read twice"
        assert counts == Counter(expected), f"missing: {sorted(set(expected) - set(counts))[:5]}"
    finally:
        b.stop()
        a.stop()
        etcd.kill()


def test_a_copy_holds_its_byte_rate_and_shows_its_progress_in_cluster_status(two_groups):
    a, b = two_groups
    with ClusterClient(a.endpoints) as client:
        client.create_topic("slow", 2)
        moving = queue_on(client, "slow", "a")
    fill(a, "slow", 3000, body_bytes=1000)  # about 3 MB
    rate = 1 << 20
    with NativeClient(a.endpoints) as admin:
        result = admin.move_queues(topic="slow", queue=f"{moving[0]}:{moving[1]}", to="b", rate=rate, copy_wait_s=1.2)
    assert result["copies_left"] == 1, "a 3 MB copy at 1 MiB/s ended within a second"
    deadline = time.monotonic() + 10
    while True:  # the target's leader publishes its progress while it copies
        running = [c for c in cluster_status([("127.0.0.1", a.etcd.client_port)])["copies"]
                   if c["queue"] == f"{moving[0]}:{moving[1]}" and c["copied"]]
        if running or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert running and running[0]["state"] == "copying" and 0 < running[0]["copied"] < running[0]["total"] == 3000
    assert running[0]["rate_limit"] == rate and running[0]["total_bytes"] > 3_000_000
    with ClusterClient(a.endpoints) as client:
        wait_copied(client, "slow", moving)
    final = next(c for c in cluster_status([("127.0.0.1", a.etcd.client_port)])["copies"]
                 if c["queue"] == f"{moving[0]}:{moving[1]}")
    assert final["state"] == "done" and final["copied"] == 3000 and final["bytes"] > 3_000_000
    assert 0.8 * rate <= final["bytes_per_s"] <= 1.2 * rate, final


def test_a_copy_resumes_after_kill_9_of_the_target_leader_mid_copy_with_no_record_twice_or_missing(tmp_path):
    etcd = EtcdProcess(tmp_path / "etcd").start()
    a = LocalGroup(tmp_path, etcd, "a", replicas=1, args=["--replication", "async", *FAST]).start()
    b = LocalGroup(tmp_path, etcd, "b", replicas=3, args=["--lease-ttl", "2s", *FAST]).start()
    try:
        with ClusterClient(a.endpoints) as client:
            client.create_topic("resumed", 2)
            moving = queue_on(client, "resumed", "a")
        fill(a, "resumed", 2000, body_bytes=1000)
        with NativeClient(a.endpoints) as on_a:
            source = rows_of(on_a, "resumed", moving[1], 0, 2000)
        with NativeClient(a.endpoints) as admin:  # the mover runs on a: b's leader is killed meanwhile
            admin.move_queues(topic="resumed", queue=f"{moving[0]}:{moving[1]}", to="b", rate=400_000,
                              copy_wait_s=0)
        key = f"{moving[0]}:{moving[1]}"
        deadline = time.monotonic() + 20
        while True:  # kill the copier's broker once it has copied part of the history
            c = next((c for c in cluster_status([("127.0.0.1", etcd.client_port)])["copies"] if c["queue"] == key),
                     None)
            if c is not None and c["copied"] >= 400:
                break
            assert time.monotonic() < deadline, c
            time.sleep(0.2)
        assert c["copied"] < 2000, "the copy ended before its leader could be killed"
        old = b.wait_leader()
        b.replica(old.endpoint).kill()
        b.wait_leader(not_epoch=old.epoch)
        with ClusterClient(a.endpoints) as client:
            q, copy = wait_copied(client, "resumed", moving, timeout_s=60)
        with NativeClient(b.endpoints) as on_b:
            copied = rows_of(on_b, "resumed", copy.queue_id, 0, 2000)
            assert on_b.describe_topic("resumed").queues[copy.queue_id].max_offset == 2000
        assert copied == source, "the resumed copy differs from the source record by record"
        with ClusterClient(a.endpoints) as client:
            bodies = [body for r in client.read_queue("resumed", moving, 0, 2000)
                      for body in r.batch.column("body").to_pylist()]
        assert bodies == [row[4] for row in source]
    finally:
        b.stop()
        a.stop()
        etcd.kill()


def test_a_move_resumed_by_the_targets_leader_after_its_mover_was_killed_copies_at_the_movers_rate(tmp_path):
    """The mover (a broker of a third group) is killed -9 while the move waits for a pending
    transaction; once it commits, b's leader finishes the move and copies the history at the rate
    the mover was given, not the default."""
    import threading

    etcd = EtcdProcess(tmp_path / "etcd").start()
    a, b, m = (LocalGroup(tmp_path, etcd, n, replicas=1, args=["--replication", "async", *FAST]).start()
               for n in ("a", "b", "m"))
    try:
        with ClusterClient(a.endpoints) as client:
            client.create_topic("told", 3)
            moving = queue_on(client, "told", "a")
        fill(a, "told", 50)
        with NativeClient(a.endpoints) as on_a:  # halves on a's queue keep the move waiting
            held = on_a.prepare("", [Message("told", b"held")], producer_group="movers")
        rate = 123_456

        def move() -> None:
            try:
                with NativeClient(m.endpoints) as admin:
                    admin.move_queues(topic="told", queue=f"{moving[0]}:{moving[1]}", to="b", rate=rate, wait_s=40)
            except Exception:  # its broker is killed under it
                pass

        threading.Thread(target=move, daemon=True).start()
        key = f"{moving[0]}:{moving[1]}"
        deadline = time.monotonic() + 10
        while not any(q["queue"] == key for q in cluster_status([("127.0.0.1", etcd.client_port)])["moving"]):
            assert time.monotonic() < deadline, "the move never marked the queue"
            time.sleep(0.1)
        for p in m.replicas:
            p.kill()
        with NativeClient(a.endpoints) as on_a:
            on_a.end_transaction(held.transaction_id, "COMMIT")
        with ClusterClient(a.endpoints) as client:
            wait_copied(client, "told", moving, timeout_s=30)
        copies = [c for c in cluster_status([("127.0.0.1", etcd.client_port)])["copies"] if c["queue"] == key]
        assert copies and copies[0]["state"] == "done" and copies[0]["rate_limit"] == rate, copies
    finally:
        for g in (m, b, a):
            g.stop()
        etcd.kill()


def records_of(client: NativeClient, topic: str, queue_id: int, end: int) -> list:
    from txmq.broker.store.record import decode_record
    out, pos = [], 0
    while pos < end:
        r = client.pull_arrow(topic, queue_id, pos, end, records=True)
        out += [decode_record(raw) for raw in r.batch.column("record").to_pylist()]
        pos = r.next_offset
    return out


def test_a_copied_record_keeps_every_property_and_header_field_a_reader_sees_of_its_source(two_groups):
    """FIFO message groups, born host and time, flag, transaction markers of a committed
    transaction and arbitrary user properties: the copy's record holds them as its source does;
    only its store fields (offsets, store time and host) and the COMMIT's pointer to its half differ."""
    a, b = two_groups
    with ClusterClient(a.endpoints) as client:
        client.create_topic("full", 2)
        moving = queue_on(client, "full", "a")
    with NativeClient(a.endpoints) as c:
        c.send([Message("full", f"fifo-{i}".encode(), tag="t", keys=[f"k{i}", "x"], sharding_key=f"g{i % 2}",
                        properties={"n": str(i), "ünï": "välue with spaces", "e": ""},
                        message_id=f"full-{i}") for i in range(20)], topic="full")
        tx = c.prepare("", [Message("full", b"in-tx", sharding_key="gt", properties={"p": "1"})],
                       producer_group="copiers")
        c.end_transaction(tx.transaction_id, "COMMIT")
        source = records_of(c, "full", moving[1], 21)
    with NativeClient(b.endpoints) as admin:
        admin.move_queues(topic="full", queue=f"{moving[0]}:{moving[1]}", to="b", rate=0)
    with ClusterClient(a.endpoints) as client:
        _, copy = wait_copied(client, "full", moving, timeout_s=20)
    with NativeClient(b.endpoints) as c:
        copied = records_of(c, "full", copy.queue_id, 21)

    def seen(r):
        return (r.queue_offset, r.body, r.properties, r.flag, r.sys_flag & 0xC, r.born_timestamp, r.born_host,
                r.reconsume_times)

    assert [seen(r) for r in copied] == [seen(r) for r in source]
    assert source[-1].properties.get("__SHARDINGKEY") == "gt" and source[-1].prepared_transaction_offset > 0
    assert all(r.prepared_transaction_offset == 0 for r in copied), "a copy points at no half of its own log"


def test_a_segment_whose_start_retention_deleted_is_copied_from_its_first_retained_offset(tmp_path):
    """Retention on the source group (64 KiB segments, 2 s) deletes the start of the queue's log
    before the move; the copy begins at the queue's first retained offset: each retained message
    on the target at its own offset, nothing below it, nothing extra."""
    etcd = EtcdProcess(tmp_path / "etcd").start()
    a = LocalGroup(tmp_path, etcd, "a", replicas=1, args=["--replication", "async", *FAST,
                                                          "--segment-bytes", str(64 << 10), "--retention", "2s"])
    b = LocalGroup(tmp_path, etcd, "b", replicas=1, args=["--replication", "async", *FAST])
    try:
        a.start()
        b.start()
        with ClusterClient(a.endpoints) as client:
            client.create_topic("cut", 2)
            moving = queue_on(client, "cut", "a")
        fill(a, "cut", 600, body_bytes=400)  # about four segments
        with NativeClient(a.endpoints) as on_a:
            deadline = time.monotonic() + 30
            while (low := on_a.min_offsets(["cut"])["cut"].get(moving[1], 0)) == 0:
                assert time.monotonic() < deadline, "retention deleted nothing of the source's queue"
                time.sleep(0.3)
            time.sleep(3)  # every segment but the one being written is past retention now
            low = on_a.min_offsets(["cut"])["cut"][moving[1]]
            retained = rows_of(on_a, "cut", moving[1], low, 600)
        assert 0 < low < 600 and len(retained) == 600 - low
        with NativeClient(b.endpoints) as admin:
            result = admin.move_queues(topic="cut", queue=f"{moving[0]}:{moving[1]}", to="b", rate=0,
                                         copy_wait_s=30)
        assert [m["state"] for m in result["moves"]] == ["done"] and result["moves"][0]["base"] == 600
        with ClusterClient(a.endpoints) as client:
            _, copy = wait_copied(client, "cut", moving, timeout_s=30)
            with NativeClient(b.endpoints) as on_b:
                assert on_b.min_offsets(["cut"])["cut"][copy.queue_id] == low
                assert on_b.snapshot_offsets(["cut"])["cut"][copy.queue_id] == 600
                assert rows_of(on_b, "cut", copy.queue_id, low, 600) == retained
            assert client.min_offsets(["cut"])["cut"][moving] == low
            logical = [(row["queueOffset"], row["body"]) for r in client.read_queue("cut", moving, low, 600)
                       for row in r.batch.to_pylist()]
        assert logical == [(off, body) for off, _, _, _, body, _ in retained]
        time.sleep(2)  # its queue files flushed
        b.replicas[0].kill()  # the copy's queue begins at `low` after a restart too (its files, then recovery)
        b.replicas[0].start()
        b.wait_leader()
        with NativeClient(b.endpoints) as on_b:
            assert on_b.min_offsets(["cut"])["cut"][copy.queue_id] == low
            assert rows_of(on_b, "cut", copy.queue_id, low, 600) == retained
    finally:
        a.stop()
        b.stop()
        etcd.kill()


@pytest.mark.interop
@pytest.mark.skipif(not official_client_available(), reason="the official client's venv is missing (make interop-venv)")
def test_moved_messages_read_back_through_the_official_client_as_they_did_before_the_move(two_groups):
    """FIFO, DELAY, transactional and plain messages with tags, keys and user properties, sent by the
    official client and the native one: an official SimpleConsumer sees each message, field by field
    (message id, tag, keys, properties, message group and type, born host and time, delivery time),
    the same once its queue moved and its history was copied as before."""
    a, b = two_groups
    with ClusterClient(a.endpoints) as client:
        client.create_topic("fields", 1)  # the cluster's only queue of the topic: every message moves
        moving = queue_on(client, "fields", "a")
    sends = [("--message-group", "g1", "--prefix", "fifo"), ("--delay-s", "1", "--prefix", "delay"),
             ("--tag", "tg", "--numbered", "--prefix", "plain")]
    for args in sends:
        sent = run_client(a.leader_replica().endpoint, "produce", "--topic", "fields", "--count", "3", *args)
        assert len(sent["sent"]) == 3, sent["errors"]
    committed = run_client(a.leader_replica().endpoint, "transaction", "--topic", "fields", "--mode", "commit",
                           "--count", "2", "--prefix", "tx")
    assert len(committed["ended"]) == 2, committed["errors"]
    with NativeClient(a.endpoints) as c:
        c.send([Message("fields", f"native-{i}".encode(), tag="n", keys=[f"k{i}", "x"], sharding_key=f"s{i % 2}",
                        properties={"ünï": "välue with spaces", "e": ""}, message_id=f"native-id-{i}")
                for i in range(3)], topic="fields")
        deadline = time.monotonic() + 30  # the DELAY messages are due within 2 s
        while c.snapshot_offsets(["fields"])["fields"][moving[1]] < 14:
            assert time.monotonic() < deadline, "the DELAY messages were not delivered"
            time.sleep(0.3)

    def seen(endpoint: str, group: str) -> dict:
        got = run_client(endpoint, "simple", "--topic", "fields", "--group", group, "--expect", "14", timeout=120)
        views = {m["body"]: {k: v for k, v in m.items() if k not in ("receipt_handle", "attempt", "acked")}
                 for m in got["received"]}
        assert len(views) == 14, (sorted(views), got["errors"][:3])
        return views

    before = seen(a.leader_replica().endpoint, "before")
    with NativeClient(b.endpoints) as admin:
        admin.move_queues(topic="fields", queue=f"{moving[0]}:{moving[1]}", to="b", rate=0, copy_wait_s=30)
    with ClusterClient(a.endpoints) as client:
        wait_copied(client, "fields", moving, timeout_s=30)
    after = seen(b.leader_replica().endpoint, "after")
    assert before["fifo-0"]["message_group"] == "g1" and before["delay-0"]["delivery_timestamp"]
    assert before["native-0"]["message_group"] == "s0" and before["tx-0"]["message_type"] == after["tx-0"]["message_type"]
    for body in sorted(before):
        assert after[body] == before[body], body
