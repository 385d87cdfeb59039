"""Queue allocation among a consumer group's members: every queue to exactly one member."""

from __future__ import annotations

from hypothesis import given, strategies as st

from txmq.broker.client.allocation import allocate, average, consistent_hash

members_st = st.lists(st.text(alphabet="abcdefgh0123456789", min_size=1, max_size=6), min_size=1, max_size=8,
                      unique=True)


@given(st.integers(0, 40), members_st, st.sampled_from(["average", "consistent_hash"]))
def test_every_queue_goes_to_exactly_one_member(n, members, strategy):
    queues = [("g", i) for i in range(n)]
    shares = [allocate(strategy, queues, members, m) for m in members]
    flat = [q for share in shares for q in share]
    assert sorted(flat) == sorted(queues)


@given(st.integers(0, 40), members_st)
def test_average_shares_differ_by_at_most_one(n, members):
    sizes = [len(average(list(range(n)), members, m)) for m in members]
    assert max(sizes) - min(sizes) <= 1


def test_average_gives_contiguous_runs_the_first_members_one_more():
    queues = list(range(8))
    assert [average(queues, ["a", "b", "c"], m) for m in "abc"] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_a_member_outside_the_group_gets_nothing():
    assert average([1, 2], ["a"], "z") == [] and consistent_hash([1, 2], ["a"], "z") == []


def test_consistent_hash_moves_few_queues_when_a_member_joins():
    queues = [("g", i) for i in range(200)]
    before = {q: m for m in ["a", "b", "c", "d"] for q in consistent_hash(queues, ["a", "b", "c", "d"], m)}
    after = {q: m for m in ["a", "b", "c", "d", "e"] for q in consistent_hash(queues, ["a", "b", "c", "d", "e"], m)}
    moved = sum(1 for q in queues if before[q] != after[q])
    assert moved < len(queues) * 0.45  # about a fifth, far from the reshuffle average allocation makes
    assert all(after[q] == "e" for q in queues if before[q] != after[q])
