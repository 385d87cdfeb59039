"""The figures the charts draw over time, sampled from the brokers while someone looks.

Brokers keep counters, not series: the console keeps the series itself, one per login
session, by sampling the counters (native Stats and ListTopics) at most once per refresh
interval. A chart therefore starts when the session does, and keeps the last `points` samples.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

# transaction counters drawn on the Transactions page: the Stats figure -> the chart's label
TX_SERIES = (("commits", "commits/s"), ("rollbacks", "rollbacks/s"), ("checks_sent", "check-backs/s"))


@dataclass
class Series:
    """Per-second rates between consecutive samples of cumulative counters."""

    points: int = 300
    times: deque = field(default_factory=deque)
    values: dict[str, deque] = field(default_factory=dict)
    _last: tuple[float, dict[str, float]] | None = None

    def add(self, now: float, counters: dict[str, float]) -> None:
        last, self._last = self._last, (now, dict(counters))
        if last is None:
            return
        elapsed = max(now - last[0], 1e-3)
        self.times.append(round(now, 3))
        for name in set(counters) | set(self.values):
            rate = max(0.0, (counters.get(name, 0) - last[1].get(name, counters.get(name, 0))) / elapsed)
            line = self.values.setdefault(name, deque([0.0] * (len(self.times) - 1)))
            line.append(round(rate, 3))
        while len(self.times) > self.points:
            self.times.popleft()
            for line in self.values.values():
                line.popleft()

    def chart(self, labels: dict[str, str] | None = None, top: int | None = None) -> dict:
        """{"x": times, "series": [{"label", "values"}]} for the page's uPlot, the busiest `top` lines."""
        names = sorted(self.values, key=lambda n: -sum(self.values[n]))[:top] if top else list(self.values)
        return {"x": list(self.times),
                "series": [{"label": (labels or {}).get(n, n), "values": list(self.values[n])} for n in names]}


class History:
    """One session's series: transaction outcomes and each topic's message rate."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.transactions = Series()
        self.topics = Series()
        self._lock = threading.Lock()
        self._sampled = 0.0

    def due(self) -> bool:
        return time.monotonic() - self._sampled >= self.interval_s * 0.9

    def sample(self, stats: dict[str, dict], topic_ends: dict[str, int] | None) -> None:
        """`stats`: each broker group's Stats; `topic_ends`: each topic's summed queue ends (None:
        not read this time, the topic chart skips this sample)."""
        now = time.time()
        with self._lock:
            self._sampled = time.monotonic()
            tx = {name: float(sum(s.get("transactions", {}).get(name, 0) for s in stats.values()))
                  for name, _ in TX_SERIES}
            self.transactions.add(now, tx)
            if topic_ends is not None:
                self.topics.add(now, {t: float(n) for t, n in topic_ends.items()})

    def transaction_chart(self) -> dict:
        """Every transaction line from the start (zeros until a second sample gives rates)."""
        with self._lock:
            x = list(self.transactions.times)
            return {"x": x, "series": [{"label": label, "values": list(self.transactions.values.get(name, [0.0] * len(x)))}
                                       for name, label in TX_SERIES]}

    def topic_chart(self, top: int = 5) -> dict:
        with self._lock:
            return self.topics.chart(top=top)
