"""Latency fault tolerance for a producer's choice of group (seed 003, RocketMQ's MQFaultStrategy).

After each send the group that took it is scored by the call's latency: a slow answer keeps
the group out of the choice for a while (the slower, the longer: `LATENCY_MAX_MS` steps onto
`NOT_AVAILABLE_MS`), and a failed send counts as `ISOLATION_MS` of latency, which keeps the
group out for ten minutes unless its route changes first (a new leader was elected). When
every group is out, the least recently penalised one is used anyway: a send never fails
only because all groups were slow once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

# RocketMQ's defaults (MQFaultStrategy): a latency at or above LATENCY_MAX_MS[i] makes the
# group unavailable for NOT_AVAILABLE_MS[i].
LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_MS = 30000


def not_available_ms(latency_ms: float, latency_max: Sequence[int] = LATENCY_MAX_MS,
                     not_available: Sequence[int] = NOT_AVAILABLE_MS) -> int:
    """How long a group that answered in `latency_ms` stays out of the choice."""
    assert len(latency_max) == len(not_available)
    for bound, duration in zip(reversed(latency_max), reversed(not_available)):
        if latency_ms >= bound:
            return duration
    return 0


@dataclass
class _FaultItem:
    latency_ms: float
    available_at: float  # clock time from which the group may be chosen again


class LatencyFaultTolerance:
    def __init__(self, *, enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.clock = clock
        self._items: dict[str, _FaultItem] = {}
        self._lock = threading.Lock()

    def update(self, group: str, latency_ms: float, *, failed: bool = False) -> None:
        if not self.enabled:
            return
        latency = ISOLATION_MS if failed else latency_ms
        until = self.clock() + not_available_ms(latency) / 1000.0
        with self._lock:
            self._items[group] = _FaultItem(latency, until)

    def forgive(self, group: str) -> None:
        """Forget a group's record (its route changed: a new leader took over)."""
        with self._lock:
            self._items.pop(group, None)

    def available(self, group: str) -> bool:
        with self._lock:
            item = self._items.get(group)
        return item is None or self.clock() >= item.available_at

    def pick(self, candidates: Sequence[str], start: int) -> str:
        """The first available group of `candidates` from position `start` round-robin; when none
        is available, the one that becomes available soonest."""
        assert candidates, "no group to choose from"
        n = len(candidates)
        for i in range(n):
            group = candidates[(start + i) % n]
            if not self.enabled or self.available(group):
                return group
        with self._lock:
            return min(candidates, key=lambda g: self._items[g].available_at if g in self._items else 0.0)
