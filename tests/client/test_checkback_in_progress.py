"""A producer still working on a transaction answers its check-backs IN_PROGRESS: the broker asks
again later without counting them towards --max-checks (issue 38: a Spark micro-batch that ran
longer than --max-checks x --check-interval was discarded and its COMMIT refused). Once nobody
answers so, its checks count as before and it is discarded."""

from __future__ import annotations

import time

import pytest

from tests.client.helpers import bodies_batch
from tests.support.broker_process import BrokerProcess
from txmq.broker.client import NativeClient

# two checks 0.2 s apart: a transaction left to UNKNOWN answers is discarded within about a second
FLAGS = ["--transaction-timeout", "0.2s", "--check-interval", "0.2s", "--max-checks", "2"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker") / "data", flush="async", extra_args=FLAGS) as proc:
        yield proc


def test_a_transaction_answered_in_progress_outlives_max_checks_and_is_discarded_once_answers_stop(broker):
    with NativeClient(broker.endpoint, timeout_s=20) as client:
        client.create_topic("sink-out", 2)
        with client.checkback_session("sink", ["sink-out"], lambda request: "IN_PROGRESS") as session:
            assert session.wait_registered(10)
            tx = client.prepare_arrow("", bodies_batch(3), topic="sink-out", producer_group="sink",
                                      sender="p0").transaction_id
            time.sleep(4.0)  # ten times max_checks x check interval
            info = client.get_transaction(tx)
            assert info.state == "PENDING"
            assert info.check_times < 2
            assert session.in_progress >= 5
        # the producer is gone; another of its group (an earlier release) can only answer UNKNOWN
        with client.checkback_session("sink", ["sink-out"], lambda request: "UNKNOWN") as other:
            assert other.wait_registered(10)
            deadline = time.monotonic() + 10
            while client.get_transaction(tx).state == "PENDING":
                assert time.monotonic() < deadline, "never discarded once the IN_PROGRESS answers stopped"
                time.sleep(0.1)
        assert client.get_transaction(tx).state == "DISCARDED"
