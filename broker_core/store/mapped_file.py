"""A fixed-capacity data file addressed by a global offset (a CommitLog segment or a queue file).

Files are plain files written with pwrite and read with pread on one shared
descriptor: pread does not move the file position, so readers run concurrently
with the single writer without locks. A file's length is how much was written,
which makes a torn tail a short file; CommitLog segments reserve their disk
blocks a chunk ahead of the writes without changing that length (preallocate.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from txmq.broker.store.preallocate import RESERVE_CHUNK_BYTES, reserve

JOIN_PARTS_MAX = 1024  # pieces (4 per record) up to which append_parts joins them into one write
IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX")) if hasattr(os, "sysconf") else 1024
# At most this many bytes per write call. The page cache takes a write's pages as folios sized
# after the write: an 8 MiB pwrite asks for 2 MiB folios, which the kernel serves from a free
# 2 MiB block, while pages freed a moment ago (a COMMIT's copied halves, bytes the page-cache
# window dropped: page_cache.py) mostly come back as smaller blocks and wait, until the host
# takes them back. Capped writes ask for small folios and reuse those pages while the host still
# backs them.
WRITE_STEP_BYTES = 256 << 10


def file_name(start: int) -> str:
    """RocketMQ's naming: the start offset as 20 decimal digits."""
    return "%020d" % start


class MappedFile:
    """One file holding bytes [start, start + capacity) of a larger address space."""

    __slots__ = ("path", "start", "capacity", "fd", "size", "synced", "closed", "reserved")

    def __init__(self, path: Path, start: int, capacity: int, *, reserve_ahead: bool = False) -> None:
        self.path = Path(path)
        self.start = start
        self.capacity = capacity
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.synced = 0  # bytes known durable; unknown after open, so 0
        self.closed = False
        # file position up to which disk blocks are reserved (preallocate.py); None: not reserving
        self.reserved: int | None = self.size if reserve_ahead else None

    def _reserve_for(self, end: int) -> None:
        """Reserve blocks a chunk ahead before a write reaches past the reserved end."""
        if self.reserved is None or end <= self.reserved:
            return
        target = min(self.capacity, max(end, self.reserved) + RESERVE_CHUNK_BYTES)
        if reserve(self.fd, self.reserved, target - self.reserved):
            self.reserved = target
        else:
            self.reserved = None  # not possible here: write unreserved from now on

    @property
    def end(self) -> int:
        """Global offset one past the last written byte."""
        return self.start + self.size

    @property
    def remaining(self) -> int:
        return self.capacity - self.size

    def append(self, data: bytes | memoryview) -> None:
        """Write at the end of the file (the caller is the only writer)."""
        view = memoryview(data)
        pos = self.size
        self._reserve_for(pos + view.nbytes)
        while view:
            n = os.pwrite(self.fd, view[:WRITE_STEP_BYTES], pos)
            pos += n
            view = view[n:]
        self.size = pos

    def append_parts(self, parts: Sequence[bytes]) -> None:
        """Write the concatenation of `parts` at the end of the file.

        A small batch's pieces are joined and written with one pwrite (the copy costs
        less than the kernel's walk over hundreds of small iovecs); a large one goes to the
        kernel straight from the encoder's pieces, pwritev calls of about WRITE_STEP_BYTES
        (at most twice that, and IOV_MAX pieces; the piece count adapts to the pieces' sizes
        as it goes, one sum of their lengths per call where the sizes stay alike).
        """
        if len(parts) <= JOIN_PARTS_MAX:
            self.append(b"".join(parts) if len(parts) > 1 else parts[0])
            return
        pos = self.size
        i, step = 0, IOV_MAX
        while i < len(parts):
            chunk = parts[i:i + step]
            want = sum(map(len, chunk))
            # the piece count that would have made about one step of bytes
            step = max(1, min(IOV_MAX, len(chunk) * WRITE_STEP_BYTES // max(1, want)))
            if want > 2 * WRITE_STEP_BYTES and len(chunk) > 1:
                continue  # far more than a step (large pieces): again with fewer pieces
            i += len(chunk)
            if len(chunk) == 1 and want > WRITE_STEP_BYTES:  # one large piece: stepped by append
                self.size = pos
                self.append(chunk[0])
                pos = self.size
                continue
            self._reserve_for(pos + want)
            n = os.pwritev(self.fd, chunk, pos)
            if n != want:  # a short write (rare): finish this chunk the simple way
                self.size = pos + n
                rest = b"".join(chunk)[n:]
                self.append(rest)
                pos = self.size
            else:
                pos += n
        self.size = pos

    def write_at(self, pos: int, data: bytes) -> None:
        """Write at a file position (queue files rewrite entries during recovery)."""
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, pos)
            pos += n
            view = view[n:]
        self.size = max(self.size, pos)

    def read(self, pos: int, n: int) -> bytes:
        """Read n bytes at file position pos (fewer at the end of the file)."""
        return os.pread(self.fd, n, pos)

    def sync(self) -> None:
        size = self.size
        if self.synced != size:
            os.fdatasync(self.fd)
            self.synced = size

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)  # also frees blocks reserved past `size`
        self.size = size
        self.synced = min(self.synced, size)
        if self.reserved is not None:
            self.reserved = size

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def delete(self) -> None:
        """Unlink the file; the descriptor stays open for readers in flight (closed later)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
