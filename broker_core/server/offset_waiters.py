"""Long-poll waiters: park a request until some queue moves past the offsets it knows.

The store calls our dispatch listener after every append with the topics it wrote to;
the listener wakes the parked waiters of those topics, which re-read the offsets.
No waiter polls the store on a timer (a periodic wake-up only notices a
client that went away).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

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


class TopicSignals:
    """Wake-ups keyed by topic: each waiter holds an event registered under the topics it waits on,
    and a signal sets the events of those topics' waiters only, so that a write costs nothing to
    the waiters of other topics however many there are."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, set[threading.Event]] = {}
        self._closed = False

    @contextmanager
    def watching(self, topics: Iterable[str]) -> Iterator[threading.Event]:
        """An event set by each signal of one of `topics` while the block runs; clear it before
        looking at what it guards, so that a signal after the look is never missed."""
        topics, event = set(topics), threading.Event()
        assert topics, "a waiter waits on at least one topic"
        with self._lock:
            for topic in topics:
                self._waiting.setdefault(topic, set()).add(event)
        try:
            yield event
        finally:
            with self._lock:
                for topic in topics:
                    waiters = self._waiting[topic]
                    waiters.discard(event)
                    if not waiters:
                        del self._waiting[topic]

    def wait(self, event: threading.Event, timeout_s: float) -> None:
        """event.wait(timeout_s), except that once closed nothing waits."""
        if not self._closed:
            event.wait(max(0.0, timeout_s))

    def dispatched(self, entries: Any, topics: frozenset[str]) -> None:
        """A store dispatch listener: wake the waiters of the topics a write added entries to."""
        self.signal(topics)

    def signal(self, topics: Iterable[str]) -> None:
        with self._lock:
            events = [e for topic in topics for e in self._waiting.get(topic, ())]
        for event in events:
            event.set()

    def signal_all(self) -> None:
        """Wake every waiter to look again (the broker stopping)."""
        with self._lock:
            events = [e for waiters in self._waiting.values() for e in waiters]
        for event in events:
            event.set()

    def close(self) -> None:
        """Wake every waiter, and let none wait from now on."""
        self._closed = True
        self.signal_all()


class OffsetWaiters:
    """Wakes long-polling requests when the store dispatches new queue entries to their topics."""

    def __init__(self, store: Any) -> None:
        self._signals = TopicSignals()
        store.add_dispatch_listener(self._signals.dispatched)

    def wake_all(self) -> None:
        """Wake every waiter to look again (the broker stopping)."""
        self._signals.signal_all()

    def wait(self, read: Callable[[], Offsets], topics: Iterable[str], known: Offsets, deadline: float,
             is_active: Callable[[], bool] = lambda: True) -> tuple[bool, Offsets]:
        """(moved, offsets) as soon as `read()` (the offsets of `topics`) is past `known`, or
        (False, offsets) at the deadline."""
        with self._signals.watching(topics) as dispatched:
            while True:
                dispatched.clear()
                current = read()
                if moved_past(current, known):
                    return True, current
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not is_active():
                    return False, current
                self._signals.wait(dispatched, min(remaining, LIVENESS_CHECK_S))
