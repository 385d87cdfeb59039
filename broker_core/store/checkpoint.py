"""StoreCheckpoint and the abort marker: what recovery may trust after a restart.

The checkpoint records two physical offsets, each a batch boundary (so never
inside an atomic group):

- ``commitlog_flushed``: every CommitLog byte below it was fsynced;
- ``dispatch_flushed``: the ConsumeQueue and index entries of every record
  below it were fsynced (always <= commitlog_flushed).

Recovery re-verifies and re-dispatches only from ``dispatch_flushed``, which is
why its cost follows the unflushed tail and not the size of the log.

The file has two 64-byte slots written alternately, each with a sequence number
and a CRC; a torn checkpoint write leaves the other slot intact.

The abort marker is a file created when the store opens and removed on a clean
close: if it exists at open, the previous run crashed.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from txmq.broker.store.durable import fsync_dir

SLOT = struct.Struct(">qqqq")  # sequence, commitlog_flushed, dispatch_flushed, timestamp_ms
SLOT_BYTES = 64


@dataclass
class Checkpoint:
    commitlog_flushed: int = 0
    dispatch_flushed: int = 0
    timestamp_ms: int = 0


class StoreCheckpoint:
    """The checkpoint file (two CRC-protected slots)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.sequence = 0
        self.current = self._load()

    def _load(self) -> Checkpoint:
        best: tuple[int, Checkpoint] | None = None
        raw = os.pread(self.fd, 2 * SLOT_BYTES, 0)
        for i in range(2):
            chunk = raw[i * SLOT_BYTES:i * SLOT_BYTES + SLOT.size + 4]
            if len(chunk) < SLOT.size + 4:
                continue
            body, crc = chunk[:SLOT.size], int.from_bytes(chunk[SLOT.size:], "big")
            if zlib.crc32(body) != crc:
                continue
            seq, cl, dp, ts = SLOT.unpack(body)
            if best is None or seq > best[0]:
                best = (seq, Checkpoint(cl, min(dp, cl), ts))
        if best is None:
            return Checkpoint()
        self.sequence = best[0]
        return best[1]

    def write(self, commitlog_flushed: int, dispatch_flushed: int) -> None:
        self.sequence += 1
        cp = Checkpoint(commitlog_flushed, min(dispatch_flushed, commitlog_flushed), int(time.time() * 1000))
        body = SLOT.pack(self.sequence, cp.commitlog_flushed, cp.dispatch_flushed, cp.timestamp_ms)
        slot = body + zlib.crc32(body).to_bytes(4, "big")
        os.pwrite(self.fd, slot.ljust(SLOT_BYTES, b"\0"), (self.sequence % 2) * SLOT_BYTES)
        os.fdatasync(self.fd)
        self.current = cp

    def close(self) -> None:
        os.close(self.fd)


class AbortMarker:
    """Present while the store is open; left behind by a crash."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def crashed(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        with open(self.path, "wb") as f:
            f.write(b"running\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.path.parent)

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        fsync_dir(self.path.parent)
