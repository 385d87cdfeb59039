"""The queue offsets a write assigns: consecutive per queue, from where each queue's entries end."""

from __future__ import annotations

from functools import reduce
from itertools import compress, count
from operator import or_
from typing import Sequence

import numpy as np

from txmq.broker.store.dispatch import NOT_QUEUED_BIT, Dispatcher, QueueGroups, goes_to_queue


def queued_mask(sys_flags: Sequence[int], topics: Sequence[str]) -> list[bool] | None:
    """Which records get a queue entry (transactional records: decided per (flag, topic));
    None when all do, the common case."""
    if not any(sys_flags):
        return None
    flags = set(sys_flags)  # a few distinct flags: no per-record tuple unless some record may be unqueued
    if not reduce(or_, flags, 0) & NOT_QUEUED_BIT:
        return None
    if topics.count(topics[0]) == len(topics):
        by_flag = {f: goes_to_queue(f, topics[0]) for f in flags}
        return None if all(by_flag.values()) else list(map(by_flag.__getitem__, sys_flags))
    decided = {ft: goes_to_queue(*ft) for ft in set(zip(sys_flags, topics))}
    if all(decided.values()):
        return None
    return list(map(decided.__getitem__, zip(sys_flags, topics)))


class QueueOffsets:
    """The queue offsets of one write, or of every part of a split group: consecutive per queue,
    from where each queue's written entries end. A split group's queues are reserved to it from
    the part that first writes them, so their written ends do not move until it ends.

    A queue is named by a key: (topic, queue id), or the queue id alone when every
    record of the write has the one topic `topic`.
    """

    __slots__ = ("_dispatcher", "_topic", "_next", "_first")

    def __init__(self, dispatcher: Dispatcher, topic: str | None) -> None:
        self._dispatcher = dispatcher
        self._topic = topic
        self._next: dict = {}  # queue key -> the next offset to assign
        self._first: dict = {}  # queue key -> the queue's written end when this write first met it

    def assign(self, keys: Sequence, queued: Sequence[bool] | None) -> tuple[dict, list[int]]:
        """({key: first offset assigned here}, the offset of each record, 0 for one not queued)."""
        following = self._next
        wanted = set(keys) if queued is None else set(compress(keys, queued))
        self._note_new(wanted)
        starts = {key: following[key] for key in wanted}
        counters = {key: count(first) for key, first in starts.items()}
        if queued is None:
            offsets = list(map(next, map(counters.__getitem__, keys)))
        else:
            offsets = [next(counters[k]) if q else 0 for k, q in zip(keys, queued)]
        for key, counter in counters.items():
            following[key] = next(counter)
        return starts, offsets

    def assign_array(self, topic: str, qids: np.ndarray) -> tuple[np.ndarray, QueueGroups]:
        """assign() for records all of `topic` (the offsets' own, if it has one), given their queue
        ids as an array, with no queued mask: (each record's offset, the records grouped by
        queue). Array operations only: a large COMMIT part does no dictionary work per record."""
        distinct, inverse = np.unique(qids, return_inverse=True)
        keys = distinct.tolist() if self._topic is not None else [(topic, q) for q in distinct.tolist()]
        following = self._next
        self._note_new(keys)
        firsts = [following[key] for key in keys]
        counts = np.bincount(inverse, minlength=len(keys))
        order = np.argsort(inverse, kind="stable")
        group_of = inverse[order]
        begins = np.cumsum(counts) - counts  # where each queue's records start in `order`
        offsets = np.empty(len(qids), dtype=np.int64)
        offsets[order] = np.asarray(firsts, dtype=np.int64)[group_of] + np.arange(len(qids)) - begins[group_of]
        counts_list = counts.tolist()
        for key, first, n in zip(keys, firsts, counts_list):
            following[key] = first + n
        return offsets, QueueGroups(keys, firsts, counts_list, order)

    def _note_new(self, keys) -> None:
        """Start each queue this write meets for the first time where its written entries end
        (read now: other writers may have added queues between two parts); a queue met before
        must not have moved since (offsets consecutive across a split group's parts)."""
        following = self._next
        queues = self._dispatcher._queues
        for key in set(keys):
            cq = queues.get(key if self._topic is None else (self._topic, key))
            end = cq.written_offset if cq is not None else 0
            if key in following:
                assert end == self._first[key], f"queue {key} moved under a write that holds it"
            else:
                following[key] = self._first[key] = end

    def named(self, runs: dict) -> dict:
        """queue_runs' result keyed by (topic, queue id)."""
        if self._topic is None:
            return runs
        return {(self._topic, qid): run for qid, run in runs.items()}
