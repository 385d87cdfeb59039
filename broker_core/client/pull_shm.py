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
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import pyarrow as pa

from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.protocol.shared_memory import PAYLOAD_PREFIX, PROBE_PREFIX

UNTRIED, VERIFIED, DECLINED, OFF = "untried", "verified", "declined", "off"
PROBE_AGAIN_AFTER_S = 30.0  # a probe answered inline: no offers for this long (one probe file per 30 s if remote)


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

    @property
    def state(self) -> str:
        return self._state

    def offer(self) -> tuple[pb.SharedMemoryOffer | None, Path | None]:
        """The offer for the next pull, and the probe file to remove once it is answered."""
        state = self._state
        if state == OFF or (state == DECLINED and self._clock() < self._probe_again_at):
            return None, None
        if state == VERIFIED:
            return pb.SharedMemoryOffer(probe_token=self.token), None
        assert self.directory is not None
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


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist(
        [], schema=table.schema)
