"""The CommitLog's page-cache window: flushed bytes older than the window leave the page cache.

Why. Every byte the broker appends goes into a page-cache page first. The kernel
keeps those pages after they are written back, so a broker that writes gigabytes
makes the page cache grow by gigabytes, and each write needs a page nobody used
recently. On a virtual machine whose host backs guest memory lazily (memory
ballooning, free page reporting: the usual cloud set-up), a page the guest has
not touched for a while costs a host fault on its first write, so flushed bytes
far behind the head are dropped: their pages go back to the kernel's free lists,
and the next writes reuse them while they are still backed (figures:
docs/benchmarks.md, "Figures behind the store's choices").

What stays cached: the newest `keep_bytes` of the log (what the readers of a
broker read almost always: consumers at the head), and back to the lowest offset
a reader has said it still needs (`protect`: the transaction engine names the
first half of its pending transactions, which a COMMIT will scan), but never more
than PROTECT_FACTOR windows. Older bytes are read from disk when someone asks for them,
as from any log larger than memory (Kafka's lagging consumers). Only bytes
already made durable by a flush are dropped (a dirty page cannot be), so
nothing changes for durability. A page mapped by a process stays cached while
it is mapped: the broker's own maps (columnar reads) are told to let go of the
dropped range first (`unmap`: MADV_DONTNEED on a shared file map only forgets
the page-table entries; a later read faults the same bytes back in); other
processes' maps (same-host Spark executors' local reads) keep theirs.

posix_fadvise(POSIX_FADV_DONTNEED) is advice: where it is not available, or the
file system ignores it, the window simply does nothing.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

FOLIO_BYTES = 2 << 20  # the largest page-cache folio of a file: advice evicts only whole folios
RELEASE_STEP_BYTES = 64 << 20  # drop in steps at least this large: one call per step and segment
PROTECT_FACTOR = 4  # protected bytes stay cached up to this many windows behind the flushed end

_fadvise = getattr(os, "posix_fadvise", None)
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", None)


class PageCacheWindow:
    """Drops CommitLog bytes in [released, flushed - keep_bytes) from the page cache, in steps.

    `segments()` returns the log's current segments (objects with `start`, `fd`
    and `closed`); `release(flushed)` is called with the durable end offset after
    each flush (from the flush thread). keep_bytes 0 turns the window off.
    """

    def __init__(self, keep_bytes: int, segments: Callable[[], Sequence], *,
                 step_bytes: int = RELEASE_STEP_BYTES,
                 unmap: Callable[[object, int, int], None] | None = None) -> None:
        if keep_bytes < 0:
            raise ValueError(f"page cache keep_bytes must not be negative, got {keep_bytes}")
        self.keep_bytes = keep_bytes
        self.step_bytes = step_bytes
        self._segments = segments
        self._unmap = unmap  # unmap(segment, lo, hi): this process's maps forget [lo, hi) of the segment file
        self.released = 0  # every byte below this offset has been advised out
        self.released_bytes = 0  # total advised, for stats and tests
        self._lowest_needed: Callable[[], int | None] | None = None

    def protect(self, lowest_needed: Callable[[], int | None]) -> None:
        """Keep bytes from `lowest_needed()` (None: nothing) cached, within PROTECT_FACTOR windows."""
        self._lowest_needed = lowest_needed

    @property
    def enabled(self) -> bool:
        return self.keep_bytes > 0 and _fadvise is not None and _DONTNEED is not None

    def release(self, flushed: int) -> int:
        """Advise out the flushed bytes older than the window; returns the bytes advised now."""
        if not self.enabled:
            return 0
        target = (flushed - self.keep_bytes) // FOLIO_BYTES * FOLIO_BYTES  # a folio goes only when advised whole
        if target - self.released < self.step_bytes:
            return 0
        if self._lowest_needed is not None:
            needed = self._lowest_needed()
            if needed is not None and needed < target:
                target = max(needed, flushed - PROTECT_FACTOR * self.keep_bytes) // FOLIO_BYTES * FOLIO_BYTES
                if target - self.released < self.step_bytes:
                    return 0
        done = sum(self._drop(seg, max(self.released, seg.start), min(target, seg.start + seg.capacity))
                   for seg in self._segments())
        self.released = max(self.released, target)
        self.released_bytes += done
        return done

    def _drop(self, seg, lo: int, hi: int) -> int:
        """Advise [lo, hi) of a segment out (log offsets); the bytes advised."""
        if hi <= lo or seg.closed:
            return 0
        try:
            if self._unmap is not None:
                self._unmap(seg, lo - seg.start, hi - seg.start)
            _fadvise(seg.fd, lo - seg.start, hi - lo, _DONTNEED)
        except (OSError, ValueError):
            return 0  # advice only: a closed or odd descriptor (or map) changes nothing
        return hi - lo
