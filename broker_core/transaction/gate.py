"""A shared/exclusive gate between table mutations and table snapshots.

Every mutation that appends to the store and then updates the table holds the
gate shared, so mutations of different transactions run concurrently. A
snapshot holds it exclusively for the moment it reads the half/op queue ends
and copies the table: then no record is appended-but-not-yet-applied, and the
snapshot's queue offsets match its table exactly. Waiting exclusive holders
block new shared holders, so a snapshot is not starved.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class SharedExclusiveGate:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0
        self._exclusive = False
        self._exclusive_waiting = 0
        self._shared_ctx = _Shared(self)

    def shared(self) -> "_Shared":
        """`with gate.shared():` (a plain object, not a generator: this is on every write path)."""
        return self._shared_ctx

    def acquire_shared(self) -> None:
        with self._cond:
            while self._exclusive or self._exclusive_waiting:
                self._cond.wait()
            self._shared += 1

    def release_shared(self) -> None:
        with self._cond:
            self._shared -= 1
            if not self._shared and self._exclusive_waiting:
                self._cond.notify_all()

    @contextmanager
    def exclusive(self, timeout_s: float | None = None) -> Iterator[bool]:
        """`with gate.exclusive() as held:`; with `timeout_s`, gives up waiting after that
        long (`held` is then False and the block runs without the gate). A periodic
        snapshot waits only briefly: while it waits, new shared holders wait too, and
        one shared holder may be a COMMIT copying a million halves for seconds."""
        held = False
        with self._cond:
            self._exclusive_waiting += 1
            try:
                if self._cond.wait_for(lambda: not (self._exclusive or self._shared), timeout_s):
                    held = self._exclusive = True
            finally:
                self._exclusive_waiting -= 1
                if not held:
                    self._cond.notify_all()  # shared holders that waited behind this attempt
        try:
            yield held
        finally:
            if held:
                with self._cond:
                    self._exclusive = False
                    self._cond.notify_all()


class _Shared:
    __slots__ = ("_gate",)

    def __init__(self, gate: SharedExclusiveGate) -> None:
        self._gate = gate

    def __enter__(self) -> None:
        self._gate.acquire_shared()

    def __exit__(self, *exc: object) -> None:
        self._gate.release_shared()
