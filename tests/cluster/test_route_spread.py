"""How a topic's queues are dealt over groups (pure: no etcd)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from txmq.broker.cluster.routes import QueueRef, spread
from txmq.broker.errors import IllegalQueue

groups_st = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=5, unique=True)


@given(st.integers(1, 40), groups_st, st.integers(0, 10))
def test_queues_are_dealt_round_robin_each_group_numbering_its_own_from_zero(n, groups, first):
    queues = spread(n, groups, first=first)
    assert len(queues) == n
    counts = {g: sum(1 for q in queues if q.group == g) for g in groups}
    assert max(counts.values()) - min(counts.values()) <= 1
    for g in groups:
        assert [q.queue_id for q in queues if q.group == g] == list(range(counts[g]))


@given(st.integers(1, 20), st.integers(0, 20), groups_st, groups_st)
def test_growing_keeps_every_existing_queue_where_it_was(n, more, before, after):
    old = spread(n, before)
    grown = spread(n + more, after, old)
    assert grown[:n] == old
    assert len(set(grown)) == len(grown)


def test_shrinking_is_refused():
    with pytest.raises(IllegalQueue, match="cannot shrink"):
        spread(1, ["a"], (QueueRef("a", 0), QueueRef("a", 1)))
