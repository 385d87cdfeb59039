"""Pull payloads through shared memory when the client runs on the broker's host.

A pull's Arrow IPC payload is megabytes; sent as gRPC bytes it is copied into a
Python bytes object, the protobuf response, gRPC's frames, the socket, and back
out on the client: on loopback that costs more CPU than building the batch.
When the client can map a file the broker writes, the broker writes the IPC
stream once, straight into a file in the shared-memory directory (/dev/shm),
and the response carries only its name; the client maps it zero-copy and
unlinks it.

Nothing is assumed: the client offers shared memory with a probe file it wrote
in that directory and the random token it holds. The broker answers through
shared memory only if it reads that token from that file (a client on another
host, or in a container with its own /dev/shm, has no such file here), and then
remembers the token so later offers need no file. Otherwise the payload goes
inline, as it always did.

Files a client never picked up (it died between response and open) are swept
once they are older than `STALE_S`; the client unlinks its files at once.
"""

from __future__ import annotations

import hmac
import os
import threading
import time
import uuid
from collections import OrderedDict
from pathlib import Path

import pyarrow as pa

from txmq.broker.protocol.shared_memory import MAX_TOKEN_BYTES, PAYLOAD_PREFIX, PROBE_PREFIX

STALE_S = 120.0  # a payload file this old was never picked up: its pull's deadline passed long ago
SWEEP_EVERY_S = 30.0
REMEMBERED_TOKENS = 4096


class SharedMemoryPayloads:
    """Decides per pull whether the payload may go through shared memory, and writes it there."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory  # None: always inline
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self._last_sweep = 0.0

    def accepts(self, probe_path: str, token: bytes) -> bool:
        """Whether the client that sent this offer shares our shared-memory directory."""
        if self.directory is None or not token or len(token) > MAX_TOKEN_BYTES:
            return False
        with self._lock:
            if token in self._verified:
                self._verified.move_to_end(token)
                return True
        if not probe_path or not self._probe_matches(Path(probe_path), token):
            return False
        with self._lock:
            self._verified[token] = None
            while len(self._verified) > REMEMBERED_TOKENS:
                self._verified.popitem(last=False)
        return True

    def _probe_matches(self, path: Path, token: bytes) -> bool:
        """Read the probe only where a probe may be: a regular file named txmq-probe-* in our directory."""
        if path.parent != self.directory or not path.name.startswith(PROBE_PREFIX):
            return False
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            return hmac.compare_digest(os.read(fd, MAX_TOKEN_BYTES + 1), token)
        except OSError:
            return False
        finally:
            os.close(fd)

    def write(self, batch: pa.RecordBatch) -> tuple[str, int]:
        """`batch` as one Arrow IPC stream in a new file (readable by our user only): (path, size).

        Streamed with write(2), not through a memory map of the new file: tmpfs then
        fills whole pages without a page fault per page (~2x cheaper per byte).
        """
        assert self.directory is not None
        self._sweep_now_and_then()
        path = self.directory / f"{PAYLOAD_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            with pa.OSFile(str(path), "wb") as sink:
                with pa.ipc.new_stream(sink, batch.schema) as writer:
                    writer.write_batch(batch)
                size = sink.tell()
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return str(path), size

    def _sweep_now_and_then(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep < SWEEP_EVERY_S:
            return
        self._last_sweep = now
        sweep_stale_payloads(self.directory)


def sweep_stale_payloads(directory: Path, stale_s: float = STALE_S) -> int:
    """Remove payload files older than `stale_s` (of any broker: the client unlinks fresh ones)."""
    removed = 0
    cutoff = time.time() - stale_s
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(PAYLOAD_PREFIX):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue  # picked up (unlinked) meanwhile, or not ours to remove
    return removed
