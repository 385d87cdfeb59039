"""Check-back sessions: the broker asks a live session about orphaned transactions."""

from __future__ import annotations

import threading
import time

from tests.client.helpers import bodies, bodies_batch, read_all


def _wait_state(client, tx_id: str, state: str, timeout_s: float = 15.0) -> str:
    deadline = time.monotonic() + timeout_s
    current = client.get_transaction(tx_id).state
    while current != state and time.monotonic() < deadline:
        time.sleep(0.1)
        current = client.get_transaction(tx_id).state
    return current


def test_session_answering_commit_makes_the_orphan_visible(client, topic, unique):
    group = f"g_{unique}"
    asked = []

    def handler(request):
        asked.append(request)
        return "COMMIT"

    with client.checkback_session(group, [topic], handler) as session:
        assert session.wait_registered(10)
        prep = client.prepare_arrow("", bodies_batch(3), topic=topic, producer_group=group, sender="s")
        assert _wait_state(client, prep.transaction_id, "COMMITTED") == "COMMITTED"
    assert bodies(read_all(client, topic)) == [b"m0", b"m1", b"m2"]
    request = asked[0]
    assert request.transaction_id == prep.transaction_id
    assert request.message is not None and request.message.topic == topic
    assert request.message.body in {b"m0", b"m1", b"m2"}


def test_session_answering_rollback_discards_the_orphan(client, topic, unique):
    group = f"g_{unique}"
    with client.checkback_session(group, [topic], lambda request: "ROLLBACK") as session:
        assert session.wait_registered(10)
        prep = client.prepare_arrow("", bodies_batch(2), topic=topic, producer_group=group, sender="s")
        assert _wait_state(client, prep.transaction_id, "ROLLED_BACK") == "ROLLED_BACK"
    assert len(read_all(client, topic)) == 0


def test_unknown_answers_are_asked_again_until_decided(client, topic, unique):
    group = f"g_{unique}"
    answers = ["UNKNOWN", "UNKNOWN", "COMMIT"]
    seen = threading.Event()

    def handler(request):
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        seen.set()
        return answer

    with client.checkback_session(group, [topic], handler) as session:
        assert session.wait_registered(10)
        prep = client.prepare_arrow("", bodies_batch(1), topic=topic, producer_group=group, sender="s")
        assert _wait_state(client, prep.transaction_id, "COMMITTED") == "COMMITTED"
        assert session.checks >= 3


def test_a_closed_session_gets_no_more_checks(client, topic, unique):
    group = f"g_{unique}"
    calls = []
    session = client.checkback_session(group, [topic], lambda r: calls.append(r) or "UNKNOWN")
    assert session.wait_registered(10)
    session.close()
    prep = client.prepare_arrow("", bodies_batch(1), topic=topic, producer_group=group, sender="s")
    time.sleep(2.0)
    assert calls == []
    assert client.get_transaction(prep.transaction_id).state == "PENDING"
    client.end_transaction(prep.transaction_id, "ROLLBACK")


def test_a_failing_handler_does_not_end_the_session(client, topic, unique):
    group = f"g_{unique}"
    calls = []

    def handler(request):
        calls.append(request)
        if len(calls) == 1:
            raise RuntimeError("local database is down")
        return "COMMIT"

    with client.checkback_session(group, [topic], handler) as session:
        assert session.wait_registered(10)
        prep = client.prepare_arrow("", bodies_batch(1), topic=topic, producer_group=group, sender="s")
        assert _wait_state(client, prep.transaction_id, "COMMITTED") == "COMMITTED"
