"""The timer's on-disk structures, both memory-mapped so memory stays flat however many
messages wait: the TimerLog and the TimerWheel (RocketMQ 5's two timer files).

TimerLog: one fixed 32-byte entry per scheduled message, at the index of its queue
offset in TIMER_TOPIC: delivery time, CommitLog offset and size of the scheduled
record, the previous entry in the same wheel slot (a linked list through the log),
and whether it was delivered.

TimerWheel: one 24-byte slot per second of the horizon (and a margin), a ring indexed
by second modulo its length: the second the slot holds now, the newest entry of that
second (the list's head) and how many entries it links.

Both are derived data: the service rebuilds them from the CommitLog's queues.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from txmq.broker.store.preallocate import back_mapped

LOG_DTYPE = np.dtype([("deliver_ms", "<i8"), ("phys", "<i8"), ("prev", "<i8"), ("size", "<i4"),
                      ("delivered", "<i4")])
WHEEL_DTYPE = np.dtype([("second", "<i8"), ("head", "<i8"), ("count", "<i8")])
NONE = -1


class _Mapped:
    """A file of fixed-size records mapped as a numpy array that grows by doubling."""

    def __init__(self, path: Path, dtype: np.dtype, initial: int) -> None:
        self.path = Path(path)
        self.dtype = dtype
        self.path.parent.mkdir(parents=True, exist_ok=True)
        size = self.path.stat().st_size if self.path.exists() else 0
        self._size_to(max(size // dtype.itemsize, initial))
        self.array = np.memmap(self.path, dtype=dtype, mode="r+")

    @property
    def capacity(self) -> int:
        return len(self.array)

    def ensure(self, count: int) -> None:
        if count <= len(self.array):
            return
        records = max(count, 2 * len(self.array))
        self._size_to(records)  # a full disk raises here and the old map stays as it was
        self.array.flush()
        self.array = np.memmap(self.path, dtype=self.dtype, mode="r+")

    def flush(self) -> None:
        self.array.flush()

    def clear(self, records: int) -> None:
        """Empty the file (all zeros) at `records` records."""
        del self.array
        os.truncate(self.path, 0)
        self._size_to(records)
        self.array = np.memmap(self.path, dtype=self.dtype, mode="r+")

    def _size_to(self, records: int) -> None:
        """Give the file `records` records, their disk blocks allocated before any map writes them
        (back_mapped: a full disk is an OSError here, not a SIGBUS later)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != records * self.dtype.itemsize:
                os.ftruncate(fd, records * self.dtype.itemsize)
            back_mapped(fd, 0, records * self.dtype.itemsize)
        finally:
            os.close(fd)


class TimerLog(_Mapped):
    def __init__(self, path: Path) -> None:
        super().__init__(path, LOG_DTYPE, 1 << 16)


class TimerWheel(_Mapped):
    def __init__(self, path: Path, slots: int) -> None:
        super().__init__(path, WHEEL_DTYPE, slots)
        self.clear(slots)  # rebuilt at every start (see TimerService._rebuild_wheel)
        self.slots = slots
        self.array["head"] = NONE

    def slot(self, second: int) -> int:
        return second % self.slots

    def link(self, log: np.ndarray, indexes: np.ndarray, seconds: np.ndarray) -> None:
        """Add log entries `indexes` to the lists of their `seconds` (each list's newest becomes
        its head), all at once: a batch costs a few numpy calls, not Python per entry. The
        seconds lie within one lap of the ring, so entries of one slot share their second."""
        if not len(indexes):
            return
        w = self.array
        slots = seconds % self.slots
        uniq, first = np.unique(slots, return_index=True)
        stale = w["second"][uniq] != seconds[first]  # slots that held an earlier lap, long delivered
        w["second"][uniq[stale]] = seconds[first][stale]
        w["head"][uniq[stale]] = NONE
        w["count"][uniq[stale]] = 0
        order = np.lexsort((indexes, slots))  # by slot, then by index: lists run oldest to newest
        idx, sl = indexes[order], slots[order]
        same = sl[1:] == sl[:-1]
        prev = np.empty(len(idx), dtype=np.int64)
        prev[0] = w["head"][sl[0]]
        prev[1:] = np.where(same, idx[:-1], w["head"][sl[1:]])
        log["prev"][idx] = prev
        last = np.ones(len(idx), dtype=bool)
        last[:-1] = ~same
        w["head"][sl[last]] = idx[last]
        counts = w["count"]
        np.add.at(counts, sl, 1)
