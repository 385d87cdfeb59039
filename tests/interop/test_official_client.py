"""The official RocketMQ 5 Python client over TLS and with SQL92 subscriptions (the other families, for
every client: test_official_clients.py)."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from tests.interop.conftest import run_client
from tests.interop.test_official_clients import broker, endpoint, name  # noqa: F401 - the module's broker fixture
from tests.support.tls import self_signed
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def bodies_of(received: list[dict]) -> list[str]:
    return [r["body"] for r in received]


def test_a_simple_consumer_subscribed_with_sql92_receives_only_matching_messages(endpoint):
    topic = name("sql-simple")
    sent = run_client(endpoint, "produce", "--topic", topic, "--count", "20", "--numbered", "--tag", "paid")
    assert sent["errors"] == []
    got = run_client(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "5",
                     "--sql", "n >= 15 AND TAGS = 'paid' AND origin IS NOT NULL")
    assert got["errors"] == []
    assert sorted(bodies_of(got["received"])) == sorted(f"m-{i}" for i in range(15, 20))


def test_a_push_consumer_subscribed_with_sql92_consumes_only_matching_messages(endpoint):
    topic = name("sql-push")
    sent = run_client(endpoint, "produce", "--topic", topic, "--count", "30", "--numbered")
    assert sent["errors"] == []
    got = run_client(endpoint, "push", "--topic", topic, "--group", name("g"), "--expect", "3",
                     "--sql", "n IN ('3', '13', '23')", "--timeout", "40", "--linger", "2")
    assert Counter(got["bodies"]) == Counter(["m-3", "m-13", "m-23"])


# --- authentication -------------------------------------------------------------------------

def test_producer_over_tls(tmp_path):
    cert, key = self_signed(tmp_path)
    with BrokerProcess(tmp_path / "store", flush="async",
                       extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]) as proc:
        sent = run_client(proc.endpoint, "--tls", "produce", "--topic", f"tls-{uuid.uuid4().hex[:8]}", "--count", "2",
                          env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)})
    assert sent.get("errors") == [] and len(sent["sent"]) == 2
