"""Queue offsets of a write: the array form (a large write of one topic) assigns exactly what the
per-record form does, and packs the same queue runs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.store.dispatch import queue_runs, queue_runs_grouped
from txmq.broker.store.queue_offsets import QueueOffsets


def dispatcher_with(written: dict[int, int], topic: str) -> SimpleNamespace:
    """The part of a Dispatcher QueueOffsets reads: each queue's written end."""
    return SimpleNamespace(_queues={(topic, q): SimpleNamespace(written_offset=end) for q, end in written.items()})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=300), min_size=1, max_size=3),
       st.dictionaries(st.integers(0, 5), st.integers(0, 1000), max_size=6), st.booleans())
def test_array_assignment_equals_the_per_record_one(writes, written, topic_keyed):
    """Several writes in a row (a split group's parts), queues that exist already or not, keys by
    queue id (one-topic offsets) or by (topic, queue id) (a split group's)."""
    topic = "T"
    per_record = QueueOffsets(dispatcher_with(written, topic), topic if topic_keyed else None)
    as_arrays = QueueOffsets(dispatcher_with(written, topic), topic if topic_keyed else None)
    phys_at = 0
    for qids in writes:
        keys = qids if topic_keyed else [(topic, q) for q in qids]
        starts, expected = per_record.assign(keys, None)
        offsets, groups = as_arrays.assign_array(topic, np.asarray(qids, dtype=np.int64))
        assert offsets.tolist() == expected
        assert dict(zip(groups.keys, groups.firsts)) == starts
        sizes = [100 + q for q in qids]
        phys = [phys_at + sum(sizes[:i]) for i in range(len(qids) + 1)]
        phys_at = phys[-1]
        tags = [q * 7 for q in qids]
        assert queue_runs_grouped(groups, phys, sizes, tags) == queue_runs(keys, None, starts, phys, sizes, tags)


def test_a_queue_that_moved_under_a_write_holding_it_is_an_invariant_broken():
    """A split group's queues are reserved to it: their written ends must not move between parts."""
    dispatcher = dispatcher_with({0: 5}, "T")
    offsets = QueueOffsets(dispatcher, None)
    assert offsets.assign([("T", 0)], None)[1] == [5]
    dispatcher._queues[("T", 0)].written_offset = 6  # another writer got into a reserved queue
    with pytest.raises(AssertionError, match="moved"):
        offsets.assign([("T", 0)], None)
