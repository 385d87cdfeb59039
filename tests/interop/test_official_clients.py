"""The official RocketMQ 5 clients (Python, Java, Go, Node.js), unmodified, against a txmq broker process.

Every test runs once per client (`client` fixture), each client a separate process driven by
tests/interop/{clients/rmq.py,java,go,node}; a client that cannot be built here is skipped with why.
The expected values are what Apache RocketMQ's proxy gives the same client.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest

from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker as `txmq broker start` makes it (TLS and plaintext on its port), with check-backs soon."""
    data = tmp_path_factory.mktemp("interop-broker")
    with BrokerProcess(data, flush="sync",
                       extra_args=["--transaction-timeout", "1s", "--check-interval", "1s"]) as proc:
        yield proc


@pytest.fixture(scope="module")
def endpoint(broker):
    return broker.endpoint


@pytest.fixture(scope="module")
def admin(endpoint):
    from txmq.broker.client.native_client import NativeClient
    with NativeClient(endpoint) as c:
        yield c


def bodies_of(received: list[dict]) -> list[str]:
    return [r["body"] for r in received]


def receive(client, endpoint, topic: str, expect: int, *extra: str) -> dict:
    got = client.run(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", str(expect), *extra)
    assert "fatal" not in got, got
    return got


# --- sends and SendReceipt ------------------------------------------------------------------

def test_sync_sends_are_received_once_by_a_simple_consumer(client, endpoint):
    topic = name("sync")
    sent = client.run(endpoint, "produce", "--topic", topic, "--count", "10", "--tag", "tagA")
    assert sent["errors"] == [] and len(sent["sent"]) == 10
    got = receive(client, endpoint, topic, 10)
    assert got["errors"] == []
    assert sorted(bodies_of(got["received"])) == sorted(f"m-{i}" for i in range(10))
    assert {r["message_id"] for r in got["received"]} == {s["message_id"] for s in sent["sent"]}


def test_async_sends_all_succeed_with_distinct_message_ids(client, endpoint):
    sent = client.run(endpoint, "produce", "--topic", name("async"), "--count", "20", "--async")
    assert sent["errors"] == [] and len(sent["sent"]) == 20
    assert len({s["message_id"] for s in sent["sent"]}) == 20


def test_a_send_receipt_carries_the_message_id_as_transaction_id(client, endpoint):
    sent = client.run(endpoint, "produce", "--topic", name("receipt"), "--count", "3")
    assert sent["errors"] == []
    for s in sent["sent"]:
        assert s["transaction_id"] == s["message_id"]


def test_send_receipts_of_one_group_carry_consecutive_queue_offsets(client, endpoint):
    sent = client.run(endpoint, "produce", "--topic", name("offsets"), "--count", "4", "--message-group", "g")
    assert [s["offset"] for s in sent["sent"]] == [0, 1, 2, 3]


# --- FIFO -----------------------------------------------------------------------------------

def test_fifo_messages_of_one_group_are_received_in_send_order(client, endpoint):
    topic = name("fifo")
    assert client.run(endpoint, "produce", "--topic", topic, "--count", "8", "--message-group", "order-42")["errors"] == []
    got = receive(client, endpoint, topic, 8)
    assert bodies_of(got["received"]) == [f"m-{i}" for i in range(8)]


def test_a_received_fifo_message_carries_its_group_and_the_sharding_key_property(client, endpoint):
    topic = name("fifo-group")
    client.run(endpoint, "produce", "--topic", topic, "--count", "1", "--message-group", "order-7")
    m = receive(client, endpoint, topic, 1)["received"][0]
    assert m["message_group"] == "order-7"
    assert m["properties"] == {"origin": "interop", "__SHARDINGKEY": "order-7"}


# --- transactions ---------------------------------------------------------------------------

def test_committed_transactions_are_visible_and_rolled_back_ones_never(client, endpoint):
    topic = name("tx")
    c = client.run(endpoint, "transaction", "--topic", topic, "--mode", "commit", "--count", "3", "--prefix", "c")
    r = client.run(endpoint, "transaction", "--topic", topic, "--mode", "rollback", "--count", "2", "--prefix", "r")
    assert c["errors"] == [] and r["errors"] == []
    tx_ids = [s["transaction_id"] for s in c["sent"] + r["sent"]]
    assert all(tx_ids) and len(set(tx_ids)) == 5
    got = receive(client, endpoint, topic, 5, "--timeout", "3")  # all five are due: 3 s shows any
    assert sorted(bodies_of(got["received"])) == ["c-0", "c-1", "c-2"]


def test_a_received_transactional_message_carries_its_transaction_id_property(client, endpoint):
    topic = name("tx-prop")
    c = client.run(endpoint, "transaction", "--topic", topic, "--mode", "commit", "--count", "1")
    m = receive(client, endpoint, topic, 1)["received"][0]
    assert m["properties"]["__transactionId__"] == c["sent"][0]["transaction_id"]
    assert m["message_id"] == c["sent"][0]["message_id"]


@pytest.mark.parametrize("answer,visible", [("orphan-commit", True), ("orphan-rollback", False)])
def test_orphaned_transactions_are_resolved_by_the_transaction_checker(client, endpoint, answer, visible):
    topic = name(answer)
    res = client.run(endpoint, "transaction", "--topic", topic, "--mode", answer, "--count", "2",
                     "--prefix", "o", "--timeout", "30")
    assert res["errors"] == []
    assert res["checked"] == ["o-0", "o-1"], "the broker's check-back never reached the checker"
    got = receive(client, endpoint, topic, 2, "--timeout", "2" if not visible else "15")
    assert sorted(bodies_of(got["received"])) == (["o-0", "o-1"] if visible else [])


# --- SimpleConsumer -------------------------------------------------------------------------

def test_unacked_messages_are_redelivered_with_a_growing_delivery_attempt(client, endpoint):
    topic = name("redeliver")
    client.run(endpoint, "produce", "--topic", topic, "--count", "3")
    # 10 s: the least a receive may ask for, as the proxy's
    got = receive(client, endpoint, topic, 3, "--behaviour", "nack-once", "--invisible", "10", "--timeout", "40")
    attempts = Counter((r["body"], r["attempt"]) for r in got["received"])
    assert {b for b, a in attempts if a == 1} == {"m-0", "m-1", "m-2"}
    assert {b for b, a in attempts if a == 2} == {"m-0", "m-1", "m-2"}
    assert all(r["acked"] for r in got["received"] if r["attempt"] == 2)


def test_change_invisible_duration_brings_a_message_back_sooner(client, endpoint):
    topic = name("civ")
    client.run(endpoint, "produce", "--topic", topic, "--count", "2")
    got = receive(client, endpoint, topic, 2, "--behaviour", "change-invisible", "--invisible", "60",
                  "--change-to", "1", "--timeout", "20")
    assert got["errors"] == []
    again = [r for r in got["received"] if r["attempt"] == 2]
    assert sorted(r["body"] for r in again) == ["m-0", "m-1"]


def test_a_received_message_carries_its_tag_keys_and_user_properties(client, endpoint):
    topic = name("props")
    client.run(endpoint, "produce", "--topic", topic, "--count", "1", "--tag", "tagA")
    m = receive(client, endpoint, topic, 1)["received"][0]
    assert m["tag"] == "tagA" and m["keys"] == ["k-m-0"]
    assert m["properties"] == {"origin": "interop"}
    assert m["message_group"] is None


def test_a_received_message_carries_its_system_properties(client, endpoint):
    topic = name("sysprops")
    sent = client.run(endpoint, "produce", "--topic", topic, "--count", "1", "--message-group", "g")
    m = receive(client, endpoint, topic, 1)["received"][0]
    assert m["attempt"] == 1 and m["receipt_handle"]
    assert m["born_host"] and m["born_timestamp"] > 0
    assert m["delivery_timestamp"] is None
    if "offset" in m:  # the Python client does not expose the queue offset
        assert m["offset"] == sent["sent"][0]["offset"]


def test_no_received_message_is_marked_corrupted(client, endpoint):
    # bodies whose CRC32 begins with a zero nibble among them: a zero-padded CRC32 digest fails
    # the Java client's check, which writes the CRC32 without leading zeros
    topic = name("digest")
    client.run(endpoint, "produce", "--topic", topic, "--count", "40", "--async")
    got = receive(client, endpoint, topic, 40)
    assert len(got["received"]) == 40
    assert not any(r.get("corrupted") for r in got["received"])


def test_push_consumer_consumes_everything_exactly_once(client, endpoint):
    topic = name("push")
    assert client.run(endpoint, "produce", "--topic", topic, "--count", "30", "--async")["errors"] == []
    got = client.run(endpoint, "push", "--topic", topic, "--group", name("g"), "--expect", "30",
                     "--timeout", "40", "--linger", "2")
    assert Counter(got["bodies"]) == Counter(f"m-{i}" for i in range(30))


# --- message types --------------------------------------------------------------------------

def test_a_delay_message_arrives_at_its_delivery_time_not_before(client, endpoint):
    topic = name("delay")
    before_ms = time.time() * 1000
    sent = client.run(endpoint, "produce", "--topic", topic, "--count", "1", "--delay-s", "4")
    assert sent["errors"] == [] and len(sent["sent"]) == 1
    got = receive(client, endpoint, topic, 1)
    after_ms = time.time() * 1000
    assert got["errors"] == [] and bodies_of(got["received"]) == ["m-0"]
    due = got["received"][0]["delivery_timestamp"]
    assert before_ms + 4000 <= due <= after_ms  # received, and only once it was due


def test_a_fifo_message_to_a_normal_topic_is_refused(client, endpoint, admin):
    topic = name("normal-only")
    admin.create_topic(topic, 2, "NORMAL")
    sent = client.run(endpoint, "produce", "--topic", topic, "--count", "1", "--message-group", "g")
    assert sent["sent"] == [] and len(sent["errors"]) == 1


def test_a_fifo_topic_takes_fifo_messages(client, endpoint, admin):
    topic = name("fifo-only")
    admin.create_topic(topic, 2, "FIFO")
    sent = client.run(endpoint, "produce", "--topic", topic, "--count", "2", "--message-group", "g")
    assert sent["errors"] == [] and len(sent["sent"]) == 2


def test_a_transaction_topic_takes_transactional_messages(client, endpoint, admin):
    topic = name("tx-only")
    admin.create_topic(topic, 2, "TRANSACTION")
    res = client.run(endpoint, "transaction", "--topic", topic, "--mode", "commit", "--count", "1")
    assert res["errors"] == []


# --- authentication -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def auth_endpoint(tmp_path_factory):
    data = tmp_path_factory.mktemp("auth-broker")
    auth = data / "auth.toml"
    auth.write_text('[[accounts]]\naccess_key = "orders-app"\nsecret_key = "s3cret"\n'
                    'producer_groups = ["orders"]\npublish = ["*"]\nsubscribe = ["*"]\n')
    with BrokerProcess(data / "store", flush="async", extra_args=["--auth-file", str(auth)]) as proc:
        yield proc.endpoint


def test_right_keys_pass(client, auth_endpoint):
    topic = name("auth")
    sent = client.run(auth_endpoint, "produce", "--topic", topic, "--count", "2", ak="orders-app", sk="s3cret")
    assert sent.get("errors") == [] and len(sent["sent"]) == 2
    got = client.run(auth_endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "2",
                     ak="orders-app", sk="s3cret")
    assert sorted(bodies_of(got["received"])) == ["m-0", "m-1"]


@pytest.mark.parametrize("ak,sk", [("orders-app", "wrong"), ("nobody", "s3cret"), ("", "")],
                         ids=["wrong-secret", "unknown-key", "absent-keys"])
def test_wrong_or_absent_keys_are_refused(client, auth_endpoint, ak, sk):
    sent = client.run(auth_endpoint, "produce", "--topic", name("auth"), "--count", "1", ak=ak, sk=sk)
    assert sent.get("fatal") or (sent["errors"] and not sent["sent"])


# --- TLS: each client at its default, and at the other setting, on the one port --------------

DEFAULT_TLS = {"java": True, "go": True, "node": False, "python": False}  # each client's own default


# Every other test runs each client at its default: Java and Go dial TLS (trusting any certificate),
# Node.js and Python plaintext, all to the one port of a default broker.

def test_each_client_also_connects_with_the_other_tls_setting(client, broker):
    if DEFAULT_TLS[client.language]:
        extra, env = ["--plaintext"], None
    else:  # these clients verify the certificate: trust the one the broker generated
        extra, env = ["--tls"], {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(broker.data_dir / "tls" / "cert.pem"),
                                 "NODE_EXTRA_CA_CERTS": str(broker.data_dir / "tls" / "cert.pem")}
    sent = client.run(broker.endpoint, "produce", "--topic", name("tls-other"), "--count", "2", *extra, env=env)
    assert sent.get("errors") == [] and len(sent["sent"]) == 2, sent


# --- long polling within the call's deadline ----------------------------------------------------

def test_an_empty_receive_answers_message_not_found_before_the_calls_deadline(client, endpoint):
    # the Go and Python clients send no long_polling_timeout: the deadline (await + request timeout) rules
    started = time.monotonic()
    got = client.run(endpoint, "simple", "--topic", name("empty"), "--group", name("g"), "--expect", "1",
                     "--timeout", "6")
    assert got["received"] == [] and got["errors"] == [], got["errors"]
    assert got["batches"] == [0] * len(got["batches"])
    assert time.monotonic() - started < 30


def test_a_receive_with_no_await_answers_at_once(client, endpoint):
    got = client.run(endpoint, "simple", "--topic", name("no-await"), "--group", name("g"), "--expect", "1",
                     "--timeout", "4", "--await-s", "0")
    # no DEADLINE_EXCEEDED: the Go and Python clients then send no long_polling_timeout and a 3..5 s deadline
    assert got["received"] == [] and got["errors"] == [], got["errors"]


# --- the proxy's limits and answers ----------------------------------------------------------

def test_a_receive_hands_out_at_most_32_messages(client, endpoint):
    topic = name("batch")
    assert client.run(endpoint, "produce", "--topic", topic, "--count", "50", "--async")["errors"] == []
    got = receive(client, endpoint, topic, 50, "--batch", "50")
    assert len({r["body"] for r in got["received"]}) == 50
    assert max(got["batches"]) <= 32


def test_a_receive_asking_for_an_invisible_duration_under_10_s_is_refused(client, endpoint):
    topic = name("short-invisible")
    client.run(endpoint, "produce", "--topic", topic, "--count", "1")
    got = client.run(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "1",
                     "--invisible", "5", "--timeout", "3")
    assert got["received"] == []
    assert got["errors"] and all("invisibleTime is too small" in e or "40011" in e for e in got["errors"]), got


def test_an_ack_and_a_change_after_the_invisible_time_are_refused(drivers, endpoint):
    # one client, as the invisible time is at least 10 s: Python's, as the Go client's Ack
    # (v5.1.4) drops a refusal's status and reports success
    python = drivers("python")
    topic = name("expired")
    python.run(endpoint, "produce", "--topic", topic, "--count", "1")
    got = python.run(endpoint, "simple", "--topic", topic, "--group", name("g"), "--expect", "1",
                     "--behaviour", "ack-after-expiry", "--invisible", "10", "--timeout", "30")
    m = got["received"][0]
    assert not m["acked"]
    assert "receipt handle is expired" in m["ack_error"]
    assert "receipt handle is expired" in m["change_error"]


def test_a_10_kb_tag_is_sent_and_selected_by_an_expression_with_empty_tags(client, endpoint):
    topic, tag = name("big-tag"), "T" * 10_000
    sent = client.run(endpoint, "produce", "--topic", topic, "--count", "1", "--tag", tag)
    assert sent["errors"] == [], sent["errors"]
    got = receive(client, endpoint, topic, 1, "--tag", f"other||||{tag}")
    assert got["errors"] == [] and [r["tag"] for r in got["received"]] == [tag]


def test_a_delay_message_whose_time_is_past_arrives_at_once_with_its_delivery_timestamp(client, endpoint):
    topic = name("past-delay")
    before_ms = time.time() * 1000
    sent = client.run(endpoint, "produce", "--topic", topic, "--count", "1", "--delay-s", "-5")
    assert sent["errors"] == [], sent["errors"]
    m = receive(client, endpoint, topic, 1)["received"][0]
    assert m["delivery_timestamp"] is not None and m["delivery_timestamp"] < before_ms


def test_a_delay_beyond_24_hours_is_refused(client, endpoint):
    sent = client.run(endpoint, "produce", "--topic", name("far-delay"), "--count", "1", "--delay-s", str(25 * 3600))
    assert sent["sent"] == [] and len(sent["errors"]) == 1


@pytest.fixture(scope="module")
def strict_endpoint(tmp_path_factory):
    """A broker that creates no topic on first use, as Apache's proxy routes only existing ones."""
    data = tmp_path_factory.mktemp("no-auto-create")
    with BrokerProcess(data, flush="async", extra_args=["--no-auto-create-topics"]) as proc:
        yield proc.endpoint


def test_a_producer_of_a_missing_topic_fails_when_auto_creation_is_off(client, strict_endpoint):
    sent = client.run(strict_endpoint, "produce", "--topic", name("missing"), "--count", "1")
    assert sent.get("fatal") or (sent["errors"] and not sent["sent"]), sent


# --- a broker group ----------------------------------------------------------------------------

def test_a_tls_by_default_client_sends_to_a_broker_group_and_receives(drivers, group_factory):
    # every replica's port takes TLS beside plaintext, as a single broker's (Java: the Go client dials the same)
    driver = drivers("java")
    group = group_factory()
    topic = name("group-tls")
    sent = driver.run(group.endpoints, "produce", "--topic", topic, "--count", "3")
    assert sent.get("errors") == [] and len(sent["sent"]) == 3, sent
    got = receive(driver, group.endpoints, topic, 3)
    assert sorted(bodies_of(got["received"])) == ["m-0", "m-1", "m-2"]
