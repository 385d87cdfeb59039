"""The client half of shared-memory pulls: offer it, prove it, read payloads zero-copy.

A pull payload that travels as gRPC bytes costs both processes several copies;
on the broker's host the broker can instead write it to a file in the
shared-memory directory (server/pull_shm.py). The client never assumes it is on
that host: its first offer carries a probe file holding a random token, and
only a broker that reads the token there answers through shared memory. The
probe file is removed after that pull; the broker remembers the token.

States: UNTRIED (the next pull probes) → VERIFIED (offers the token only) → back
to UNTRIED if a verified offer is answered inline (the broker restarted, a
failover reached another broker, or the broker is out of room for payloads).
A probe answered inline means another host, or a broker out of room (it may
not send more than its cap through shared memory, and cannot say which): the
client then makes no offers (DECLINED) for PROBE_AGAIN_AFTER_S and probes again.
A payload file that cannot be opened turns shared memory OFF for this client.

Kept payload files: a new tmpfs file costs more than the bytes in it (its pages
are allocated on the broker's write and freed when our map goes), so the client
keeps the payload files it is done with (`PayloadFiles`) and offers one per
verified pull (`reuse_path`): the broker writes over it. A file is done with once every batch
read from it is gone: its batch is read zero-copy from a map, and the map's
finalizer hands the file back. A file is never offered while it is lent out, so
the broker never writes under a live batch. A pull that raised never hands its
offered file back (the broker may still be writing it); such files, and all
others, are removed when the client goes. A client killed without running its
exit handlers (a Spark Python worker is) leaves its files: the broker's periodic
sweep removes payload files whose pid is gone.
"""

from __future__ import annotations

import mmap
import os
import secrets
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Callable

import pyarrow as pa

from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.protocol.shared_memory import PAYLOAD_PREFIX, PROBE_PREFIX

UNTRIED, VERIFIED, DECLINED, OFF = "untried", "verified", "declined", "off"
PROBE_AGAIN_AFTER_S = 30.0  # a probe answered inline: no offers for this long (one probe file per 30 s if remote)
MAX_FREE_FILES = 2  # payload files kept for reuse beyond those lent out (each holds one payload's RAM)


class SharedMemoryUnreadable(Exception):
    """The broker answered through a file this client cannot map: pull again inline."""


