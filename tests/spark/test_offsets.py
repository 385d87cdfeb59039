"""Offset model and pure planning: JSON round trip, spec resolution, limit split, partitions."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txmq.spark import offsets as off
from txmq.spark.options import InvalidOption

cuts = st.dictionaries(st.sampled_from(["a", "b", "c"]),
                       st.dictionaries(st.tuples(st.just(""), st.integers(0, 7)), st.integers(0, 10**9), min_size=1),
                       min_size=1)
cluster_cuts = st.dictionaries(st.sampled_from(["a", "b", "c"]),
                               st.dictionaries(st.tuples(st.sampled_from(["g1", "g2", "0"]), st.integers(0, 7)),
                                               st.integers(0, 10**9), min_size=1), min_size=1)


def q(cut: dict) -> dict:
    """A cut of a lone broker's queues, written with bare queue ids."""
    return {t: {("", k): v for k, v in queues.items()} for t, queues in cut.items()}


@given(cuts)
def test_json_round_trip_keeps_the_cut(cut):
    assert off.from_json(off.to_json(cut)) == cut


@given(cluster_cuts)
def test_json_round_trip_keeps_a_cluster_cut(cut):
    assert off.from_json(off.to_json(cut)) == cut


def test_json_form_has_string_queue_ids():
    assert off.to_json(q({"t": {1: 5, 0: 3}})) == {"t": {"0": 3, "1": 5}}


def test_json_form_of_a_cluster_is_keyed_by_group():
    assert off.to_json({"t": {("g2", 0): 4, ("g1", 1): 5, ("g1", 0): 3}}) == {"t": {"g1": {"0": 3, "1": 5},
                                                                                  "g2": {"0": 4}}}


def test_spec_resolves_earliest_and_latest_markers():
    earliest, latest = q({"t": {0: 2, 1: 0}}), q({"t": {0: 10, 1: 7}})
    assert off.resolve_spec(q({"t": {0: -2, 1: -1}}), earliest, latest, option="o") == q({"t": {0: 2, 1: 7}})


def test_spec_leaves_unnamed_queues_at_earliest():
    assert off.resolve_spec(q({"t": {1: 4}}), q({"t": {0: 1, 1: 0}}), q({"t": {0: 9, 1: 9}}),
                            option="o") == q({"t": {0: 1, 1: 4}})


@pytest.mark.parametrize("spec, named", [({"x": {0: 1}}, "topic 'x'"), ({"t": {9: 1}}, "no queue 9"),
                                         ({"t": {0: 99}}, "beyond")])
def test_spec_naming_missing_things_is_refused(spec, named):
    with pytest.raises(InvalidOption, match=named):
        off.resolve_spec(q(spec), q({"t": {0: 0}}), q({"t": {0: 10}}), option="startingOffsets")


def test_new_queues_start_at_their_earliest():
    assert off.with_new_queues(q({"t": {0: 5}}), q({"t": {0: 9, 1: 3}, "u": {0: 1}}), q({"t": {1: 1}})) == \
        q({"t": {0: 5, 1: 1}, "u": {0: 0}})


def test_limit_is_split_by_backlog():
    start, latest = {"t": {0: 0, 1: 0, 2: 0}}, {"t": {0: 300, 1: 100, 2: 0}}
    assert off.split_limit(start, latest, 100) == {"t": {0: 75, 1: 25, 2: 0}}


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=6), st.integers(1, 3000))
def test_limit_split_never_exceeds_limit_or_backlog(lags, limit):
    start = {"t": {q: 10 for q in range(len(lags))}}
    latest = {"t": {q: 10 + n for q, n in enumerate(lags)}}
    end = off.split_limit(start, latest, limit)
    assert all(start["t"][q] <= end["t"][q] <= latest["t"][q] for q in start["t"])
    assert off.total(end) - off.total(start) == min(limit, sum(lags))


def test_ranges_are_split_by_rows_per_partition_deterministically():
    ranges = off.plan_ranges(q({"t": {0: 0}}), q({"t": {0: 25, 1: 3}}), 10)
    assert [(r.queue_id, r.start, r.end) for r in ranges] == [(0, 0, 10), (0, 10, 20), (0, 20, 25), (1, 0, 3)]
    assert ranges == off.plan_ranges(q({"t": {0: 0}}), q({"t": {0: 25, 1: 3}}), 10)


def test_a_cluster_plans_one_range_per_group_and_queue():
    ranges = off.plan_ranges({}, {"t": {("g2", 0): 2, ("g1", 0): 1}}, 10)
    assert [(r.group, r.queue_id, r.start, r.end) for r in ranges] == [("g1", 0, 0, 1), ("g2", 0, 0, 2)]


def test_empty_range_plans_no_partition():
    assert off.plan_ranges(q({"t": {0: 4}}), q({"t": {0: 4}}), 10) == []
