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

from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.coordination import cluster_status
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed (make etcd)")

FAST = ["--transaction-timeout", "2s", "--check-interval", "1s"]
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
