"""The final records a COMMIT asks for: the halves' copies, in the order the halves were stored."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.store.message import SYSFLAG_TRANSACTION_COMMIT
from txmq.broker.transaction.engine import _copies_of
from txmq.broker.transaction.state import HalfRef, HalfRefs, count_topics


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 500), st.sampled_from(["a", "b"]), st.integers(0, 3)), max_size=30),
       st.randoms(use_true_random=False))
def test_copies_follow_the_log_whatever_order_the_halves_were_added_in(rows, rnd):
    halves, at = [], 0
    for i, (size, topic, qid) in enumerate(rows):
        halves.append(HalfRef(at, size, i, topic, qid, "s"))
        at += size
    added = list(halves)
    rnd.shuffle(added)  # concurrent prepares land in any order
    copies = _copies_of(HalfRefs(added), None, None, SYSFLAG_TRANSACTION_COMMIT)
    assert list(copies.physical_offsets) == [h.physical_offset for h in halves]
    assert list(zip(copies.sizes, copies.topics, copies.queue_ids)) == [(h.size, h.real_topic, h.real_queue_id)
                                                                        for h in halves]


def test_copies_to_one_destination_take_its_topic_and_queue():
    halves = [HalfRef(0, 10, 0, "a", 1, "s"), HalfRef(10, 10, 1, "b", 2, "s")]
    copies = _copies_of(HalfRefs(halves), "PARKED", 0, 0)
    assert list(copies.topics) == ["PARKED", "PARKED"] and list(copies.queue_ids) == [0, 0]


def test_topics_are_counted_alike_for_one_topic_and_many():
    assert count_topics(("t",) * 5) == {"t": 5}
    assert count_topics(["t", "u", "t"]) == {"t": 2, "u": 1}
    assert count_topics(iter(["t", "t"])) == {"t": 2}
    assert count_topics([]) == {}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8), max_size=6))
def test_the_pending_halves_are_counted_per_topic_across_their_prepare_calls(calls):
    halves = HalfRefs()
    for topics in calls:  # each prepare call adds a chunk
        n = len(topics)
        halves.add(list(range(n)), [10] * n, list(range(n)), topics, [0] * n, "s")
    assert halves.topic_counts() == count_topics([t for topics in calls for t in topics])
