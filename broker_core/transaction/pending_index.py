"""Pending transactions counted by (producer group, topic), kept as the engine changes them.

The console asks for these counts every refresh, and a walk over every pending transaction costs
in proportion to them all. The engine tells this index each change (halves added, a check-back, discard,
resume, end) while it holds the transaction's condition, so the index sees a transaction's
changes in order; `walk()` recounts from the table, and tests assert the two agree.
"""

from __future__ import annotations

import heapq
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .state import PendingCount, Transaction, TxState


@dataclass(frozen=True)
class _Entry:
    producer_group: str
    topics: frozenset[str]
    created_ms: int
    checks: int
    state: TxState  # PENDING or DISCARDED


@dataclass
class _Key:
    """One (producer group, topic)'s pending transactions: created_ms by id, a lazy heap of them
    for the oldest, and how many have each check count (counts stay small: max_checks)."""

    members: dict[str, int] = field(default_factory=dict)
    heap: list[tuple[int, str]] = field(default_factory=list)
    checks: Counter = field(default_factory=Counter)

    def add(self, tx_id: str, created_ms: int, checks: int) -> None:
        self.members[tx_id] = created_ms
        heapq.heappush(self.heap, (created_ms, tx_id))
        self.checks[checks] += 1

    def remove(self, tx_id: str, checks: int) -> None:
        del self.members[tx_id]
        self.checks[checks] -= 1
        if not self.checks[checks]:
            del self.checks[checks]
        if len(self.heap) > 2 * len(self.members) + 64:  # entries of ended transactions: compact
            self.heap = [(c, t) for t, c in self.members.items()]
            heapq.heapify(self.heap)

    def oldest_ms(self) -> int:
        heap = self.heap
        while heap and self.members.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # ended (or re-added with another time) since it was pushed
        return heap[0][0]


class PendingIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._keys: dict[tuple[str, str], _Key] = {}
        self._discarded = 0

    def put(self, tx_id: str, producer_group: str, topics: Iterable[str], created_ms: int, checks: int,
            state: TxState) -> None:
        """A transaction with halves is PENDING or DISCARDED with these figures (replacing what
        was known of it)."""
        assert state in (TxState.PENDING, TxState.DISCARDED), state
        entry = _Entry(producer_group, frozenset(topics), created_ms, checks, state)
        with self._lock:
            self._drop(tx_id)
            self._entries[tx_id] = entry
            if state is TxState.DISCARDED:
                self._discarded += 1
                return
            for topic in entry.topics:
                self._keys.setdefault((producer_group, topic), _Key()).add(tx_id, created_ms, checks)

    def update(self, tx_id: str, *, topics: Iterable[str] = (), created_ms: int | None = None,
               checks: int | None = None, state: TxState | None = None) -> None:
        """Change what is known of a transaction: topics are added to its own."""
        with self._lock:
            old = self._entries.get(tx_id)
        assert old is not None, f"transaction {tx_id} is not in the pending index"
        if (old.topics.issuperset(topics) and created_ms in (None, old.created_ms)
                and checks in (None, old.checks) and state in (None, old.state)):
            return  # a later prepare to topics it has already: nothing to recount
        self.put(tx_id, old.producer_group, old.topics.union(topics),
                 old.created_ms if created_ms is None else created_ms,
                 old.checks if checks is None else checks, old.state if state is None else state)

    def remove(self, tx_id: str) -> None:
        """The transaction ended (or was forgotten)."""
        with self._lock:
            self._drop(tx_id)

    def _drop(self, tx_id: str) -> None:
        old = self._entries.pop(tx_id, None)
        if old is None:
            return
        if old.state is TxState.DISCARDED:
            self._discarded -= 1
            return
        for topic in old.topics:
            key = self._keys[(old.producer_group, topic)]
            key.remove(tx_id, old.checks)
            if not key.members:
                del self._keys[(old.producer_group, topic)]

    def rebuild(self, table: Mapping[str, Transaction]) -> None:
        """Start over from the table (recovery)."""
        with self._lock:
            self._entries.clear()
            self._keys.clear()
            self._discarded = 0
        for tx in table.values():
            with tx.cond:
                if tx.halves and tx.state in (TxState.PENDING, TxState.DISCARDED):
                    self.put(tx.transaction_id, tx.producer_group, tx.topics(), tx.created_ms, tx.checks, tx.state)

    def summary(self, now_ms: int) -> tuple[dict[tuple[str, str], PendingCount], int]:
        """({(producer group, topic): PendingCount}, how many are DISCARDED): one step per key."""
        with self._lock:
            counts = {k: PendingCount(len(key.members), max(0, now_ms - key.oldest_ms()), max(key.checks))
                      for k, key in self._keys.items()}
            return counts, self._discarded


def walk(table: Mapping[str, Transaction], now_ms: int) -> tuple[dict[tuple[str, str], PendingCount], int]:
    """The same counts as PendingIndex.summary, by visiting every transaction (what the index saves)."""
    counts: dict[tuple[str, str], PendingCount] = {}
    discarded = 0
    for tx in list(table.values()):
        with tx.cond:
            if not tx.halves:
                continue
            if tx.state is TxState.DISCARDED:
                discarded += 1
                continue
            if tx.state is not TxState.PENDING:
                continue
            topics, age, checks = tx.topics(), max(0, now_ms - tx.created_ms), tx.checks
        for topic in topics:
            counts.setdefault((tx.producer_group, topic), PendingCount()).add(age, checks)
    return counts, discarded

