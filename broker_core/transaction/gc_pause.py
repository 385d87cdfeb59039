"""Pausing Python's cyclic garbage collector around the engine's large prepare and COMMIT calls.

A COMMIT of n halves builds n final records and the store answers with n
results; a prepare builds a half and a table reference per message. While
these objects are alive, the collector's allocation thresholds fire again and
again, and the full collections that follow walk the whole heap, which during
a large transaction is dominated by the engine's own table of pending halves
(figures: docs/benchmarks.md). What these calls allocate and drop is freed by reference
counting (no cycles), so pausing the collector meanwhile leaves nothing behind.

Thread-safe and re-entrant: the first section disables the collector (if it
was enabled), the last one to end enables it again. Sections that overlap
without a gap (several writers) must not starve the collector: a section
that begins after the pause has lasted MAX_PAUSE_S enables it at once.
"""

from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import ContextManager, Iterator

MAX_PAUSE_S = 1.0
# Below this many messages a call allocates little, so a collection within it costs little, while
# the pause's lock and re-enable are paid by every call (a RocketMQ client's one-message COMMIT).
PAUSE_MIN_MESSAGES = 256

_lock = threading.Lock()
_depth = 0
_was_enabled = False
_paused_at = 0.0


def collector_paused_for(messages: int) -> ContextManager[None]:
    """collector_paused() for a call of `messages` messages, a no-op for a small one."""
    return collector_paused() if messages >= PAUSE_MIN_MESSAGES else nullcontext()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic collection inside the block (reference counting still frees memory)."""
    global _depth, _was_enabled, _paused_at
    with _lock:
        now = time.monotonic()
        if _depth == 0:
            _was_enabled, _paused_at = gc.isenabled(), now
            gc.disable()
        elif _was_enabled and now - _paused_at > MAX_PAUSE_S:
            gc.enable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
