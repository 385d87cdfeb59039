"""Throughput and latency of the broker's data-path RPCs (send, prepare, end, pull).

Services record every call here; the Prometheus endpoint renders it. A
latency histogram per operation (cumulative buckets, Prometheus style) and a
message counter are all that is kept, under one lock.
"""

from __future__ import annotations

import bisect
import threading

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Op:
    __slots__ = ("calls", "messages", "buckets", "sum_s")

    def __init__(self) -> None:
        self.calls = 0
        self.messages = 0
        self.buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.sum_s = 0.0


class RpcMetrics:
    """Per-operation call count, message count and latency histogram."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, _Op] = {}

    def observe(self, op: str, messages: int, latency_s: float) -> None:
        with self._lock:
            entry = self._ops.get(op)
            if entry is None:
                entry = self._ops[op] = _Op()
            entry.calls += 1
            entry.messages += messages
            entry.buckets[bisect.bisect_left(LATENCY_BUCKETS_S, latency_s)] += 1
            entry.sum_s += latency_s

    def snapshot(self) -> dict[str, dict]:
        with self._lock:
            out = {}
            for op, e in self._ops.items():
                cumulative, running = [], 0
                for bound, n in zip((*LATENCY_BUCKETS_S, float("inf")), e.buckets):
                    running += n
                    cumulative.append((bound, running))
                out[op] = {"calls": e.calls, "messages": e.messages,
                           "latency_s": {"buckets": cumulative, "sum": e.sum_s, "count": e.calls}}
            return out
