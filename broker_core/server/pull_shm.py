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

Shared memory is RAM, and a client may never pick its file up (it died between
response and open, or it is stuck), so what the broker leaves there is bounded
(`SharedMemoryLimits`): a pull goes inline instead when the files this broker
wrote and nobody picked up yet would pass `max_pending_bytes`, when the write
would leave the directory fuller than `max_used_ratio`, or when the write fails.
A pull never fails for want of shared memory. Files nobody picked up are swept
once they are older than `STALE_S`, and files a previous broker process left
(it crashed) are removed when the broker starts (`remove_orphaned_payloads`).

Reused files: a new tmpfs file costs more than the bytes written into it (the
kernel allocates and zeroes each page on write, and frees them all when the
client drops its map: about three times the copy itself). So a client keeps the
payload files it is done with and names one in its offer (`reuse_path`); the
broker overwrites that file in place, through the same checks as a probe (in
our directory, named as a payload, a regular file of our own user, not a link),
and answers with its path. A reused file is the client's: it is not counted
against `max_pending_bytes` (the client removes it; if the client dies, the
stale sweep does), only its growth against `max_used_ratio`. If the file cannot
be reused, the payload goes to a new file as before.
"""

from __future__ import annotations

import hmac
import os
import shutil
import stat
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from txmq.broker.protocol.shared_memory import MAX_TOKEN_BYTES, PAYLOAD_PREFIX, PROBE_PREFIX

STALE_S = 120.0  # a payload file this old was never picked up: its pull's deadline passed long ago
SWEEP_EVERY_S = 30.0
REMEMBERED_TOKENS = 4096
DEFAULT_MAX_PENDING_BYTES = 256 << 20
DEFAULT_MAX_USED_RATIO = 0.9
IPC_OVERHEAD_BYTES = 4096  # schema and framing beyond the batch's buffers (a few hundred bytes in practice)
RECOUNT_WHEN_FULL_EVERY_S = 1.0  # while full, look again at which files were picked up at most this often


@dataclass(frozen=True)
class SharedMemoryLimits:
    """How much shared memory one broker may fill with payloads (broker flags --pull-shm-*)."""

    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES  # 0: never through shared memory
    max_used_ratio: float = DEFAULT_MAX_USED_RATIO  # of the directory's file system, after the write


class SharedMemoryPayloads:
    """Decides per pull whether the payload may go through shared memory, and writes it there."""

    def __init__(self, directory: Path | None, limits: SharedMemoryLimits = SharedMemoryLimits()) -> None:
        self.directory = directory  # None: always inline
        self.limits = limits
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self._last_sweep = 0.0
        self._pending = _PendingFiles(limits.max_pending_bytes)

    @property
    def pending_bytes(self) -> int:
        """Bytes of payload files written (or being written) and not known to be picked up."""
        return self._pending.total

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

    def write(self, batch: pa.RecordBatch, reuse_path: str = "") -> tuple[str, int] | None:
        """`batch` as one Arrow IPC stream in the client's file `reuse_path` if it may be reused,
        else in a new file readable by our user only: (path, size), or None when it must go
        inline (no room within the limits, or the write failed)."""
        assert self.directory is not None
        self._sweep_now_and_then()
        estimate = batch.nbytes + IPC_OVERHEAD_BYTES
        if reuse_path:
            reused = self._overwrite(Path(reuse_path), batch, estimate)
            if reused is not None:
                return reuse_path, reused
        if not self._room_on_file_system(estimate) or not self._pending.reserve(estimate):
            return None
        path = self.directory / f"{PAYLOAD_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
        try:
            size = _write_ipc_file(path, batch)
        except (OSError, pa.ArrowException):
            self._pending.release(estimate)
            return None
        self._pending.record(str(path), size, estimate)
        return str(path), size

    def _overwrite(self, path: Path, batch: pa.RecordBatch, estimate: int) -> int | None:
        """Write `batch` over the client's payload file `path` (see module doc): its new size, or
        None when the file may not or cannot be reused."""
        if path.parent != self.directory or not path.name.startswith(PAYLOAD_PREFIX):
            return None
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None  # swept, or never there
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
                return None
            if estimate > st.st_size and not self._room_on_file_system(estimate - st.st_size):
                return None
            return _write_ipc_over(fd, batch)
        except (OSError, pa.ArrowException):
            return None
        finally:
            os.close(fd)

    def _room_on_file_system(self, size: int) -> bool:
        """Whether writing `size` bytes leaves the directory's file system within max_used_ratio
        (shared memory is RAM other programs use too: a full /dev/shm fails their writes)."""
        try:
            usage = shutil.disk_usage(self.directory)
        except OSError:
            return False
        return usage.total > 0 and usage.used + size <= usage.total * self.limits.max_used_ratio

    def _sweep_now_and_then(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep < SWEEP_EVERY_S:
            return
        self._last_sweep = now
        sweep_stale_payloads(self.directory)
        remove_orphaned_payloads(self.directory, ours_too=False)  # e.g. a killed client's kept files

    def remove_orphans(self) -> int:
        """At start-up: remove the payload files of broker processes that are gone (see remove_orphaned_payloads)."""
        return remove_orphaned_payloads(self.directory) if self.directory is not None else 0


class _PendingFiles:
    """The payload files this broker wrote that may still be in the directory, and their bytes.

    Clients unlink their files without telling the broker, so which files are
    gone is learnt by looking (one stat per file), and only when the total
    would pass the cap: with clients that pick up at once that is one stat per
    pull on average. While the cap stays reached (a client that never picks up),
    looking again waits RECOUNT_WHEN_FULL_EVERY_S, so a full cap costs nothing per pull.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.total = 0  # written files' sizes plus reservations of writes under way
        self._files: dict[str, int] = {}
        self._lock = threading.Lock()
        self._next_recount = 0.0

    def reserve(self, size: int) -> bool:
        """Count `size` bytes against the cap if they fit (after forgetting picked-up files if needed)."""
        if size > self.max_bytes:
            return False
        with self._lock:
            if self.total + size > self.max_bytes and time.monotonic() >= self._next_recount:
                self._forget_picked_up()
                if self.total + size > self.max_bytes:
                    self._next_recount = time.monotonic() + RECOUNT_WHEN_FULL_EVERY_S
            if self.total + size > self.max_bytes:
                return False
            self.total += size
            return True

    def record(self, path: str, size: int, reserved: int) -> None:
        """A reserved write finished: count the file at its real size."""
        with self._lock:
            self._files[path] = size
            self.total += size - reserved

    def release(self, reserved: int) -> None:
        with self._lock:
            self.total -= reserved

    def _forget_picked_up(self) -> None:
        """Stop counting files that are gone (picked up by their client, or swept). Called under the lock."""
        for path in [p for p in self._files if not os.path.lexists(p)]:
            self.total -= self._files.pop(path)


