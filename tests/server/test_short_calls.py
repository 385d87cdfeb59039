"""The RocketMQ protocol's unary calls run on a small pool of their own; streams keep the main pool."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.server.wire import Wire
from tests.store._helpers import PausedCommit
from txmq.broker.protocol import rocketmq_v2_pb2 as pb
from txmq.broker.server import messaging_service
from txmq.broker.server.broker import Broker, build_arg_parser, config_from_args
from txmq.broker.server.config import BrokerConfig
from txmq.broker.server.short_calls import THREAD_NAME_PREFIX, short_call_workers
from txmq.broker.store.message import SYSFLAG_TRANSACTION_COMMIT, Message
from txmq.broker.store.record_copy import RecordCopies


@pytest.fixture
def started(tmp_path):
    """Start an in-process broker with a given config; stops every broker started."""
    brokers = []

    def start(**settings) -> tuple[Broker, Wire]:
        broker = Broker(BrokerConfig(data_dir=tmp_path / f"b{len(brokers)}", listen="127.0.0.1:0", **settings))
        host, port = broker.start()
        brokers.append(broker)
        return broker, Wire(f"{host}:{port}")

    yield start
    for broker in brokers:
        broker.stop(grace_s=0.5)


def record_threads(monkeypatch, *rpcs: str) -> dict[str, str]:
    """The thread name each of `rpcs` last ran on (handlers are looked up when the broker starts)."""
    seen: dict[str, str] = {}
    for rpc in rpcs:
        original = getattr(messaging_service.MessagingService, rpc)

        def wrapper(self, req, call, _original=original, _rpc=rpc):
            seen[_rpc] = threading.current_thread().name
            return _original(self, req, call)
        monkeypatch.setattr(messaging_service.MessagingService, rpc, wrapper)
    return seen


def test_the_pool_has_two_threads_with_async_flush_and_is_off_with_sync_flush():
    assert short_call_workers(None, "async") == 2
    assert short_call_workers(None, "sync") == 0  # group commit needs every writer in flight
    assert short_call_workers(5, "sync") == 5


def test_a_negative_pool_size_is_refused_by_name():
    with pytest.raises(ValueError, match="short_call_workers"):
        BrokerConfig(short_call_workers=-1)


def test_the_flag_sets_the_pool_size():
    args = build_arg_parser().parse_args(["--short-call-workers", "3"])
    assert config_from_args(args).short_call_workers == 3


def test_unary_calls_run_on_the_short_pool(started, monkeypatch):
    seen = record_threads(monkeypatch, "QueryRoute", "SendMessage", "Heartbeat")
    _, wire = started()
    assert wire.queue_count("orders") == 4
    assert wire.send("orders", [b"a"]).status.code == pb.OK
    assert wire.call("Heartbeat", pb.HeartbeatRequest()).status.code == pb.OK
    assert all(name.startswith(THREAD_NAME_PREFIX) for name in seen.values()), seen
    assert set(seen) == {"QueryRoute", "SendMessage", "Heartbeat"}


def test_streams_stay_on_the_main_pool(started, monkeypatch):
    seen = record_threads(monkeypatch, "ReceiveMessage")
    _, wire = started()
    wire.send("orders", [b"a"])
    status, messages = wire.receive("orders", "g1")
    assert status.code == pb.OK and len(messages) == 1
    assert not seen["ReceiveMessage"].startswith(THREAD_NAME_PREFIX)


def test_with_no_pool_unary_calls_run_on_the_main_pool(started, monkeypatch):
    seen = record_threads(monkeypatch, "SendMessage")
    _, wire = started(short_call_workers=0)
    assert wire.send("orders", [b"a"]).status.code == pb.OK
    assert not seen["SendMessage"].startswith(THREAD_NAME_PREFIX)


def test_sends_are_answered_while_long_polls_wait(started):
    _, wire = started(short_call_workers=1)
    polls = ThreadPoolExecutor(4)
    try:
        waiting = [polls.submit(wire.receive, "idle", f"g{i}", poll_s=5.0) for i in range(4)]
        time.sleep(0.5)  # the long polls are in flight, holding main-pool threads
        started_at = time.monotonic()
        assert wire.send("orders", [b"a"]).status.code == pb.OK
        assert time.monotonic() - started_at < 2.0
        assert not any(f.done() for f in waiting)
    finally:
        polls.shutdown(wait=True)


def test_many_concurrent_producers_each_store_every_message_once(started):
    _, wire = started(short_call_workers=1)
    producers = [Wire(wire.endpoint) for _ in range(8)]

    def produce(w: Wire, i: int) -> None:
        for j in range(20):
            response = w.send("orders", [b"%d-%d" % (i, j)], mtype=pb.TRANSACTION)
            assert response.status.code == pb.OK
            assert w.end("orders", response.entries[0].transaction_id).status.code == pb.OK

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(produce, producers, range(8)))
    bodies = sorted(m.body for m in wire.pull_all("orders"))
    assert bodies == sorted(b"%d-%d" % (i, j) for i in range(8) for j in range(20))
    for w in producers:
        w.close()


def test_stopping_the_broker_ends_the_pool_threads(started):
    broker, wire = started()
    wire.send("orders", [b"a"])
    broker.stop(grace_s=0.5)
    time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME_PREFIX)]


def _large_commit_holding(store, monkeypatch, topic: str, queue_ids: list[int]) -> PausedCommit:
    """A large COMMIT (a split group, a part per copy) paused once it has written a copy to each
    of `queue_ids` of `topic`: those queues are reserved until it finishes."""
    queue_ids = [*queue_ids, queue_ids[0]]  # one more copy: the pause comes before its part
    placed = store.append([Message("SOURCE", b"s%d" % q, 0) for q in queue_ids])
    copies = RecordCopies([r.physical_offset for r in placed], [r.size for r in placed], [topic] * len(queue_ids),
                          queue_ids, SYSFLAG_TRANSACTION_COMMIT, source_topic="SOURCE")
    return PausedCommit(store, copies, monkeypatch, pause_at=len(queue_ids))


def test_a_send_avoids_the_queues_a_large_commit_is_writing(started, monkeypatch):
    broker, wire = started()
    assert wire.queue_count("final") == 4
    store = broker.core.store
    commit = _large_commit_holding(store, monkeypatch, "final", [1])
    try:
        for i in range(8):
            assert wire.send("final", [b"m%d" % i]).status.code == pb.OK
        assert store.max_offset("final", 1) == 0  # the COMMIT's entries wait for its end; no send went there
        assert sum(store.max_offset("final", q) for q in (0, 2, 3)) == 8
    finally:
        commit.finish()


def test_a_send_to_a_topic_a_large_commit_holds_whole_is_refused_at_once_and_other_calls_go_on(started,
                                                                                                monkeypatch):
    broker, wire = started()
    assert wire.queue_count("final") == 4
    commit = _large_commit_holding(broker.core.store, monkeypatch, "final", [0, 1, 2, 3])
    try:
        for _ in range(3):  # more refusals than the pool has threads: none of them holds one
            started_at = time.monotonic()
            refused = wire.send("final", [b"waits for no one"])
            assert refused.status.code == pb.TOO_MANY_REQUESTS, refused.status
            assert "reserved by a large COMMIT" in refused.status.message
            assert time.monotonic() - started_at < 2.0
        assert wire.send("other", [b"another topic"]).status.code == pb.OK
    finally:
        commit.finish()
    assert wire.send("final", [b"after the commit"]).status.code == pb.OK


def test_an_end_transaction_behind_a_large_commit_is_refused_and_the_transaction_stays_pending(started,
                                                                                              monkeypatch):
    broker, wire = started()
    assert wire.queue_count("final") == 4
    half = wire.send("final", [b"small"], mtype=pb.TRANSACTION)
    tx_id = half.entries[0].transaction_id
    commit = _large_commit_holding(broker.core.store, monkeypatch, "final", [0, 1, 2, 3])
    try:
        refused = wire.end("final", tx_id)
        assert refused.status.code == pb.TOO_MANY_REQUESTS, refused.status
        assert broker.core.engine.get(tx_id).state.name == "PENDING"
    finally:
        commit.finish()
    assert wire.end("final", tx_id).status.code == pb.OK
    assert [m.body for m in wire.pull_all("final")].count(b"small") == 1
