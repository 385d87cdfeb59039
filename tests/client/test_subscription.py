"""Push subscriptions: the broker sends committed messages down one Flight stream as they are
published (NativeClient.subscribe, PullConsumer(push=True)); no wait call, no pull."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from tests.client.helpers import Collector, bodies_batch
from tests.support.broker_process import BrokerProcess
from txmq.broker import errors
from txmq.broker.client import NativeClient, PullConsumer

QUEUES = 4


def _every_queue(offset: int = 0) -> dict[int, int]:
    return {q: offset for q in range(QUEUES)}


@pytest.fixture
def collect():
    made: list[Collector] = []

    def make(subscription) -> Collector:
        made.append(Collector(subscription))
        return made[-1]
    yield make
    for c in made:
        c.close()


def test_messages_committed_after_subscribe_arrive_without_a_pull(client, topic, collect):
    got = collect(client.subscribe({topic: _every_queue()}))
    time.sleep(0.2)  # the stream is open and waiting before anything is published
    prep = client.prepare_arrow("", bodies_batch(5), topic=topic, producer_group="g", sender="s")
    client.end_transaction(prep.transaction_id, "COMMIT")
    assert sorted(got.wait_for(5)) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    pushes = client.stats()["rpc"]["push"]
    assert pushes["messages"] >= 5


def test_messages_already_committed_arrive_from_the_start_offsets(client, topic, collect):
    client.send_arrow(bodies_batch(8), topic=topic)
    got = collect(client.subscribe({topic: _every_queue()}))
    assert sorted(got.wait_for(8)) == sorted(f"m{i}".encode() for i in range(8))


def test_a_rolled_back_transactions_halves_never_arrive(client, topic, collect):
    got = collect(client.subscribe({topic: _every_queue()}))
    rolled = client.prepare_arrow("", bodies_batch(3, prefix="rolled"), topic=topic, producer_group="g", sender="s")
    kept = client.prepare_arrow("", bodies_batch(3, prefix="kept"), topic=topic, producer_group="g", sender="s")
    client.end_transaction(rolled.transaction_id, "ROLLBACK")
    client.end_transaction(kept.transaction_id, "COMMIT")
    client.send_arrow(bodies_batch(1, prefix="last"), topic=topic)
    got.wait_for(4)
    time.sleep(0.3)  # anything else pushed would have come by now
    assert sorted(got.bodies()) == [b"kept0", b"kept1", b"kept2", b"last0"]


def test_a_pending_transaction_arrives_only_once_committed(client, topic, collect):
    got = collect(client.subscribe({topic: _every_queue()}))
    prep = client.prepare_arrow("", bodies_batch(2, prefix="tx"), topic=topic, producer_group="g", sender="s")
    client.send_arrow(bodies_batch(1, prefix="plain"), topic=topic)
    assert got.wait_for(1) == [b"plain0"]
    client.end_transaction(prep.transaction_id, "COMMIT")
    assert sorted(got.wait_for(3)) == [b"plain0", b"tx0", b"tx1"]


def test_a_subscription_follows_only_its_queues_from_their_offsets(client, topic, collect):
    client.send_arrow(bodies_batch(40), topic=topic)
    top = client.snapshot_offsets([topic])[topic]
    got = collect(client.subscribe({topic: {1: top[1] - 2}}))
    got.wait_for(2)
    client.send_arrow(bodies_batch(40, prefix="n"), topic=topic)
    after = client.snapshot_offsets([topic])[topic]
    got.wait_for(2 + after[1] - top[1])
    time.sleep(0.2)
    assert {(q, o) for q, o, _ in got.messages} == {(1, o) for o in range(top[1] - 2, after[1])}


def test_a_tag_filter_pushes_only_matching_messages(client, topic, collect):
    got = collect(client.subscribe({topic: _every_queue()}, tags="keep"))
    client.send_arrow(bodies_batch(6, tag=pa.array(["keep", "drop"] * 3)), topic=topic)
    client.send_arrow(bodies_batch(1, prefix="x", tag=pa.array(["keep"])), topic=topic)
    got.wait_for(4)
    time.sleep(0.2)
    assert sorted(got.bodies()) == [b"m0", b"m2", b"m4", b"x0"]


def test_a_subscription_of_an_unknown_queue_is_refused(client, topic):
    with pytest.raises(errors.BadRequest, match="no queue 9"):
        next(iter(client.subscribe({topic: {9: 0}})))


def test_close_ends_an_iteration_waiting_for_messages(client, topic):
    subscription = client.subscribe({topic: _every_queue()})
    got = Collector(subscription)
    time.sleep(0.2)
    started = time.monotonic()
    got.close()
    assert time.monotonic() - started < 2


def test_many_subscribers_each_receive_every_message(client, topic, collect):
    subscribers = [collect(client.subscribe({topic: _every_queue()})) for _ in range(24)]
    for i in range(10):
        prep = client.prepare_arrow("", bodies_batch(3, prefix=f"t{i}-"), topic=topic, producer_group="g", sender="s")
        client.end_transaction(prep.transaction_id, "COMMIT")
    expected = sorted(f"t{i}-{j}".encode() for i in range(10) for j in range(3))
    for s in subscribers:
        assert sorted(s.wait_for(30)) == expected
    time.sleep(0.2)
    assert all(len(s.messages) == 30 for s in subscribers)


def test_push_consumer_polls_what_the_broker_pushed_and_commits_its_positions(client, topic, unique):
    group = f"push_{unique}"
    with PullConsumer(client, [topic], group=group, start="latest", push=True) as consumer:
        assert consumer.poll(timeout_ms=200) == []
        prep = client.prepare_arrow("", bodies_batch(4), topic=topic, producer_group="g", sender="s")
        client.end_transaction(prep.transaction_id, "COMMIT")
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got) < 4 and time.monotonic() < deadline:
            got += [b for batch in consumer.poll(timeout_ms=1000) for b in batch.column("body").to_pylist()]
        assert sorted(got) == [b"m0", b"m1", b"m2", b"m3"]
        consumer.commit()
    assert sum(e.lag for e in client.group_lag(group)[topic].values()) == 0


def test_push_consumer_refuses_dividing_queues(client, topic, unique):
    with pytest.raises(ValueError, match="allocation"):
        PullConsumer(client, [topic], group=f"g_{unique}", allocation="average", push=True)


# ---- failures: processes killed -------------------------------------------------------------

CONSUMER = r"""
import json, sys
from txmq.broker.client import NativeClient
endpoint, topic, start, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
client = NativeClient(endpoint)
subscription = client.subscribe({topic: {int(q): o for q, o in start.items()}})
with open(out, "a") as fh:
    for pushed in subscription:
        # one line per batch: what it held and where this queue goes on (written whole, then flushed)
        fh.write(json.dumps({"queue": pushed.queue_id, "next": pushed.next_offset,
                             "bodies": [b.decode() for b in pushed.batch.column("body").to_pylist()]}) + "\n")
        fh.flush()
