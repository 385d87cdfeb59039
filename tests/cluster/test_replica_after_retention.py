"""Any replica can be replaced whatever retention has deleted (DESIGN.md invariant 12): a new,
empty replica whose leader's log no longer starts at 0 starts its own log at the leader's log
start (Kafka's truncateFullyAndStartAt), catches up, joins the in-sync set, and can lead with
every retained message and every pending transaction."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.local_group import LocalGroup

# a replica replaced after retention, through failovers: make test-faults, not the default suite
pytestmark = pytest.mark.faults

TOPIC = "kept"
SEGMENT = 64 << 10
TIMER_DELAY_S = 12


def retained_bodies(client: NativeClient, topic: str) -> Counter:
    """Every visible body of `topic` from each queue's first retained offset."""
    low = client.min_offsets([topic])[topic]
    out: Counter = Counter()
    for q, end in client.snapshot_offsets([topic])[topic].items():
        for r in client.read_queue(topic, q, low.get(q, 0), end):
            out.update(r.batch.column("body").to_pylist())
    return out


def log_start(replica) -> int:
    """Where a replica's CommitLog starts now (its oldest segment's name)."""
    return min(int(p.name) for p in (replica.data_dir / "commitlog").iterdir() if p.name.isdigit())


@pytest.fixture
def group(tmp_path, etcd):
    etcd.clear()
    g = LocalGroup(tmp_path, etcd, "retained", replicas=3, args=[
        "--segment-bytes", str(SEGMENT), "--retention", "2s", "--min-insync", "0",
        "--transaction-timeout", "60s"])
    yield g
    g.stop()


def test_a_new_replica_joins_once_retention_ran_and_leads_with_every_retained_write(group):
    old, other, new = group.replicas
    old.start()
    group.wait_leader()
    other.start()
    group.wait_in_sync(2)
    with NativeClient(old.endpoint, timeout_s=20) as client:
        client.create_topic(TOPIC, 1)
        early = client.prepare("", [Message(TOPIC, b"early tx")]).transaction_id
        client.end_transaction(early, "COMMIT")
        for i in range(0, 240, 40):  # about four segments
            client.send([Message(TOPIC, f"a{j}".encode() * 100) for j in range(i, i + 40)])
        deadline = time.monotonic() + 20
        while log_start(old) == 0:
            assert time.monotonic() < deadline, "retention never deleted a segment"
            time.sleep(0.2)
        # what follows goes to a new segment, the last, which retention keeps
        end = group.wait_same_log_end()
        client.send([Message("filler", b"f" * (SEGMENT - end % SEGMENT))])
        client.send([Message(TOPIC, b"late")])
        late = client.prepare("", [Message(TOPIC, b"late tx 1"), Message(TOPIC, b"late tx 2")]).transaction_id
        client.end_transaction(late, "COMMIT")
        pending = client.prepare("", [Message(TOPIC, b"pending tx")]).transaction_id
        due_ms = int(time.time() * 1000) + TIMER_DELAY_S * 1000  # delivered once the new replica leads
        client.send([Message(TOPIC, b"timer", deliver_at_ms=due_ms)])
        kept = retained_bodies(client, TOPIC)
    assert kept[b"late"] == kept[b"late tx 1"] == kept[b"late tx 2"] == 1
    assert kept[b"early tx"] == 0, "retention kept the first segment"

    new.start()  # an empty data directory
    group.wait_in_sync(3, timeout_s=30)
    group.wait_same_log_end()
    epoch = group.wait_leader().epoch
    old.kill()
    other.kill()
    leader = group.wait_leader(not_epoch=epoch, timeout_s=30)
    assert leader.endpoint == new.endpoint
    with NativeClient(new.endpoint, timeout_s=20) as client:
        readable = retained_bodies(client, TOPIC)
        readable.pop(b"timer", None)  # it may be due already
        # its own retention may have deleted more old segments since: never the last one
        assert readable[b"late"] == readable[b"late tx 1"] == readable[b"late tx 2"] == 1
        assert not readable - kept, "the new leader shows what the old one did not"
        kept_a = sorted(int(b[1:b.index(b"a", 1)]) for b in readable if b.startswith(b"a"))
        assert kept_a == list(range(kept_a[0], 240)) if kept_a else True, "a retained message is missing"
        assert client.get_transaction(pending).state == "PENDING"
        client.end_transaction(pending, "COMMIT")
        assert retained_bodies(client, TOPIC)[b"pending tx"] == 1
        assert group.wait_leader().endpoint == new.endpoint  # still: the timer below is the new leader's
        deadline = time.monotonic() + TIMER_DELAY_S + 15
        while (delivered := retained_bodies(client, TOPIC)[b"timer"]) == 0:
            assert time.monotonic() < deadline, "the scheduled message was never delivered"
            time.sleep(0.2)
        assert delivered == 1
