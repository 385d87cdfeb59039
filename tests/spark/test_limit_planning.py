"""The trigger limit is split into a consistent cut: no transaction is ever torn across batches.

Runs the planner against an in-memory model of the broker's queues (store time
per message, transaction id per message, one store time per commit group, as
the store appends them), so hypothesis can try many layouts quickly.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.client.types import TopicInfo
from txmq.spark import offsets as off
from txmq.spark.options import SourceOptions
from txmq.spark.source import _Planner

TOPIC = "t"


@dataclass
class _Pull:
    batch: pa.RecordBatch
    next_offset: int


class QueuesModel:
    """Queues of (store_ms, transaction id) in commit order: a PlannerClient (connector/client_seam.py)."""

    def __init__(self, groups: list[tuple[int, str | None, list[int]]]) -> None:
        self.queues: dict[int, list[tuple[int, str | None]]] = {q: [] for q in range(4)}
        self.groups = groups
        for ms, tx, queues in groups:
            for q in queues:
                self.queues[q].append((ms, tx))

    def pull_arrow(self, topic, queue_id, start, end, *, tags=None, max_bytes=0):
        rows = self.queues[queue_id][start:end]
        batch = pa.RecordBatch.from_pydict({
            "storeTimestamp": pa.array([ms * 1000 for ms, _ in rows], pa.timestamp("us", tz="UTC")),
            "transactionId": pa.array([tx for _, tx in rows], pa.string()),
        })
        return _Pull(batch, start + len(rows))

    def read_queue(self, topic, queue_id, start, end, *, tags=None, sql=None, batch_bytes=0):
        yield self.pull_arrow(topic, queue_id, start, end)

    def offsets_for_timestamp(self, topics, timestamp_ms):
        return {TOPIC: {q: next((i for i, (ms, _) in enumerate(rows) if ms >= timestamp_ms), len(rows))
                        for q, rows in self.queues.items()}}

    def list_topics(self, *, include_system=False):
        return [TopicInfo(TOPIC, len(self.queues), 6, {})]

    def snapshot_offsets(self, topics):
        return self.latest()

    def min_offsets(self, topics):
        return {TOPIC: {q: 0 for q in self.queues}}

    def wait_for_offsets(self, topics, known, timeout_ms):
        return self.latest()

    def commit_offsets(self, group, offsets):
        pass

    def close(self):
        pass

    def latest(self) -> off.Cut:
        return {TOPIC: {q: len(rows) for q, rows in self.queues.items()}}

    def cut_after_groups(self, n: int) -> off.Cut:
        return QueuesModel(self.groups[:n]).latest()

    def torn(self, start: off.Cut, end: off.Cut) -> set[str]:
        inside, outside = set(), set()
        for q, rows in self.queues.items():
            for i, (_, tx) in enumerate(rows):
                if tx and start[TOPIC][q] <= i:
                    (inside if i < end[TOPIC][q] else outside).add(tx)
        return inside & outside


def planner_for(model: QueuesModel) -> _Planner:
    planner = _Planner(SourceOptions.parse({"broker": "h:1", "topic": TOPIC}, streaming=True))
    planner._client = model
    return planner


group_lists = st.lists(
    st.tuples(st.integers(0, 2), st.booleans(), st.lists(st.integers(0, 3), min_size=1, max_size=6)),
    min_size=1, max_size=40)


def build(raw) -> QueuesModel:
    ms, groups = 1000, []
    for i, (step, transactional, queues) in enumerate(raw):
        ms += step
        groups.append((ms, f"tx{i}" if transactional else None, sorted(queues)))
    return QueuesModel(groups)


@settings(max_examples=300, deadline=None)
@given(group_lists, st.data(), st.integers(1, 30))
def test_limited_batches_never_tear_a_transaction_and_always_progress(raw, data, limit):
    model = build(raw)
    start = model.cut_after_groups(data.draw(st.integers(0, len(model.groups) - 1)))
    end = planner_for(model).limited_end(start, model.latest(), limit)
    assert model.torn(start, end) == set()
    assert off.total(end) > off.total(start)
    assert all(start[TOPIC][q] <= end[TOPIC][q] <= model.latest()[TOPIC][q] for q in range(4))


def test_limit_is_respected_when_transactions_are_small():
    groups = [(1000 + i // 5, f"tx{i}", [i % 4, (i + 1) % 4]) for i in range(50)]
    model = QueuesModel(groups)
    start = model.cut_after_groups(0)
    end = planner_for(model).limited_end(start, model.latest(), 10)
    assert 0 < off.total(end) - off.total(start) <= 10
    assert model.torn(start, end) == set()


@pytest.mark.timeout(20)
def test_a_torn_transaction_behind_another_message_still_ends_the_planning():
    """Queue 0 holds [A, B, ...later], queue 1 holds [A], A and B stored in the same ms. A limit of
    2 proposes A and B on queue 0 and nothing on queue 1: A is torn, and the message before the
    cut (B) is not A's. The planner must move the cut back past A, not spin."""
    model = QueuesModel([(1000, "A", [0, 1]), (1000, None, [0])] + [(1001 + i, None, [0]) for i in range(8)])
    start = {TOPIC: {q: 0 for q in range(4)}}
    end = planner_for(model).limited_end(start, model.latest(), 2)
    assert model.torn(start, end) == set()
    assert off.total(end) > off.total(start)
