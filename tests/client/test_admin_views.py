"""The native admin views the console reads: ClusterStatus, TransactionSummary and ListScheduled."""

from __future__ import annotations

import time

import pytest

from tests.support.broker_process import BrokerProcess
from txmq.broker import errors
from txmq.broker.client import Message, NativeClient

AUTH = """
[[accounts]]
access_key = "app"
secret_key = "app-secret"
producer_groups = ["app"]
publish = ["*"]
subscribe = ["*"]
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("admin-views") / "data", flush="async") as proc:
        yield proc


def test_a_lone_broker_reports_one_unnamed_group_whose_one_replica_leads(broker):
    with NativeClient(broker.endpoint) as c:
        (group,) = c.cluster_status()
    assert (group.name, group.leader, group.epoch) == ("", broker.endpoint, 0)
    (me,) = group.members
    assert (me.endpoint, me.role, me.in_sync, me.alive, me.lag_bytes) == (broker.endpoint, "leader", True, True, 0)


def test_pending_transactions_are_counted_by_producer_group_and_topic_until_they_end(broker):
    with NativeClient(broker.endpoint) as c:
        a = c.prepare("", [Message("views-a", b"1"), Message("views-b", b"2")], producer_group="pg-x")
        b = c.prepare("", [Message("views-a", b"3")], producer_group="pg-x")
        d = c.prepare("", [Message("views-a", b"4")], producer_group="pg-y")
        counts = {(p.producer_group, p.topic): p.transactions for p in c.transaction_summary()[0]
                  if p.topic.startswith("views-")}
        assert counts == {("pg-x", "views-a"): 2, ("pg-x", "views-b"): 1, ("pg-y", "views-a"): 1}
        oldest = {(p.producer_group, p.topic): p.oldest_age_ms for p in c.transaction_summary()[0]}
        assert oldest[("pg-x", "views-a")] >= oldest[("pg-y", "views-a")] >= 0
        for tx in (a, b, d):
            c.end_transaction(tx.transaction_id, "COMMIT")
        assert not [p for p in c.transaction_summary()[0] if p.topic.startswith("views-")]


def test_the_views_are_refused_to_an_account_that_is_not_admin(tmp_path):
    (tmp_path / "auth.toml").write_text(AUTH)
    with BrokerProcess(tmp_path / "data", flush="async", extra_args=["--auth-file", str(tmp_path / "auth.toml")]) as b:
        with NativeClient(b.endpoint, access_key="app", secret_key="app-secret") as c:
            with pytest.raises(errors.Forbidden):
                c.cluster_status()
            with pytest.raises(errors.Forbidden):
                c.transaction_summary()
            with pytest.raises(errors.Forbidden):
                c.list_scheduled()


def test_scheduled_messages_are_counted_by_due_time_and_listed_soonest_first(broker):
    now = int(time.time() * 1000)
    with NativeClient(broker.endpoint) as c:
        c.create_topic("views-timed", 1)
        ids = c.send([Message("views-timed", f"{i}".encode(), deliver_at_ms=now + 3_600_000 - i * 60_000)
                      for i in range(3)]).message_ids
        deadline = time.monotonic() + 5
        while (view := c.list_scheduled(bucket_ms=60_000)).pending < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # the timer indexes new scheduled records every 50 ms
    mine = [m for m in view.soonest if m.topic == "views-timed"]
    assert [m.message_id for m in mine] == ids[::-1]
    assert [m.deliver_ms for m in mine] == sorted(m.deliver_ms for m in mine)
    assert sum(n for _, n in view.buckets) == view.pending >= 3
    assert all(start % 60_000 == 0 for start, _ in view.buckets)


def test_a_recalled_scheduled_message_leaves_the_list_and_cannot_be_recalled_twice(broker):
    with NativeClient(broker.endpoint) as c:
        c.create_topic("views-recall", 1)
        (mid,) = c.send([Message("views-recall", b"x", deliver_at_ms=int(time.time() * 1000) + 600_000)]).message_ids
        deadline = time.monotonic() + 5
        while not (mine := [m for m in c.list_scheduled(limit=1000).soonest if m.message_id == mid]):
            assert time.monotonic() < deadline, "the scheduled message was never listed"
            time.sleep(0.05)
        assert c.recall_scheduled("views-recall", mine[0].recall_handle) == mid
        assert not [m for m in c.list_scheduled(limit=1000).soonest if m.message_id == mid]
        with pytest.raises(errors.MessageNotFound):
            c.recall_scheduled("views-recall", mine[0].recall_handle)