"""


def _consumed(out: Path, start: dict[int, int]) -> tuple[list[str], dict[int, int]]:
    """Bodies a consumer process recorded, and each queue's position after its last whole line."""
    bodies, positions = [], dict(start)
    for line in (out.read_text().splitlines() if out.exists() else []):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the line it was writing when killed: not handled
            continue
        bodies += record["bodies"]
        positions[record["queue"]] = record["next"]
    return bodies, positions


def _consumer_process(endpoint: str, topic: str, start: dict[int, int], out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CONSUMER, endpoint, topic, json.dumps(start), str(out)])


def test_a_consumer_killed_and_resumed_from_its_offsets_gets_everything_once(client, topic, shared_broker, tmp_path):
    start = _every_queue()
    first_out, second_out = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first = _consumer_process(shared_broker.endpoint, topic, start, first_out)

    def send_a() -> None:
        for i in range(20):
            client.send_arrow(bodies_batch(10, prefix=f"a{i}-"), topic=topic)
            time.sleep(0.05)
    sender = threading.Thread(target=send_a)
    sender.start()
    try:
        deadline = time.monotonic() + 30
        while len(_consumed(first_out, start)[0]) < 50 and time.monotonic() < deadline:
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)  # while messages are still being committed and pushed
        first.wait(10)
    finally:
        sender.join()
        if first.poll() is None:
            first.kill()
    seen, positions = _consumed(first_out, start)
    assert seen, "the first consumer received nothing before it was killed"
    for i in range(20):
        client.send_arrow(bodies_batch(10, prefix=f"b{i}-"), topic=topic)
    second = _consumer_process(shared_broker.endpoint, topic, positions, second_out)
    try:
        deadline = time.monotonic() + 30
        while len(seen) + len(_consumed(second_out, positions)[0]) < 400 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        second.kill()
        second.wait(10)
    everything = Counter(seen + _consumed(second_out, positions)[0])
    expected = {f"{p}{i}-{j}" for p in "ab" for i in range(20) for j in range(10)}
    assert set(everything) == expected and set(everything.values()) == {1}


