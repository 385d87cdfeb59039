"""Fixtures for wire-level server tests: one broker process per module, a raw RocketMQ 5 client."""

from __future__ import annotations

import pytest

from tests.server.wire import Wire
from tests.support.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("broker")
    with BrokerProcess(data, flush="async",
                       extra_args=["--transaction-timeout", "60s", "--check-interval", "60s"]) as proc:
        yield proc


@pytest.fixture
def wire(module_broker):
    w = Wire(module_broker.endpoint)
    yield w
    w.close()
