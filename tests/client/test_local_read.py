"""Same-host reads (opt-in): a read is answered with where the records are and the client decodes
them from the CommitLog segment itself (client/local_read.py).

Every test compares with what the broker builds itself (a client without same-host reads),
against a real broker process."""

from __future__ import annotations

import os

import pytest

from tests.client.helpers import bodies_batch
from tests.support.broker_process import BrokerProcess
from txmq.broker.client import Message, NativeClient
from txmq.broker.client import local_read as lr
from txmq.broker.protocol import native_pb2 as pb

pytestmark = pytest.mark.usefixtures("decode_path")  # the client decodes with each decode (tests/conftest.py)


@pytest.fixture
def client(shared_broker):
    """A client that reads the broker's files itself where the broker answers with plans."""
    with NativeClient(shared_broker.endpoint, timeout_s=20, local_reads=True) as c:
        yield c


@pytest.fixture
def broker_built(shared_broker):
    """A client that takes every batch as the broker built it."""
    with NativeClient(shared_broker.endpoint, timeout_s=20) as c:
        yield c


@pytest.fixture
def plans(monkeypatch) -> list[pb.LocalReadPlan]:
    """The read plans clients decode during the test (a copy of each)."""
    seen: list[pb.LocalReadPlan] = []
    original = lr.LocalSegments.batch

    def spy(self, plan, topic, queue_id):
        copy = pb.LocalReadPlan()
        copy.CopyFrom(plan)
        seen.append(copy)
        return original(self, plan, topic, queue_id)

    monkeypatch.setattr(lr.LocalSegments, "batch", spy)
    return seen


def _tamper(monkeypatch, change) -> None:
    """Let the client decode plans changed by `change(plan)`: what a broker on another host, a
    recreated store or a bug would hand it."""
    original = lr.LocalSegments.batch

    def tampered(self, plan, topic, queue_id):
        changed = pb.LocalReadPlan()
        changed.CopyFrom(plan)
        change(changed)
        return original(self, changed, topic, queue_id)

    monkeypatch.setattr(lr.LocalSegments, "batch", tampered)


def _pull_all(client: NativeClient, topic: str, queue_id: int, end: int, max_bytes: int = 16 << 20):
    return [r.batch for r in client.read_queue(topic, queue_id, 0, end, batch_bytes=max_bytes)]


def _rows_of(client: NativeClient, topic: str) -> int:
    """How many rows a full read of every queue of `topic` returns."""
    return sum(b.num_rows for q, end in client.snapshot_offsets([topic])[topic].items()
               for b in _pull_all(client, topic, q, end))


def _offsets_of(plan: pb.LocalReadPlan) -> list[int]:
    raw = plan.physical_offsets
    return [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]


def _varied_messages(client: NativeClient, topic: str) -> None:
    """Plain sends with tags, keys and user properties, and a committed transaction."""
    client.send([Message(topic=topic, body=b"b%d" % i, tag="tag%d" % (i % 3), keys=["k%d" % i, "shared"],
                         properties={"user": "u%d" % i}) for i in range(40)])
    client.send_arrow(bodies_batch(60, prefix="arrow"), topic=topic)
    prep = client.prepare_arrow("", bodies_batch(30, prefix="tx"), topic=topic, producer_group="g", sender="s")
    client.end_transaction(prep.transaction_id, "COMMIT")
    pending = client.prepare_arrow("", bodies_batch(5, prefix="pending"), topic=topic, producer_group="g",
                                   sender="s")
    client.end_transaction(pending.transaction_id, "ROLLBACK")


def test_a_pull_on_the_broker_host_is_decoded_from_the_commitlog_as_the_broker_would_build_it(
        client, broker_built, topic, plans):
    _varied_messages(client, topic)
    ends = client.snapshot_offsets([topic])[topic]
    for queue_id, end in ends.items():
        local = _pull_all(client, topic, queue_id, end)
        built = _pull_all(broker_built, topic, queue_id, end)
        assert [b.num_rows for b in local] == [b.num_rows for b in built]
        for mine, theirs in zip(local, built):
            assert mine.equals(theirs)
    assert len(plans) >= len([e for e in ends.values() if e]), "every queue was read from a plan"
    assert client.reads_locally


def test_only_committed_messages_are_planned(client, topic, plans):
    _varied_messages(client, topic)
    bodies = {b for q, end in client.snapshot_offsets([topic])[topic].items()
              for batch in _pull_all(client, topic, q, end) for b in batch.column("body").to_pylist()}
    assert len(bodies) == 130 and not any(b.startswith(b"pending") for b in bodies)
    assert plans


