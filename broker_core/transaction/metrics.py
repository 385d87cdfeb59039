"""In-process transaction metrics, exported by the server (Prometheus text).

Counters only grow; `pending_halves` is a gauge per real topic kept up to date
by the engine as halves are added and transactions resolved. The latency
histogram measures prepare-to-resolution time (first half to COMMIT/ROLLBACK
or discard), the number a user watches to see producers that forget to end.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter

# Upper bounds (seconds) of the prepare-to-resolution histogram buckets; +Inf is implicit.
LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)


class TransactionMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending_halves: Counter[str] = Counter()
        self.prepared_halves = 0
        self.commits = 0
        self.committed_messages = 0
        self.rollbacks = 0
        self.discards = 0
        self.resumes = 0
        self.checks_sent = 0
        self.checks_undelivered = 0
        self.checks_answered = 0
        self.checks_in_progress = 0  # IN_PROGRESS answers: a producer still working on the transaction
        self.decisions = 0  # cross-group decisions recorded as coordinator
        self.coordinator_answers = 0  # pending cross-group transactions resolved by their coordinator's decision
        self._bucket_counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self._latency_sum_s = 0.0
        self._latency_count = 0

    def halves_added(self, topics: dict[str, int]) -> None:
        with self._lock:
            pending = self.pending_halves
            for topic, n in topics.items():
                pending[topic] += n
                self.prepared_halves += n

    def halves_back_to_pending(self, topics: dict[str, int]) -> None:
        """Pending again without a new prepare (a resume, a restart's rebuilt table)."""
        with self._lock:
            self.pending_halves.update(topics)

    def halves_left_pending(self, topics: dict[str, int]) -> None:
        with self._lock:
            pending = self.pending_halves
            for topic, n in topics.items():
                left = pending[topic] - n
                if left > 0:
                    pending[topic] = left
                else:
                    del pending[topic]

    def resolved(self, kind: str, latency_s: float, committed_messages: int = 0) -> None:
        with self._lock:
            if kind == "COMMIT":
                self.commits += 1
                self.committed_messages += committed_messages
            elif kind == "ROLLBACK":
                self.rollbacks += 1
            elif kind == "DISCARD":
                self.discards += 1
            self._bucket_counts[bisect.bisect_left(LATENCY_BUCKETS_S, latency_s)] += 1
            self._latency_sum_s += latency_s
            self._latency_count += 1

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)  # counters are named by their callers; a typo raises

    def snapshot(self) -> dict:
        """Every figure as plain data; histogram buckets are cumulative (Prometheus style)."""
        with self._lock:
            cumulative, running = [], 0
            for bound, n in zip((*LATENCY_BUCKETS_S, float("inf")), self._bucket_counts):
                running += n
                cumulative.append((bound, running))
            return {
                "pending_halves": dict(self.pending_halves),
                "prepared_halves": self.prepared_halves,
                "commits": self.commits,
                "committed_messages": self.committed_messages,
                "rollbacks": self.rollbacks,
                "discards": self.discards,
                "resumes": self.resumes,
                "checks_sent": self.checks_sent,
                "checks_undelivered": self.checks_undelivered,
                "checks_answered": self.checks_answered,
                "checks_in_progress": self.checks_in_progress,
                "decisions": self.decisions,
                "coordinator_answers": self.coordinator_answers,
                "resolution_latency_s": {"buckets": cumulative, "sum": self._latency_sum_s,
                                         "count": self._latency_count},
            }
