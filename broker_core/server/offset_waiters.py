"""Long-poll waiters: park a request until some queue moves past the offsets it knows.

The store calls our dispatch listener after every append; the listener bumps a
generation number and wakes every parked waiter, which re-reads the offsets.
No waiter polls the store on a timer (a periodic wake-up only notices a
client that went away).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

Offsets = dict[str, dict[int, int]]

# How often a parked waiter checks that its client is still connected.
LIVENESS_CHECK_S = 1.0


def moved_past(current: Offsets, known: Offsets) -> bool:
    """True when any queue in `current` is beyond what `known` says (missing queues count as 0)."""
    for topic, queues in current.items():
        seen = known.get(topic, {})
        for queue_id, offset in queues.items():
            if offset > seen.get(queue_id, 0):
                return True
    return False


class OffsetWaiters:
    """Wakes long-polling requests when the store dispatches new queue entries."""

    def __init__(self, store: Any) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        store.add_dispatch_listener(self._on_dispatch)

    def _on_dispatch(self, entries: Any) -> None:
        self.wake_all()

    def wake_all(self) -> None:
        """Wake every waiter to look again (new entries, or the broker stopping)."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wait(self, read: Callable[[], Offsets], known: Offsets, deadline: float,
             is_active: Callable[[], bool] = lambda: True) -> tuple[bool, Offsets]:
        """(moved, offsets) as soon as `read()` is past `known`, or (False, offsets) at the deadline."""
        while True:
            with self._cond:
                generation = self._generation
            current = read()
            if moved_past(current, known):
                return True, current
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not is_active():
                return False, current
            with self._cond:
                if self._generation == generation:
                    self._cond.wait(min(remaining, LIVENESS_CHECK_S))