def test_a_plan_stops_at_max_bytes_and_the_next_pull_goes_on_from_there(client, broker_built, topic, plans):
    client.delete_topic(topic)
    client.create_topic(topic, 1)
    client.send_arrow(bodies_batch(200, prefix="x" * 500), topic=topic)
    local = _pull_all(client, topic, 0, 200, max_bytes=20_000)
    built = _pull_all(broker_built, topic, 0, 200, max_bytes=20_000)
    assert len(local) == len(built) > 5
    assert all(mine.equals(theirs) for mine, theirs in zip(local, built))
    assert plans and all(len(plan.sizes) // 4 * 500 <= 20_000 for plan in plans), "no plan passes max_bytes"


def test_a_tag_filtered_pull_is_built_by_the_broker(client, topic, plans):
    client.delete_topic(topic)
    client.create_topic(topic, 1)
    client.send([Message(topic=topic, body=b"b%d" % i, tag="a" if i % 2 else "b") for i in range(10)])
    pulled = client.pull_arrow(topic, 0, 0, 10, tags="a").batch
    assert pulled.column("tag").to_pylist() == ["a"] * 5
    assert plans == []


def test_a_segment_that_is_not_the_named_file_turns_local_reads_off(client, broker_built, topic, monkeypatch):
    client.send_arrow(bodies_batch(20), topic=topic)

    def other_inode(plan):
        plan.segment.inode += 1

    _tamper(monkeypatch, other_inode)
    ends = client.snapshot_offsets([topic])[topic]
    pulled = [b for q, end in ends.items() for b in _pull_all(client, topic, q, end)]
    expected = [b for q, end in ends.items() for b in _pull_all(broker_built, topic, q, end)]
    assert all(mine.equals(theirs) for mine, theirs in zip(pulled, expected))
    assert not client.reads_locally


def test_a_segment_that_cannot_be_opened_is_pulled_through_the_broker(client, topic, monkeypatch):
    client.send_arrow(bodies_batch(8), topic=topic)

    def gone(plan):
        plan.segment.path = plan.segment.path + ".deleted-by-retention"

    _tamper(monkeypatch, gone)
    assert _rows_of(client, topic) == 8 and not client.reads_locally


def test_records_that_disagree_with_the_plan_are_pulled_through_the_broker(client, topic, monkeypatch):
    client.send_arrow(bodies_batch(8), topic=topic)

    def shifted(plan):
        plan.physical_offsets = b"".join((offset + 4).to_bytes(8, "little") for offset in _offsets_of(plan))

    _tamper(monkeypatch, shifted)
    assert _rows_of(client, topic) == 8 and not client.reads_locally


def test_a_client_that_did_not_opt_in_never_asks_for_a_plan(broker_built, topic, plans):
    broker_built.send_arrow(bodies_batch(4), topic=topic)
    for q, end in broker_built.snapshot_offsets([topic])[topic].items():
        _pull_all(broker_built, topic, q, end)
    assert plans == [] and not broker_built.reads_locally


def test_a_client_that_cannot_see_the_broker_files_reads_through_the_broker(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("hiding the broker's files needs root (unshare)")
    with BrokerProcess(tmp_path / "hidden", flush="async", hidden=True) as proc:
        with NativeClient(proc.endpoint, local_reads=True) as client:
            client.create_topic("t", 1)
            client.send_arrow(bodies_batch(6), topic="t")
            assert _rows_of(client, "t") == 6 and not client.reads_locally


@pytest.mark.parametrize("change, problem", [
    (lambda p: setattr(p, "sizes", p.sizes[:-4]), "malformed"),
    (lambda p: setattr(p.segment, "path", os.path.basename(p.segment.path)), "relative path"),
    (lambda p: setattr(p.segment, "start", p.segment.start + 10**9), "before segment"),
])
def test_a_malformed_plan_is_refused_with_a_reason(client, topic, plans, change, problem):
    client.delete_topic(topic)
    client.create_topic(topic, 1)
    client.send_arrow(bodies_batch(3), topic=topic)
    client.pull_arrow(topic, 0, 0, 3)
    plan = plans[-1]
    change(plan)
    with pytest.raises(lr.LocalReadUnavailable, match=problem):
        lr.LocalSegments().batch(plan, topic, 0)


@pytest.fixture(scope="module")
def small_segment_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("small-segments") / "data", flush="async",
                       extra_args=["--segment-bytes", "65536"]) as proc:
        yield proc


def test_plans_stop_at_a_segment_end_and_read_on_in_the_next(small_segment_broker, plans):
    with NativeClient(small_segment_broker.endpoint, local_reads=True) as client, \
            NativeClient(small_segment_broker.endpoint) as built_client:
        client.create_topic("rolled", 1)
        for start in range(0, 300, 50):
            client.send([Message("rolled", b"%05d" % i + b"x" * 1019) for i in range(start, start + 50)])
        local = _pull_all(client, "rolled", 0, 300)
        built = _pull_all(built_client, "rolled", 0, 300)
    assert [r for b in local for r in b.column("body").to_pylist()] == \
        [r for b in built for r in b.column("body").to_pylist()]
    segments = {p.segment.path for p in plans}
    assert len(segments) >= 4, "the range spans several 64 KiB segments"
    for plan in plans:
        offsets = _offsets_of(plan)
        assert plan.segment.start <= offsets[0] and offsets[-1] < plan.segment.start + 65536


def test_a_broker_with_local_reads_off_answers_with_batches(tmp_path, plans):
    with BrokerProcess(tmp_path / "data", flush="async", extra_args=["--no-local-reads"]) as proc:
        with NativeClient(proc.endpoint, local_reads=True) as client:
            client.create_topic("t", 1)
            client.send_arrow(bodies_batch(5), topic="t")
            assert client.pull_arrow("t", 0, 0, 5).batch.num_rows == 5
    assert plans == []
