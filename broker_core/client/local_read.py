"""Same-host reads, the one exception to the network data plane: decode the records from the
broker's CommitLog files.

Off by default (`NativeClient(local_reads=True)`, the Spark option `localReads`). Over
Flight, the broker builds every batch and the bytes cross the transport; a client on the
broker's host can skip both: its DoGet asks for read plans (`PullRequest.read_plans`), and
the broker answers each step with an empty batch whose progress names where the records
are (their physical offsets and sizes, and the segment file, server side
`columnar_read.plan_queue_read`). The client maps that segment read-only and builds the same
batch with the broker's own decode. The broker still decides everything a read means: the
queue's bounds, which entries (committed messages only), retention and the batch cut; the
client only decodes bytes where it was told to.

Why this is safe:
- **The same file.** The plan names the segment's device and inode; the client opens the
  path read-only and without following a final link, and uses it only if fstat gives the
  same pair: a file with that name on another host or in another mount namespace, or a
  store recreated under the same path, is not used.
- **Records that do not move.** The CommitLog is append-only; a record a queue entry points
  at is never rewritten, and a segment is only ever truncated past the log's visible end,
  so the mapped bytes of a planned record stay valid. A segment deleted by retention stays
  readable through a map made before; one deleted before the client opened it fails the
  open, and the client reads through the broker instead (which reports the deletion).
- **Checked bytes.** The decode checks every record against its entry (magic code,
  physical offset, sizes), as the broker's own read does.
- **No more access than the OS gives.** The client can read the files only if the OS lets
  its user open them, and then it could read them without txmq.

Anything that goes wrong (the file cannot be opened or mapped, is not the named file, or
holds other bytes) raises LocalReadUnavailable: the client turns same-host reads off and
reads through the broker from then on.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict

import numpy as np
import pyarrow as pa

from txmq.broker.errors import StoreError
from txmq.broker.protocol import native_pb2 as pb

MAPS_KEPT = 8  # segment maps kept per client (address space only: the pages are the page cache's)


class LocalReadUnavailable(Exception):
    """A plan that this client cannot read here: pull through the broker instead."""


class LocalSegments:
    """Read-only maps of the CommitLog segments plans name, each checked to be the named file.
    Thread-safe: executors pull from several threads."""

    def __init__(self, kept: int = MAPS_KEPT) -> None:
        self.kept = kept
        self._maps: OrderedDict[tuple[str, int, int, int], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def batch(self, plan: pb.LocalReadPlan, topic: str, queue_id: int) -> pa.RecordBatch:
        """The pull batch of the records `plan` places, decoded from the segment it names."""
        phys = np.frombuffer(plan.physical_offsets, dtype="<i8").astype(np.int64)
        sizes = np.frombuffer(plan.sizes, dtype="<i4").astype(np.int64)
        if len(phys) == 0 or len(phys) != len(sizes) or (sizes <= 0).any():
            raise LocalReadUnavailable("the broker's read plan is malformed")
        seg = plan.segment
        at = phys - seg.start
        end = int((at + sizes).max())
        if int(at.min()) < 0:
            raise LocalReadUnavailable(f"the read plan places a record before segment {seg.path}")
        data = self._mapped(seg, end)[:end]  # nothing past the planned records is read (see _map_checked)
        try:
            from txmq.broker.store.pull_decode import decode_pull_batch  # local reads only: a writer never loads it

            return decode_pull_batch(data, at, phys, sizes, topic, queue_id)
        except StoreError as exc:
            raise LocalReadUnavailable(f"segment {seg.path} does not hold the planned records: {exc}") from None

    def _mapped(self, seg: pb.CommitLogSegment, end: int) -> np.ndarray:
        """The segment's map, covering at least its first `end` bytes (mapped again once it grew)."""
        # the name too: an inode number is reused once its file is deleted, by another segment's file
        key = (seg.path, seg.start, seg.device, seg.inode)
        with self._lock:
            data = self._maps.get(key)
            if data is not None and len(data) >= end:
                self._maps.move_to_end(key)
                return data
        data = _map_checked(seg, end)
        with self._lock:
            self._maps[key] = data
            self._maps.move_to_end(key)
            while len(self._maps) > self.kept:
                self._maps.popitem(last=False)  # the map closes once no array uses it
        return data


def _map_checked(seg: pb.CommitLogSegment, end: int) -> np.ndarray:
    """Open and map the segment read-only if it is the file the broker named and holds `end` bytes.

    The map covers the file as it is now; reads stay within the planned records,
    which the broker never truncates (a page of a map past the file's end would
    fault: the broker's own truncations only cut past the log's visible end)."""
    if not os.path.isabs(seg.path):
        raise LocalReadUnavailable(f"the read plan names a relative path: {seg.path!r}")
    try:
        fd = os.open(seg.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise LocalReadUnavailable(f"cannot open CommitLog segment {seg.path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (seg.device, seg.inode):
            raise LocalReadUnavailable(f"{seg.path} here is not the broker's CommitLog segment (another host "
                                       f"or mount namespace, or a recreated store)")
        if st.st_size < end:
            raise LocalReadUnavailable(f"CommitLog segment {seg.path} has {st.st_size} bytes, the plan needs {end}")
        return np.frombuffer(mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ), dtype=np.uint8)
    except (OSError, ValueError) as exc:
        raise LocalReadUnavailable(f"cannot map CommitLog segment {seg.path}: {exc}") from None
    finally:
        os.close(fd)
