"""ConsumeQueue: the per-(topic, queue) index of CommitLog positions.

Each entry is 20 bytes: commit-log offset (8), record size (4), tag hash (8),
big-endian. Queue offset N is entry N; entries live in files of a fixed number
of entries, named by the first queue offset they hold (20 digits). The queue is
derived data: recovery truncates and rebuilds it from the CommitLog.

`max_offset` is published by the dispatcher under the dispatch lock (so a
snapshot of all queues never splits an atomic group); readers never look past it.

New entries first go to an in-memory tail (appended in order), written to the
file in one go when it reaches TAIL_SPILL_BYTES or the queue is flushed: a small
write syscall per queue per append batch would cost more than the entries. The
tail is a (first queue offset, bytearray) pair replaced, never cleared, when it
is spilled (after the file write), so a reader holding the old pair still finds
its entries in it and a reader of the new pair finds older ones in the file.
"""

from __future__ import annotations

import bisect
import shutil
import struct
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from txmq.broker.store.mapped_file import MappedFile, file_name

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = ENTRY.size  # 20
TAIL_SPILL_BYTES = 4096 * 20  # entries kept in memory before one file write (see the module doc)
ENTRY_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tag_hash", ">i8")])  # ENTRY as a numpy record
# Publications remembered per queue (PublishHistory): enough for the cuts a cluster-wide cut
# lowers to (transactions still being applied on other groups: milliseconds to seconds).
PUBLISH_HISTORY = 512


@dataclass(frozen=True, slots=True)
class QueueEntry:
    queue_offset: int
    physical_offset: int
    size: int
    tag_hash: int


class PublishHistory:
    """The queue's recent publications: (dispatch sequence number, max offset before it).

    The dispatcher numbers every publication (one atomic group, or one batch, made
    visible at once) under its lock. With these, the store can say what every
    queue's max offset was just before a given entry became visible: a consistent
    cut lying before that entry (MessageStore.cut_before). Bounded; what it no
    longer holds, or never saw (before a restart), reads as unknown.
    """

    __slots__ = ("seqs", "befores", "valid_from")

    def __init__(self) -> None:
        self.seqs: deque[int] = deque()
        self.befores: deque[int] = deque()
        self.valid_from = 0  # answers hold for publications numbered from here on (all, since boot)

    def record(self, seq: int, before: int) -> None:
        """Under the dispatch lock, in increasing seq."""
        assert not self.seqs or seq > self.seqs[-1], "publications are numbered in order"
        if len(self.seqs) == PUBLISH_HISTORY:
            self.valid_from = self.seqs.popleft() + 1  # the dropped one could be the answer for those up to it
            self.befores.popleft()
        elif self.valid_from == _NEVER:
            self.valid_from = seq
        self.seqs.append(seq)
        self.befores.append(before)

    def forget(self) -> None:
        """The queue was cut back (a truncation): what came before is no longer comparable."""
        self.seqs.clear()
        self.befores.clear()
        self.valid_from = _NEVER

    def seq_of(self, offset: int, max_offset: int) -> int | None:
        """The number of the publication that made entry `offset` visible (None: not remembered)."""
        if offset >= max_offset or not self.befores or offset < self.befores[0]:
            return None
        return self.seqs[bisect.bisect_right(self.befores, offset) - 1]

    def before(self, seq: int, max_offset: int) -> int | None:
        """The max offset just before publication `seq` (None: not remembered)."""
        if seq < self.valid_from:
            return None
        i = bisect.bisect_left(self.seqs, seq)
        return self.befores[i] if i < len(self.seqs) else max_offset


_NEVER = 1 << 62


