"""Where the final records of cross-group transactions lie: what a cluster-wide cut asks each group.

A cross-group transaction's halves carry its participant groups (decision.PROP_PARTICIPANTS),
and its final records keep them. A cut that reads several groups must find, in the ranges it
is about to read, every such record, to check that each transaction is read on all of its
groups or on none (client/cluster_cut.py). The records are found by the store's compiled
property scan: derived from the log itself, so the answer holds across restarts and
failovers, with no state of its own to recover.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from txmq.broker.store.message import PROP_TRANSACTION_ID

from .decision import PROP_PARTICIPANTS


@dataclass(frozen=True)
class CrossRecord:
    """The first final record of one cross-group transaction within one queue window."""

    transaction_id: str
    topic: str
    queue_id: int
    offset: int
    participants: tuple[str, ...]


class CrossCommitWatch:
    """Which queue ranges may hold final records of cross-group transactions, so that a cut's
    question about a range that cannot is answered without scanning it: a range written since
    this engine started, of a topic no cross-group transaction committed to since then. What
    was written before (by an earlier run, or by the leader a promoted replica followed) may."""

    def __init__(self, written_at_start: Mapping[tuple[str, int], int]) -> None:
        self.written_at_start = dict(written_at_start)
        self.topics: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def committed(self, topics: Iterable[str]) -> None:
        """A cross-group transaction's final records go to `topics` (called before they are written)."""
        new = set(topics) - self.topics
        if new:
            with self._lock:
                self.topics = self.topics | new

    def may_hold(self, topic: str, queue_id: int, start: int) -> bool:
        return topic in self.topics or start < self.written_at_start.get((topic, queue_id), 0)


def cross_group_records(store, windows: Iterable[tuple[str, int, int, int]],
                        watch: CrossCommitWatch | None = None) -> list[CrossRecord]:
    """The first record of each cross-group transaction in each window (topic, queue id, start, end)."""
    from txmq.broker.store.filter_read import records_with_property  # the broker's: clients import CrossRecord only

    out: list[CrossRecord] = []
    for topic, queue_id, start, end in windows:
        if watch is not None and not watch.may_hold(topic, queue_id, start):
            continue
        seen: set[str] = set()
        for offsets, values in records_with_property(store, topic, queue_id, start, end,
                                                     (PROP_PARTICIPANTS, PROP_TRANSACTION_ID)):
            # a transaction's records are consecutive in a queue: one Python step per transaction
            ids = values[PROP_TRANSACTION_ID].dictionary_encode()
            _, firsts = np.unique(np.asarray(ids.indices.fill_null(-1)), return_index=True)
            for row in sorted(firsts.tolist()):
                tx_id = ids[row].as_py()
                if not tx_id or tx_id in seen:
                    continue
                seen.add(tx_id)
                groups = tuple(sorted(filter(None, (values[PROP_PARTICIPANTS][row].as_py() or "").split(","))))
                out.append(CrossRecord(tx_id, topic, queue_id, int(offsets[row]), groups))
    return out


__all__ = ["CrossCommitWatch", "CrossRecord", "cross_group_records"]
