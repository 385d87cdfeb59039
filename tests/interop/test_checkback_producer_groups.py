"""Check-back asks only a producer that can know the answer (issue 38, item 6): with a native
TransactionProducer (producer group "pg-native") and the official Python client (which declares
no group) publishing one topic, each is asked about its own transactions only, as Apache's broker
routes a check by the half's producer group."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.interop.conftest import official_client_available, run_client
from tests.support.broker_process import BrokerProcess
from txmq.broker.client import TransactionProducer
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import LocalTransactionState, Message

pytestmark = [pytest.mark.interop,
              pytest.mark.skipif(not official_client_available(), reason="no .venv-rocketmq (make interop-venv)")]


class Undecided:
    """A native producer's listener: leaves each transaction to check-back, then commits it."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self._lock = threading.Lock()

    def execute_local_transaction(self, message, arg) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, message) -> LocalTransactionState:
        with self._lock:
            self.asked.append(message.transaction_id)
        return LocalTransactionState.COMMIT


def wait_states(client: NativeClient, ids: list[str], state: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while {client.get_transaction(t).state for t in ids} != {state}:
        assert time.monotonic() < deadline, {t: client.get_transaction(t).state for t in ids}
        time.sleep(0.2)


def test_each_producer_group_is_asked_only_about_its_own_transactions(tmp_path):
    topic = f"shared-{uuid.uuid4().hex[:8]}"
    with BrokerProcess(tmp_path / "broker", flush="async",
                       extra_args=["--transaction-timeout", "1s", "--check-interval", "1s"]) as broker, \
            NativeClient(broker.endpoint) as admin:
        admin.create_topic(topic, 2)
        listener = Undecided()
        with TransactionProducer(broker.endpoint, "pg-native", listener, topics=[topic]) as native:
            mine = [native.send_message_in_transaction(Message(topic, b"n-%d" % i)).transaction_id for i in range(2)]
            # the official client leaves two transactions and goes: only a publisher of the topic
            # without a producer group (another official client) can be asked about them now
            gone = run_client(broker.endpoint, "transaction", "--topic", topic, "--mode", "orphan-commit",
                              "--count", "2", "--prefix", "o", "--timeout", "0")
            assert gone["errors"] == []
            theirs = gone["transaction_ids"]
            wait_states(admin, mine, "COMMITTED", 20)
            time.sleep(3)  # three more check rounds: the official transactions are due, the native producer is live
            assert set(listener.asked) == set(mine), "the native producer was asked about another group's transactions"
            assert {admin.get_transaction(t).state for t in theirs} == {"PENDING"}
            another = run_client(broker.endpoint, "transaction", "--topic", topic, "--mode", "orphan-commit",
                                 "--count", "1", "--prefix", "p", "--timeout", "30", "--stay-s", "4")
            assert another["errors"] == []
            assert {"o-0", "o-1", "p-0"} <= set(another["checked"])
            wait_states(admin, theirs + another["transaction_ids"], "COMMITTED", 20)
            assert set(listener.asked) == set(mine)
