"""A moved queue's logical offsets and its segments (client/segments.py, cluster/routes.py): pure
functions, no broker."""

from __future__ import annotations

import pytest

from txmq.broker import errors
from txmq.broker.client import segments as seg
from txmq.broker.client.types import QueueSegment
from txmq.broker.cluster.moves import _even_moves
from txmq.broker.cluster.routes import QueueRef, Segment, TopicLayout, spread

MOVED = (QueueSegment("a", 0, 0), QueueSegment("b", 2, 100), QueueSegment("c", 1, 150))


def test_a_logical_range_splits_over_the_segments_in_their_own_offsets():
    assert seg.ranges(MOVED, 90, 160) == [(MOVED[0], 90, 100), (MOVED[1], 0, 50), (MOVED[2], 0, 10)]
    assert seg.ranges(MOVED, 100, 120) == [(MOVED[1], 0, 20)]


def test_a_logical_offset_round_trips_through_the_segments_positions():
    for offset in (0, 42, 100, 149, 150, 1_000):
        assert seg.to_logical(MOVED, seg.to_physical(MOVED, offset)) == offset


def test_a_segment_cut_short_says_where_the_queue_stands():
    positions = {("a", 0): 100, ("b", 2): 30, ("c", 1): 5}  # c's part past a lowered b is not taken
    assert seg.to_logical(MOVED, positions) == 130


def test_a_layout_with_moves_round_trips_through_its_json_and_counts_each_groups_physical_queues():
    moved = QueueRef("a", 0, (Segment("b", 1, 100),))
    layout = TopicLayout("t", (moved, QueueRef("b", 0), QueueRef("a", 1, sealing="b")))
    again = TopicLayout.parse("t", layout.to_json())
    assert again.queues == layout.queues
    assert layout.share("b") == 2 and layout.share("a") == 2
    assert layout.sealed("a") == (frozenset({0}), frozenset({1}))
    assert layout.physical("b") == {0: True, 1: True}


def test_a_grown_topic_numbers_a_groups_new_queues_after_the_segments_moved_to_it():
    existing = (QueueRef("a", 0, (Segment("b", 1, 7),)), QueueRef("b", 0))
    grown = spread(4, ["a", "b"], existing, first=0)
    assert [q.key for q in grown[2:]] == [("a", 1), ("b", 2)]  # b's 1 holds the moved queue


def test_evening_out_moves_from_the_most_loaded_group_to_the_least_until_they_differ_by_one():
    queues = tuple(QueueRef("a", i) for i in range(5)) + (QueueRef("b", 0),)
    moves = _even_moves(queues, ["a", "b", "c"])
    assert len(moves) == 3 and {to for _, to in moves} <= {"b", "c"}


def test_a_queue_is_named_group_colon_id():
    from txmq.broker.cluster.moves import parse_queue
    assert parse_queue("g-1:3") == ("g-1", 3)
    with pytest.raises(errors.BadRequest):
        parse_queue("3")


def test_a_copied_segment_takes_its_sources_place_and_the_source_holds_nothing_any_more():
    from txmq.broker.cluster.copier import plan_copy
    from txmq.broker.cluster.routes import Copy

    moved = QueueRef("a", 0, (Segment("b", 1, 100),))
    layout = TopicLayout("t", (moved, QueueRef("b", 0)))
    copy = plan_copy(layout, moved, "a", 1000)
    assert copy == Copy(Segment("a", 0, 0), Segment("b", 2, 0), 1000), "numbered after b's physical queues"
    copying = TopicLayout.parse("t", TopicLayout("t", (QueueRef("a", 0, moved.moves, "", copy), QueueRef("b", 0)))
                                .to_json())
    q = copying.queue("a", 0)
    assert q.copying == copy and q.segments == moved.segments, "readers read the source until the copy is done"
    assert copying.share("b") == 3 and copying.sealed("b")[0] == {2}, "the copy's queue takes no send"
    assert plan_copy(copying, q, "a", 0) is None, "one copy of a queue at a time"
    done = TopicLayout("t", (q.with_copy_done(), QueueRef("b", 0)))
    segments = done.queue("a", 0).segments
    assert [(s.group, s.queue_id, s.base) for s in segments] == [("a", 0, 0), ("b", 2, 0), ("b", 1, 100)]
    assert seg.ranges(segments, 0, 120) == [(segments[1], 0, 100), (segments[2], 0, 20)]
    assert done.copied_away("a", 0) and not done.copied_away("b", 2)
    assert done.physical("a") == {} and done.physical("b") == {0: True, 1: True, 2: False}
    assert plan_copy(done, done.queue("a", 0), "a", 0) is None, "nothing of the queue is left on a"