def _write_ipc_file(path: Path, batch: pa.RecordBatch) -> int:
    """Write `batch` as an IPC stream to a new file created 0600 (whatever the umask): its size.

    Streamed with write(2), not through a memory map of the new file: tmpfs then
    fills whole pages without a page fault per page (~2x cheaper per byte).
    """
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    try:
        with pa.OSFile(str(path), "wb") as sink:
            with pa.ipc.new_stream(sink, batch.schema) as writer:
                writer.write_batch(batch)
            return sink.tell()
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _write_ipc_over(fd: int, batch: pa.RecordBatch) -> int:
    """Write `batch` as an IPC stream from the start of the open file `fd`, cut the file to the
    stream's end, and return that size. Never truncates first: the file's pages are kept."""
    sink = _FileDescriptorSink(fd)
    with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), batch.schema) as writer:
        writer.write_batch(batch)
    os.ftruncate(fd, sink.position)
    return sink.position


class _FileDescriptorSink:
    """The file object pyarrow's writer needs, writing at increasing offsets of `fd` with pwrite
    (pyarrow hands over its buffers without copying them; a stream of a batch is about 15 writes)."""

    closed = False

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.position = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        while view.nbytes:
            written = os.pwrite(self.fd, view, self.position)
            self.position += written
            view = view[written:]
        return size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def sweep_stale_payloads(directory: Path, stale_s: float = STALE_S) -> int:
    """Remove payload files older than `stale_s` (of any broker: the client unlinks fresh ones)."""
    removed = 0
    cutoff = time.time() - stale_s
    for entry in _payload_entries(directory):
        try:
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue  # picked up (unlinked) meanwhile, or not ours to remove
    return removed


def remove_orphaned_payloads(directory: Path, ours_too: bool = True) -> int:
    """Remove payload files whose writer is no longer running: a broker that crashed left them,
    or a client killed while keeping its payload files for reuse (see client/pull_shm.py).

    A payload file is named after its writer's pid (the broker's, or the client's
    for a kept file). A file whose pid is gone, or at start-up is ours (a
    previous process had our pid: this one has written nothing yet), cannot be
    picked up by anyone any more. Files of live pids are another broker's or a
    client's on this host and are left alone (the stale sweep still covers
    them, and a live pid that merely reuses a dead one's number).
    """
    removed = 0
    for entry in _payload_entries(directory):
        pid = _writer_pid(entry.name)
        if pid is None or (_process_exists(pid) and (pid != os.getpid() or not ours_too)):
            continue
        try:
            os.unlink(entry.path)
            removed += 1
        except OSError:
            continue  # picked up meanwhile, or another user's
    return removed


def _payload_entries(directory: Path) -> list[os.DirEntry]:
    try:
        return [entry for entry in os.scandir(directory) if entry.name.startswith(PAYLOAD_PREFIX)]
    except OSError:
        return []


def _writer_pid(name: str) -> int | None:
    """The pid in a payload file's name (PAYLOAD_PREFIX + pid + '-' + random), None if it has none."""
    pid = name[len(PAYLOAD_PREFIX):].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OSError:
        return False
    return True