class SharedMemoryPulls:
    """One client's shared-memory state (thread-safe: executors pull from several threads)."""

    def __init__(self, directory: Path | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.token = secrets.token_bytes(16)
        self._state = UNTRIED if directory is not None else OFF
        self._lock = threading.Lock()
        self._clock = clock
        self._probe_again_at = 0.0
        self.files = PayloadFiles(directory) if directory is not None else None

    @property
    def state(self) -> str:
        return self._state

    def offer(self) -> tuple[pb.SharedMemoryOffer | None, Path | None]:
        """The offer for the next pull, and the probe file to remove once it is answered."""
        state = self._state
        if state == OFF or (state == DECLINED and self._clock() < self._probe_again_at):
            return None, None
        assert self.directory is not None and self.files is not None
        if state == VERIFIED:  # (a probe offers no file to reuse: a remote broker would leave it unused)
            return pb.SharedMemoryOffer(probe_token=self.token, reuse_path=self.files.lend() or ""), None
        probe = self.directory / f"{PROBE_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            self._set(OFF)
            return None, None
        try:
            os.write(fd, self.token)
        finally:
            os.close(fd)
        return pb.SharedMemoryOffer(probe_path=str(probe), probe_token=self.token), probe

    def settle(self, offer: pb.SharedMemoryOffer | None, probe: Path | None, used: bool) -> None:
        """Record how the broker answered an offer (None: the answer says nothing about it)."""
        if offer is None:
            return
        if used:
            self._set(VERIFIED)
        elif probe is None:
            self._set(UNTRIED)
        else:
            self._set(DECLINED, probe_again_at=self._clock() + PROBE_AGAIN_AFTER_S)

    def reclaim(self, offer: pb.SharedMemoryOffer | None, payload_path: str) -> None:
        """The pull of `offer` was answered (with its payload in `payload_path`, "" if inline):
        the offer's file is free again unless the broker wrote this payload into it."""
        if offer is not None and offer.reuse_path and offer.reuse_path != payload_path and self.files is not None:
            self.files.give_back(offer.reuse_path)

    def turn_off(self) -> None:
        self._set(OFF)

    def _set(self, state: str, probe_again_at: float = 0.0) -> None:
        with self._lock:
            if self._state != OFF:
                self._state = state
                self._probe_again_at = probe_again_at

    def read(self, path: str, size: int) -> pa.RecordBatch:
        """Map the payload file, unlink it, and read its batch without copying (the batch keeps the map)."""
        file = Path(path)
        if self.directory is None or file.parent != self.directory or not file.name.startswith(PAYLOAD_PREFIX):
            raise SharedMemoryUnreadable(f"broker named a payload file outside {self.directory}: {path}")
        if self.files is not None and self.files.is_lent(path):
            return self.files.read(path, size)
        try:
            mapped = pa.memory_map(path)
        except OSError as exc:
            raise SharedMemoryUnreadable(f"cannot map pull payload {path}: {exc}") from None
        try:
            file.unlink(missing_ok=True)
            if mapped.size() != size:
                raise SharedMemoryUnreadable(f"pull payload {path} has {mapped.size()} bytes, expected {size}")
            return _one_batch(pa.ipc.open_stream(mapped).read_all())
        finally:
            mapped.close()


class PayloadFiles:
    """This client's reusable payload files: free ones (offered to the broker), and lent ones
    (offered for a pull under way, or holding a batch that is still alive). Thread-safe."""

    def __init__(self, directory: Path, max_free: int = MAX_FREE_FILES) -> None:
        self.directory = directory
        self.max_free = max_free
        self._free: list[str] = []
        self._lent: set[str] = set()
        self._lock = threading.Lock()
        self._all: set[str] = set()  # every file of ours that may exist; removed when we go
        self._remove_at_exit = weakref.finalize(self, _unlink_all, self._all)

    @property
    def free_count(self) -> int:
        return len(self._free)

    def lend(self) -> str | None:
        """A free file (a new empty one if none), now lent out; None if none can be created."""
        with self._lock:
            while self._free:
                path = self._free.pop()
                if os.path.lexists(path):  # the broker's stale sweep may have removed an idle one
                    self._lent.add(path)
                    return path
                self._all.discard(path)
        path = str(self.directory / f"{PAYLOAD_PREFIX}{os.getpid()}-{uuid.uuid4().hex}")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        except OSError:
            return None
        with self._lock:
            self._all.add(path)
            self._lent.add(path)
        return path

    def is_lent(self, path: str) -> bool:
        with self._lock:
            return path in self._lent

    def give_back(self, path: str) -> None:
        """`path` is not in use any more: keep it for reuse, or remove it when enough are kept."""
        if not path:
            return
        with self._lock:
            if path not in self._lent:
                return
            self._lent.discard(path)
            if len(self._free) < self.max_free:
                self._free.append(path)
                return
            self._all.discard(path)
        _unlink_all({path})

    def read(self, path: str, size: int) -> pa.RecordBatch:
        """The batch the broker wrote into our lent file `path`, mapped without copying; the
        file is given back once the map (so every buffer of the batch) is gone."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                actual = os.fstat(fd).st_size
                if actual != size:
                    raise SharedMemoryUnreadable(f"pull payload {path} has {actual} bytes, expected {size}")
                mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        except (OSError, ValueError) as exc:
            self._drop(path)
            raise SharedMemoryUnreadable(f"cannot map pull payload {path}: {exc}") from None
        except SharedMemoryUnreadable:
            self._drop(path)
            raise
        weakref.finalize(mapped, self.give_back, path)
        return _one_batch(pa.ipc.open_stream(pa.py_buffer(mapped)).read_all())

    def _drop(self, path: str) -> None:
        with self._lock:
            self._lent.discard(path)
            self._all.discard(path)
        _unlink_all({path})

    def remove_all(self) -> None:
        """Remove every file (a batch still alive keeps its map: unlinking does not disturb it)."""
        self._remove_at_exit()


def _unlink_all(paths: set[str]) -> None:
    for path in list(paths):
        try:
            os.unlink(path)
        except OSError:
            pass
    paths.clear()


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist(
        [], schema=table.schema)