def test_a_broker_killed_mid_stream_is_followed_again_from_where_the_subscriber_was(tmp_path, collect):
    with BrokerProcess(tmp_path / "data", flush="sync") as broker, \
            NativeClient(broker.endpoint, timeout_s=30, retry_unavailable_s=60) as client:
        client.create_topic("t", QUEUES)
        subscription = client.subscribe({"t": _every_queue()})
        got = collect(subscription)
        for i in range(10):
            client.send_arrow(bodies_batch(5, prefix=f"before{i}-"), topic="t")
        got.wait_for(50)
        broker.kill()
        broker.restart()
        for i in range(10):
            client.send_arrow(bodies_batch(5, prefix=f"after{i}-"), topic="t")
        got.wait_for(100, timeout_s=60)
        time.sleep(0.3)
        assert Counter(got.bodies()) == Counter(f"{p}{i}-{j}".encode() for p in ("before", "after")
                                                for i in range(10) for j in range(5))
        assert subscription.reconnects >= 1
        # offsets per queue arrived in order, each once
        for q in range(QUEUES):
            offsets = [o for queue, o, _ in got.messages if queue == q]
            assert offsets == list(range(len(offsets)))


def _anonymous_rss_bytes(pid: int) -> int:
    """Resident memory that is not a mapped file (the CommitLog's mapped segments are files)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_consumer_that_stops_reading_holds_the_broker_to_a_bounded_buffer(tmp_path):
    batch_bytes, rounds = 1 << 20, 32  # 32 sends of 4 MiB: 128 MiB behind a consumer that does not read
    body = pa.table({"body": pa.array([b"x" * 1024] * 4096, pa.binary())})
    with BrokerProcess(tmp_path / "data", flush="async") as broker, NativeClient(broker.endpoint) as client:
        client.create_topic("t", 1)
        client.create_topic("warm", 1)
        for _ in range(rounds // 2):  # the broker's allocators grow to their working size first
            client.send_arrow(body, topic="warm")
        client.send_arrow(bodies_batch(1), topic="t")
        subscription = client.subscribe({"t": {0: 0}}, max_bytes=batch_bytes)
        stream = iter(subscription)
        next(stream)  # the stream is open; from now on nobody reads it
        rss_before = _anonymous_rss_bytes(broker.proc.pid)
        for _ in range(rounds):
            client.send_arrow(body, topic="t")
        time.sleep(1.0)
        pushed_while_stalled = client.stats()["rpc"]["push"]["messages"] - 1
        rss_growth = _anonymous_rss_bytes(broker.proc.pid) - rss_before
        # the broker made a few batches to fill the wire's flow-control windows, not the 128 MiB written
        assert pushed_while_stalled * 1024 < 16 << 20, pushed_while_stalled
        # and its memory did not take the backlog in (the allocators' own noise, up to ~40 MiB, is most of it)
        assert rss_growth < 96 << 20, rss_growth
        received, written = 1, 1 + rounds * body.num_rows
        for pushed in stream:  # reading again gets everything
            received += pushed.batch.num_rows
            if received >= written:
                break
        assert received == written
        subscription.close()
