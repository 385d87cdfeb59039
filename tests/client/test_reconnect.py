"""NativeClient reconnects with backoff and reports an unreachable broker as BrokerUnavailable."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.broker_process import BrokerProcess
from txmq.broker import errors
from txmq.broker.client import NativeClient


def test_unreachable_broker_raises_broker_unavailable_after_retrying():
    with NativeClient("127.0.0.1:1", timeout_s=5, retry_unavailable_s=0.5) as client:
        started = time.monotonic()
        with pytest.raises(errors.BrokerUnavailable, match="127.0.0.1:1"):
            client.list_topics()
        assert 0.1 < time.monotonic() - started < 4  # retried with backoff, within the window


def test_bad_endpoint_string_is_refused():
    with pytest.raises(errors.BadRequest, match="HOST:PORT"):
        NativeClient("no-port-here")


def test_call_made_while_the_broker_restarts_succeeds(tmp_path):
    with BrokerProcess(tmp_path / "data", flush="async") as broker:
        with NativeClient(broker.endpoint, timeout_s=30) as client:
            client.create_topic("before", 1)
            broker.stop()
            restarter = threading.Timer(1.0, broker.restart)
            restarter.start()
            try:
                assert "before" in [t.name for t in client.list_topics()]
            finally:
                restarter.join()


def test_second_endpoint_is_used_when_the_first_is_down(tmp_path):
    with BrokerProcess(tmp_path / "data", flush="async") as broker:
        with NativeClient(f"127.0.0.1:1;{broker.endpoint}", timeout_s=10) as client:
            assert client.create_topic("failover", 2).queue_count == 2


def test_checkback_session_registers_again_after_a_broker_restart(tmp_path):
    with BrokerProcess(tmp_path / "data", flush="async") as broker:
        with NativeClient(broker.endpoint, timeout_s=30) as client:
            with client.checkback_session("g", ["t"], lambda request: "UNKNOWN") as session:
                assert session.wait_registered(10)
                broker.stop()
                deadline = time.monotonic() + 10
                while session.wait_registered(0) and time.monotonic() < deadline:
                    time.sleep(0.05)  # the stream notices the broker went away
                broker.restart()
                assert session.wait_registered(15)


def test_a_write_a_replica_between_roles_refused_unread_goes_to_the_next_endpoint_once(tmp_path):
    # A replica in an election (or one its leader does not answer) refuses calls before reading them:
    # even a write that is not idempotent may then go to another replica, and it is stored once.
    from concurrent import futures

    import grpc

    from txmq.broker.client.types import Message
    from txmq.broker.cluster.roles import RoleRouter

    router = RoleRouter(lambda endpoint: grpc.insecure_channel(endpoint))
    router.unavailable("group g: replica r1 is taking over as leader")
    refuser = grpc.server(futures.ThreadPoolExecutor(2), handlers=[router])
    port = refuser.add_insecure_port("127.0.0.1:0")
    refuser.start()
    try:
        with BrokerProcess(tmp_path / "data", flush="async") as broker:
            with NativeClient(broker.endpoint) as admin:
                admin.create_topic("t", 1)
            with NativeClient(f"127.0.0.1:{port};{broker.endpoint}", timeout_s=10) as client:
                client.send([Message("t", b"once")])
                bodies = [b for part in client.read_queue("t", 0, 0, 1) for b in part.batch.column("body").to_pylist()]
            assert bodies == [b"once"]
    finally:
        refuser.stop(None)
