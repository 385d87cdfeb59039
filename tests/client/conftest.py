"""Fixtures for the client tests: one broker process shared by the package, fresh topics per test.

The broker runs with a short transaction timeout and check interval so
check-back behaviour shows up within a second; every test uses its own topic
and producer group, so tests sharing the broker cannot see each other.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.broker_process import BrokerProcess
from txmq.broker.client import NativeClient

FAST_CHECKS = ["--transaction-timeout", "1s", "--check-interval", "0.2s", "--max-checks", "50"]


@pytest.fixture(scope="package")
def shared_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker") / "data", flush="async", extra_args=FAST_CHECKS) as proc:
        yield proc


@pytest.fixture
def client(shared_broker):
    with NativeClient(shared_broker.endpoint, timeout_s=20) as c:
        yield c


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def topic(client, unique) -> str:
    name = f"t_{unique}"
    client.create_topic(name, 4)
    return name
