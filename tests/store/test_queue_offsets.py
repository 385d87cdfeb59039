"""Queue offsets of a write: the array form (a large write of one topic) assigns exactly what the
per-record form does, and packs the same queue runs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.store.dispatch import queue_runs, queue_runs_grouped
from txmq.broker.store.message_store import _QueueOffsets


def dispatcher_with(written: dict[int, int], topic: str) -> SimpleNamespace:
    """The part of a Dispatcher _QueueOffsets reads: each queue's written end."""
    return SimpleNamespace(_queues={(topic, q): SimpleNamespace(written_offset=end) for q, end in written.items()})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=300), min_size=1, max_size=3),
       st.dictionaries(st.integers(0, 5), st.integers(0, 1000), max_size=6), st.booleans())
def test_array_assignment_equals_the_per_record_one(writes, written, topic_keyed):
    """Several writes in a row (a split group's parts), queues that exist already or not, keys by
    queue id (one-topic offsets) or by (topic, queue id) (a split group's)."""
    topic = "T"
    per_record = _QueueOffsets(dispatcher_with(written, topic), topic if topic_keyed else None)
    as_arrays = _QueueOffsets(dispatcher_with(written, topic), topic if topic_keyed else None)
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
