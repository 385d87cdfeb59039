"""TransactionProducer: RocketMQ's listener model over the native service."""

from __future__ import annotations

import time

import pytest

from tests.client.helpers import bodies, read_all
from txmq.broker.client import LocalTransactionState, Message, TransactionProducer


class Listener:
    """Records calls; answers `execute` then `check` from fixed values."""

    def __init__(self, execute, check="COMMIT"):
        self.execute, self.check = execute, check
        self.executed, self.checked = [], []

    def execute_local_transaction(self, message, arg):
        self.executed.append((message, arg))
        if isinstance(self.execute, Exception):
            raise self.execute
        return self.execute

    def check_local_transaction(self, message):
        self.checked.append(message)
        return self.check


def _wait_state(client, tx_id, state, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while client.get_transaction(tx_id).state != state and time.monotonic() < deadline:
        time.sleep(0.1)
    return client.get_transaction(tx_id).state


@pytest.fixture
def make_producer(client, unique):
    producers = []

    def make(listener):
        p = TransactionProducer(client, f"pg_{unique}", listener).start()
        producers.append(p)
        return p

    yield make
    for p in producers:
        p.shutdown()


def test_commit_from_the_local_transaction_publishes_the_message(client, topic, make_producer):
    listener = Listener(LocalTransactionState.COMMIT)
    result = make_producer(listener).send_message_in_transaction(Message(topic=topic, body=b"paid"), arg={"id": 1})
    assert (result.local_state, result.state) == (LocalTransactionState.COMMIT, "COMMITTED")
    message, arg = listener.executed[0]
    assert message.transaction_id == result.transaction_id and message.body == b"paid" and arg == {"id": 1}
    assert bodies(read_all(client, topic)) == [b"paid"]


def test_rollback_from_the_local_transaction_publishes_nothing(client, topic, make_producer):
    result = make_producer(Listener("ROLLBACK")).send_message_in_transaction(Message(topic=topic, body=b"x"))
    assert result.state == "ROLLED_BACK"
    assert len(read_all(client, topic)) == 0


def test_unknown_is_resolved_by_check_back(client, topic, make_producer):
    listener = Listener("UNKNOWN", check="COMMIT")
    result = make_producer(listener).send_message_in_transaction(Message(topic=topic, body=b"late"))
    assert result.state == "PENDING"
    assert _wait_state(client, result.transaction_id, "COMMITTED") == "COMMITTED"
    assert listener.checked[0].transaction_id == result.transaction_id
    assert bodies(read_all(client, topic)) == [b"late"]


def test_exception_in_local_transaction_counts_as_unknown(client, topic, make_producer):
    listener = Listener(RuntimeError("db timeout"), check="ROLLBACK")
    result = make_producer(listener).send_message_in_transaction(Message(topic=topic, body=b"x"))
    assert result.local_state is LocalTransactionState.UNKNOWN
    assert _wait_state(client, result.transaction_id, "ROLLED_BACK") == "ROLLED_BACK"


def test_many_messages_in_one_transaction_become_visible_together(client, topic, make_producer):
    listener = Listener("COMMIT")
    msgs = [Message(topic=topic, body=f"b{i}".encode()) for i in range(5)]
    result = make_producer(listener).send_messages_in_transaction(msgs)
    assert result.count == 5 and len(listener.executed[0][0]) == 5
    assert len(read_all(client, topic)) == 5


def test_bad_state_from_listener_is_treated_as_unknown(client, topic, make_producer):
    result = make_producer(Listener("MAYBE", check="ROLLBACK")).send_message_in_transaction(
        Message(topic=topic, body=b"x"))
    assert result.state == "PENDING"
    assert _wait_state(client, result.transaction_id, "ROLLED_BACK") == "ROLLED_BACK"
