"""Counters of the gRPC front: calls and failures per RPC and status code, latency sums.

Kept cheap on purpose (a dict increment per call under the GIL): the
Prometheus endpoint (`metrics_http.py`) reads `snapshot()` together with the
engine's and the store's figures.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict


class ServerMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started_at = time.time()
        self.calls: dict[tuple[str, int], int] = defaultdict(int)  # (rpc, code) -> count
        self.latency_s: dict[str, float] = defaultdict(float)  # rpc -> total seconds
        self.messages_in = 0
        self.messages_out = 0
        self.open_streams = 0

    def record(self, rpc: str, code: int, elapsed_s: float) -> None:
        self.calls[(rpc, code)] += 1
        self.latency_s[rpc] += elapsed_s

    def stream_opened(self) -> None:
        with self._lock:
            self.open_streams += 1

    def stream_closed(self) -> None:
        with self._lock:
            self.open_streams -= 1

    def snapshot(self) -> dict:
        """A copy safe to render: {"calls": {(rpc, code): n}, "latency_s": {...}, ...}."""
        return {
            "uptime_s": time.time() - self.started_at,
            "calls": dict(self.calls),
            "latency_s": dict(self.latency_s),
            "messages_in": self.messages_in,
            "messages_out": self.messages_out,
            "open_streams": self.open_streams,
        }
