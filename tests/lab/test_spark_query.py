"""Issue 38's Spark workload: a txmq -> txmq streaming query (local[2] on a lab host of its own, given
every replica's endpoint) reads the topic the transactional writers write while the leader is
isolated by a silent drop, and copies it to an output topic. lab.checker judges the output: every
committed input message exactly once, nothing rolled back, no transaction torn, and a query that
kept making progress after the faults began and caught up with its input."""

from __future__ import annotations

import json

import pytest

from lab import campaign, checker

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]  # 3-15 min (Spark starts slowly on a loaded machine): `make lab`


@pytest.fixture
def spark_available():
    reason = campaign.spark_available()
    if reason:
        pytest.skip(reason)


def test_a_spark_query_copies_every_committed_message_once_through_a_leader_partition(lab_available, spark_available,
                                                                                     tmp_path):
    outcome = campaign.run(tmp_path / "run", ["leader-isolated"], rounds=2, hold_s=8, recover_s=4, writers=2,
                           with_consumer=False, official=False, query=True, log=lambda *_: None)
    assert not outcome.errors, outcome.errors
    result = outcome.result
    assert result.ok and result.committed > 0, result.summary()
    assert result.query is not None and result.query["caught_up"], result.query
    assert result.query["output"] >= result.committed, result.query
    # alive through the faults: micro-batches finished after the first one began (during the holds
    # themselves it may finish none: the group's failover and the sink's reconnection can outlast them)
    first_fault = min(json.loads(line)["start"] for line in (tmp_path / "run" / "faults.jsonl").read_text().splitlines()
                      if '"start"' in line)
    ops = checker.load(tmp_path / "run" / "histories")
    assert any(op["f"] == "query-progress" and op["rows"] and op["time"] > first_fault for op in ops)
    assert outcome.identical_logs is True
