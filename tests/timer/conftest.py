"""Helpers for timer tests: DELAY sends over the RocketMQ 5 wire to real broker processes."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.server.wire import Wire
from tests.support.broker_process import BrokerProcess
from txmq.broker.protocol import rocketmq_v2_pb2 as pb


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def now_ms() -> int:
    return int(time.time() * 1000)


def send_delayed(wire: Wire, topic: str, deliver_ms: list[int], *, bodies: list[bytes] | None = None) -> list[str]:
    """Send one DELAY message per delivery time (one request); return their message ids."""
    req = pb.SendMessageRequest()
    ids = []
    for i, at in enumerate(deliver_ms):
        m = req.messages.add(body=bodies[i] if bodies else f"m{i}".encode())
        m.topic.name = topic
        m.system_properties.message_id = uuid.uuid4().hex.upper()
        m.system_properties.message_type = pb.DELAY
        m.system_properties.body_encoding = pb.IDENTITY
        m.system_properties.delivery_timestamp.FromMilliseconds(at)
        ids.append(m.system_properties.message_id)
    r = wire.call("SendMessage", req)
    assert r.status.code == pb.OK, r.status
    return ids


def wait_for(wire: Wire, topic: str, count: int, timeout_s: float) -> list[pb.Message]:
    """Pull `topic` until it holds `count` messages (or the timeout): what it holds then."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = wire.pull_all(topic)
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def ms(ts) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path / "data", flush="async") as proc:
        yield proc


@pytest.fixture
def wire(broker):
    w = Wire(broker.endpoint)
    yield w
    w.close()
