"""The official RocketMQ 5 Python client (5.1.2), unmodified, against a txmq broker process."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from tests.interop.conftest import run_client
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    data = tmp_path_factory.mktemp("interop-broker")
    with BrokerProcess(data, flush="sync",
                       extra_args=["--transaction-timeout", "1s", "--check-interval", "1s"]) as proc:
        yield proc.endpoint


def bodies_of(received: list[dict]) -> list[str]:
    return [r["body"] for r in received]


def test_sync_send_is_received_once_by_a_simple_consumer(endpoint):
    topic = name("sync")
    sent = run_client(endpoint, "produce", "--topic", topic, "--count", "10", "--tag", "tagA")
    assert sent["errors"] == [] and len(sent["sent"]) == 10
    assert len({s["message_id"] for s in sent["sent"]}) == 10
    got = run_client(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "10")
    assert got["errors"] == []
    assert sorted(bodies_of(got["received"])) == sorted(f"m-{i}" for i in range(10))
    first = got["received"][0]
    assert first["tag"] == "tagA" and first["properties"] == {"origin": "interop"} and first["attempt"] == 1
    assert {r["message_id"] for r in got["received"]} == {s["message_id"] for s in sent["sent"]}


def test_fifo_messages_of_one_group_are_received_in_send_order(endpoint):
    topic = name("fifo")
    sent = run_client(endpoint, "produce", "--topic", topic, "--count", "8", "--message-group", "order-42")
    assert sent["errors"] == []
    got = run_client(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "8")
    assert bodies_of(got["received"]) == [f"m-{i}" for i in range(8)]


def test_async_send(endpoint):
    topic = name("async")
    sent = run_client(endpoint, "produce", "--topic", topic, "--count", "20", "--async")
    assert sent["errors"] == [] and len(sent["sent"]) == 20


def test_committed_transactions_are_visible_and_rolled_back_ones_never(endpoint):
    topic = name("tx")
    c = run_client(endpoint, "transaction", "--topic", topic, "--mode", "commit", "--count", "3", "--prefix", "c")
    r = run_client(endpoint, "transaction", "--topic", topic, "--mode", "rollback", "--count", "2", "--prefix", "r")
    assert c["errors"] == [] and r["errors"] == []
    assert all(c["transaction_ids"]) and len(set(c["transaction_ids"] + r["transaction_ids"])) == 5
    got = run_client(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "5",
                     "--timeout", "5")
    assert sorted(bodies_of(got["received"])) == ["c-0", "c-1", "c-2"]


@pytest.mark.parametrize("answer,visible", [("orphan-commit", True), ("orphan-rollback", False)])
def test_orphaned_transactions_are_resolved_by_the_transaction_checker(endpoint, answer, visible):
    topic = name(answer)
    res = run_client(endpoint, "transaction", "--topic", topic, "--mode", answer, "--count", "2",
                     "--prefix", "o", "--timeout", "30")
    assert res["errors"] == []
    assert res["checked"] == ["o-0", "o-1"], "the broker's check-back never reached the checker"
    got = run_client(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "2",
                     "--timeout", "3" if not visible else "15")
    assert sorted(bodies_of(got["received"])) == (["o-0", "o-1"] if visible else [])


def test_unacked_messages_are_redelivered_with_a_growing_attempt(endpoint):
    topic = name("redeliver")
    run_client(endpoint, "produce", "--topic", topic, "--count", "3")
    got = run_client(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "3",
                     "--behaviour", "nack-once", "--invisible", "1", "--timeout", "20")
    attempts = Counter((r["body"], r["attempt"]) for r in got["received"])
    assert {b for b, a in attempts if a == 1} == {"m-0", "m-1", "m-2"}
    assert {b for b, a in attempts if a == 2} == {"m-0", "m-1", "m-2"}
    assert all(r["acked"] for r in got["received"] if r["attempt"] == 2)


def test_change_invisible_duration_brings_a_message_back_sooner(endpoint):
    topic = name("civ")
    run_client(endpoint, "produce", "--topic", topic, "--count", "2")
    got = run_client(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "2",
                     "--behaviour", "change-invisible", "--invisible", "60", "--change-to", "1", "--timeout", "20")
    assert got["errors"] == []
    again = [r for r in got["received"] if r["attempt"] == 2]
    assert sorted(r["body"] for r in again) == ["m-0", "m-1"]


def test_push_consumer_consumes_everything_exactly_once(endpoint):
    topic = name("push")
    sent = run_client(endpoint, "produce", "--topic", topic, "--count", "30", "--async")
    assert sent["errors"] == []
    got = run_client(endpoint, "push", "--topic", topic, "--group", name("g"), "--expect", "30",
                     "--timeout", "40", "--linger", "2")
    assert Counter(got["bodies"]) == Counter(f"m-{i}" for i in range(30))


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

@pytest.fixture(scope="module")
def auth_endpoint(tmp_path_factory):
    data = tmp_path_factory.mktemp("auth-broker")
    auth = data / "auth.toml"
    auth.write_text('[[accounts]]\naccess_key = "orders-app"\nsecret_key = "s3cret"\n'
                    'producer_groups = ["orders"]\npublish = ["*"]\nsubscribe = ["*"]\n')
    with BrokerProcess(data / "store", flush="async", extra_args=["--auth-file", str(auth)]) as proc:
        yield proc.endpoint


def test_right_keys_pass(auth_endpoint):
    topic = name("auth")
    sent = run_client(auth_endpoint, "produce", "--topic", topic, "--count", "2", ak="orders-app", sk="s3cret")
    assert sent.get("errors") == [] and len(sent["sent"]) == 2
    got = run_client(auth_endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "2",
                     ak="orders-app", sk="s3cret")
    assert sorted(bodies_of(got["received"])) == ["m-0", "m-1"]


@pytest.mark.parametrize("ak,sk", [("orders-app", "wrong"), ("nobody", "s3cret"), ("", "")])
def test_wrong_or_absent_keys_are_refused(auth_endpoint, ak, sk):
    sent = run_client(auth_endpoint, "produce", "--topic", name("auth"), "--count", "1", ak=ak, sk=sk)
    assert sent.get("fatal") or (sent["errors"] and not sent["sent"])


def test_producer_over_tls(tmp_path):
    import shutil
    import subprocess
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=txmq-test",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    with BrokerProcess(tmp_path / "store", flush="async",
                       extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]) as proc:
        sent = run_client(proc.endpoint, "--tls", "produce", "--topic", name("tls"), "--count", "2",
                          env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)})
    assert sent.get("errors") == [] and len(sent["sent"]) == 2