class ConsumeQueue:
    """The entries of one (topic, queue id)."""

    def __init__(self, directory: Path, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.directory = Path(directory)
        self.topic = topic
        self.queue_id = queue_id
        self.entries_per_file = entries_per_file
        self.file_bytes = entries_per_file * ENTRY_SIZE
        self.directory.mkdir(parents=True, exist_ok=True)
        files = []
        for p in sorted(self.directory.iterdir()):
            if p.name.isdigit() and len(p.name) == 20:
                start = int(p.name)
                files.append(MappedFile(p, start * ENTRY_SIZE, self.file_bytes))
        self._files: list[MappedFile] = files
        if files:
            last = files[-1]
            whole = last.size - last.size % ENTRY_SIZE
            if whole != last.size:
                last.truncate(whole)  # a torn entry at the end
            self.max_offset = last.end // ENTRY_SIZE
            self.min_offset = files[0].start // ENTRY_SIZE
        else:
            self.max_offset = 0
            self.min_offset = 0
        self._deleted: list[MappedFile] = []
        self.written_offset = self.max_offset  # entries written (>= max_offset while a batch is published)
        self._tail: tuple[int, bytearray] = (self.written_offset, bytearray())  # entries not yet in the file
        self._tail_lock = threading.Lock()  # the writer's appends vs the flusher's spill
        self.history = PublishHistory()
        if files:  # a queue begun past its first file's start (begin_at) left that file's head unwritten
            self.min_offset = self._first_written(self.min_offset, self.max_offset)

    # --- files -------------------------------------------------------------------

    def _file_for(self, queue_offset: int, create: bool = False) -> MappedFile | None:
        byte_pos = queue_offset * ENTRY_SIZE
        files = self._files
        for f in reversed(files):
            if f.start <= byte_pos:
                if byte_pos < f.start + self.file_bytes:
                    return f
                break
        if not create:
            return None
        start = byte_pos - byte_pos % self.file_bytes
        f = MappedFile(self.directory / file_name(start // ENTRY_SIZE), start, self.file_bytes)
        self._files = sorted(files + [f], key=lambda x: x.start)
        return f

    # --- writes --------------------------------------------------------------------

    def write(self, queue_offset: int, data: bytes) -> None:
        """Write packed entries starting at queue_offset (not yet visible: see publish)."""
        with self._tail_lock:
            if self.starts_later(queue_offset):  # a replica that started at its leader's log start
                self._begin_at(queue_offset)
            start, tail = self._tail
            if queue_offset == self.written_offset == start + len(tail) // ENTRY_SIZE:
                tail += data  # in order: stays in memory until the spill
                self.written_offset = queue_offset + len(data) // ENTRY_SIZE
                if len(tail) >= TAIL_SPILL_BYTES:
                    self._spill()
                return
            self._spill()  # recovery rewriting entries: straight to the file
            self._write_file(queue_offset, data)
            self._tail = (self.written_offset, bytearray())

    def begin_at(self, queue_offset: int) -> None:
        """Make this empty queue's first entry `queue_offset` (> its end): its entries begin where
        retention kept another log's (a history copy of a segment whose start retention deleted)."""
        with self._tail_lock:
            assert self.starts_later(queue_offset), \
                f"queue {self.topic}:{self.queue_id} holds entries to {self.written_offset}; it cannot begin at {queue_offset}"
            self._begin_at(queue_offset)

    def starts_later(self, queue_offset: int) -> bool:
        """Whether this queue holds nothing and `queue_offset` lies past its end."""
        return queue_offset > self.written_offset == self.max_offset == self.min_offset and not self._files

    def _begin_at(self, queue_offset: int) -> None:
        # an empty queue whose first entry comes later than its end: its log begins at a segment
        # retention kept, so it does too
        self.min_offset = self.max_offset = self.written_offset = queue_offset
        self._tail = (queue_offset, bytearray())

    def _spill(self) -> None:
        """Write the in-memory tail to the file (the caller holds the tail lock)."""
        start, tail = self._tail
        if tail:
            self._write_file(start, bytes(tail))
            self._tail = (start + len(tail) // ENTRY_SIZE, bytearray())

    def _write_file(self, queue_offset: int, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            f = self._file_for(queue_offset, create=True)
            in_file = queue_offset * ENTRY_SIZE - f.start
            n = min(len(data) - pos, self.file_bytes - in_file)
            if in_file == f.size:
                f.append(data[pos:pos + n] if pos or n != len(data) else data)
            else:
                f.write_at(in_file, data[pos:pos + n])
            pos += n
            queue_offset += n // ENTRY_SIZE
        self.written_offset = max(self.written_offset, queue_offset)

    def flush(self) -> None:
        with self._tail_lock:
            self._spill()
        for f in self._files[-2:]:
            if not f.closed:
                f.sync()

    # --- reads ---------------------------------------------------------------------

    def read_raw(self, queue_offset: int, count: int) -> bytes:
        """Packed entries from queue_offset, at most `count`, never past max_offset; may stop at a file end."""
        end = min(self.max_offset, queue_offset + count)
        if queue_offset >= end:
            return b""
        start, tail = self._tail
        if queue_offset >= start:
            return bytes(tail[(queue_offset - start) * ENTRY_SIZE:(end - start) * ENTRY_SIZE])
        end = min(end, start)  # the file holds everything before the tail
        f = self._file_for(queue_offset)
        if f is None:
            return b""
        in_file = queue_offset * ENTRY_SIZE - f.start
        n = min((end - queue_offset) * ENTRY_SIZE, self.file_bytes - in_file)
        try:
            return f.read(in_file, n)
        except OSError:
            return b""

    def entries(self, queue_offset: int, count: int) -> list[QueueEntry]:
        out: list[QueueEntry] = []
        while count > 0:
            raw = self.read_raw(queue_offset, count)
            if not raw:
                break
            for phys, size, th in ENTRY.iter_unpack(raw[:len(raw) - len(raw) % ENTRY_SIZE]):
                out.append(QueueEntry(queue_offset, phys, size, th))
                queue_offset += 1
                count -= 1
        return out

    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(physical offset, size, tag hash) of one entry, or None."""
        start, tail = self._tail
        if queue_offset >= start:
            at = (queue_offset - start) * ENTRY_SIZE
            return ENTRY.unpack_from(tail, at) if at + ENTRY_SIZE <= len(tail) else None
        f = self._file_for(queue_offset)
        if f is None:
            return None
        raw = f.read(queue_offset * ENTRY_SIZE - f.start, ENTRY_SIZE)
        return ENTRY.unpack(raw) if len(raw) == ENTRY_SIZE else None

    def _first_written(self, lo: int, hi: int) -> int:
        """Smallest queue offset in [lo, hi) holding an entry (hi if none): the entries before a queue's
        beginning read as zeros, and a written entry's size is never 0."""
        first = self.entry(lo) if lo < hi else None
        if first is not None and first[1] > 0:  # the common case: the queue begins where its file does
            return lo
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[1] > 0:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _first_at_or_after_phys(self, lo: int, hi: int, phys: int) -> int:
        """Smallest queue offset in [lo, hi) whose entry's physical offset >= phys (hi if none)."""
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[0] >= phys:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # --- recovery and retention ------------------------------------------------------

    def truncate_from_physical(self, phys: int) -> int:
        """Drop entries pointing at or past `phys` (they are re-dispatched from the CommitLog)."""
        end = self.written_offset
        cut = self._first_at_or_after_phys(self.min_offset, end, phys)
        if cut < end:
            self.truncate_to(cut)
        return cut

    def truncate_to(self, queue_offset: int) -> None:
        with self._tail_lock:
            self._spill()
            self._truncate_file(queue_offset)
            self._tail = (queue_offset, bytearray())

    def _truncate_file(self, queue_offset: int) -> None:
        byte_pos = queue_offset * ENTRY_SIZE
        keep = []
        for f in self._files:
            if f.start >= byte_pos and f is not self._files[0]:
                f.close()
                f.delete()
            else:
                if f.end > byte_pos:
                    f.truncate(max(0, byte_pos - f.start))
                keep.append(f)
        self._files = keep
        self.max_offset = self.written_offset = queue_offset
        self.history.forget()
        self.min_offset = min(self.min_offset, queue_offset)

    def delete_below_physical(self, min_phys: int) -> int:
        """Retention: drop files wholly below `min_phys`, advance min_offset; returns it."""
        with self._tail_lock:
            self._spill()  # the files must hold every entry: a queue with none on file has no files
        for f in self._deleted:
            f.close()
        self._deleted = []
        files = self._files
        while len(files) > 1:
            last_entry = self.entry(files[0].start // ENTRY_SIZE + self.entries_per_file - 1)
            if last_entry is None or last_entry[0] >= min_phys:
                break
            files[0].delete()
            self._deleted.append(files[0])  # closed at the next retention run: readers may hold it
            files = files[1:]
            self._files = files
        lo = max(self.min_offset, files[0].start // ENTRY_SIZE) if files else self.max_offset
        self.min_offset = self._first_at_or_after_phys(lo, self.max_offset, min_phys)
        return self.min_offset

    def close(self) -> None:
        with self._tail_lock:
            self._spill()
        for f in self._files + self._deleted:
            f.close()

    def destroy(self) -> None:
        self._tail = (self.written_offset, bytearray())  # the queue goes away: nothing to spill
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def discover_queues(root: Path) -> list[tuple[str, int, Path]]:
    """(topic, queue id, directory) of every queue on disk under root/<topic>/<queue id>/."""
    found = []
    if not root.exists():
        return found
    for tdir in root.iterdir():
        if not tdir.is_dir():
            continue
        for qdir in tdir.iterdir():
            if qdir.is_dir() and qdir.name.isdigit():
                found.append((tdir.name, int(qdir.name), qdir))
    return found
