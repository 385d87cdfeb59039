"""IndexFile: lookup of CommitLog positions by message key and by client message id.

RocketMQ's design: a file is a 40-byte header, a table of hash slots (4 bytes,
the number of the newest entry whose key hashes there) and an array of 20-byte
entries (key hash 4, physical offset 8, seconds since the file's first entry 4,
number of the previous entry in the same slot 4). A lookup walks a slot's chain
newest first. Hashes collide, so callers confirm each hit on the real record.

Header: begin timestamp (8), end timestamp (8), begin physical offset (8), end
physical offset (8), slot count of this file (4), entry count (4). (RocketMQ
stores the number of used slots in the fifth field; txmq stores the file's slot
count so a file stays readable when the configured size changes.)

Keys: a KEYS entry is indexed as "<topic>#<key>"; a client message id (UNIQ_KEY)
as "#U#<id>" (no topic: get_by_message_id has none; a topic name cannot start
with '#', so the two spaces never collide).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
import threading
import time
from itertools import repeat
from pathlib import Path
from typing import Sequence

import numpy as np

from txmq.broker.store.checksum import crc32
from txmq.broker.store.mapped_file import file_name
from txmq.broker.store.preallocate import back_mapped

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
HEADER_SIZE = HEADER.size  # 40
ENTRY_SIZE = ENTRY.size  # 20
INT32_MAX = (1 << 31) - 1
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
VECTOR_MIN = 16  # below this many items numpy's fixed cost exceeds a plain loop's
RESERVE_AHEAD_BYTES = 1 << 20  # entry blocks allocated ahead of the writes (50k entries)
PENDING_MAX = 8192  # index items an IndexService holds before writing them (see IndexService)


log = logging.getLogger(__name__)

KEY_HASH_MASK = 0x7FFFFFFF


def key_hash(key: str) -> int:
    return crc32(key.encode()) & KEY_HASH_MASK


def uniq_index_key(uniq_key: str) -> str:
    return "#U#" + uniq_key


def topic_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


class IndexFile:
    """One hash-slot index file, memory-mapped.

    Writes go through the map; flushes go through the file descriptor, which stays
    open for that: CPython's mmap.flush() holds the GIL for the whole msync, and
    an index whose slot table a large COMMIT dirtied all over takes tens to
    hundreds of milliseconds to write back, during which no other thread of the
    broker (gRPC handlers, the writer) could run. fdatasync releases the GIL, and
    on Linux it writes back the pages dirtied through a shared map like any others.
    """

    def __init__(self, path: Path, slots: int, capacity: int) -> None:
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        created = False
        try:
            st = os.fstat(fd).st_size
            if st >= HEADER_SIZE:
                header = HEADER.unpack(os.pread(fd, HEADER_SIZE, 0))
                slots = header[4] or slots
                capacity = (st - HEADER_SIZE - slots * SLOT.size) // ENTRY_SIZE
            else:
                os.ftruncate(fd, HEADER_SIZE + slots * SLOT.size + capacity * ENTRY_SIZE)
                header, created = (0, 0, 0, 0, slots, 0), True
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.slots = slots
        self.capacity = capacity
        self.entries_at = HEADER_SIZE + slots * SLOT.size
        (self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, _, self.count) = header
        if self.count == 0:
            self.begin_ts = self.end_ts = self.begin_phys = self.end_phys = 0
        self.count = max(0, min(self.count, capacity))
        self.closed = False
        self.backed: int | None = 0  # file bytes whose blocks are allocated; None: not allocating here
        try:
            # Before the map touches any page: on tmpfs even reading an unallocated page through a
            # map allocates it, and a full disk makes that a SIGBUS. The header and slot table are
            # written anywhere, any time: all their blocks now.
            self._back(0)
            self.mm = mmap.mmap(fd, 0)
        except BaseException:
            os.close(fd)
            if created:  # a full disk: leave no file behind that would be taken as the next one
                self.path.unlink(missing_ok=True)
            raise

    @property
    def full(self) -> bool:
        return self.count >= self.capacity

    def _back(self, entries: int) -> None:
        """Allocate the blocks `entries` more entries will be written to (back_mapped: a full disk
        is an OSError here, not a SIGBUS in the map write)."""
        end = self.entries_at + (self.count + entries) * ENTRY_SIZE
        if self.backed is None or end <= self.backed:
            return
        to = min(self.entries_at + self.capacity * ENTRY_SIZE, end + RESERVE_AHEAD_BYTES)
        self.backed = to if back_mapped(self.fd, self.backed, to - self.backed) else None

    def put(self, hash_value: int, phys: int, timestamp_ms: int) -> None:
        self._back(1)
        mm = self.mm
        n = self.count + 1
        if self.count == 0:
            self.begin_ts, self.begin_phys = timestamp_ms, phys
        slot_at = HEADER_SIZE + (hash_value % self.slots) * SLOT.size
        prev = SLOT.unpack_from(mm, slot_at)[0]
        if not 0 <= prev < n:
            prev = 0  # a garbage slot (torn write before a crash) ends the chain
        diff = max(-INT32_MAX, min(INT32_MAX, (timestamp_ms - self.begin_ts) // 1000))
        ENTRY.pack_into(mm, self.entries_at + (n - 1) * ENTRY_SIZE, hash_value, phys, diff, prev)
        SLOT.pack_into(mm, slot_at, n)
        self.count = n
        self.end_ts, self.end_phys = max(self.end_ts, timestamp_ms), max(self.end_phys, phys)
        HEADER.pack_into(mm, 0, self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slots, n)

    def put_many(self, items: list[tuple[int, int, int]]) -> int:
        """put() for (hash, physical offset, time) items until the file is full; returns how many went in."""
        if len(items) >= VECTOR_MIN:
            return self.put_arrays(*(np.array(col, dtype=np.int64) for col in zip(*items)))
        n = self.count
        room = self.capacity - n
        if room <= 0:
            return 0
        if len(items) > room:
            items = items[:room]
        self._back(len(items))
        if n == 0:
            self.begin_ts, self.begin_phys = items[0][2], items[0][1]
        end_ts, end_phys = self._put_loop(items)
        n += len(items)
        self.count = n
        self.end_ts, self.end_phys = max(self.end_ts, end_ts), max(self.end_phys, end_phys)
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slots, n)
        return len(items)

    def _put_loop(self, items: list[tuple[int, int, int]]) -> tuple[int, int]:
        mm = self.mm
        n = self.count
        begin_ts = self.begin_ts
        slots = self.slots
        entries_at = self.entries_at
        slot_unpack = SLOT.unpack_from
        slot_pack = SLOT.pack_into
        entry_pack = ENTRY.pack_into
        end_ts = end_phys = -1
        for h, phys, ts in items:
            n += 1
            slot_at = HEADER_SIZE + (h % slots) * 4
            prev = slot_unpack(mm, slot_at)[0]
            if not 0 <= prev < n:
                prev = 0  # a garbage slot (torn write before a crash) ends the chain
            diff = (ts - begin_ts) // 1000
            if not -INT32_MAX <= diff <= INT32_MAX:
                diff = INT32_MAX if diff > 0 else -INT32_MAX
            entry_pack(mm, entries_at + (n - 1) * ENTRY_SIZE, h, phys, diff, prev)
            slot_pack(mm, slot_at, n)
            if ts > end_ts:
                end_ts = ts
            if phys > end_phys:
                end_phys = phys
        return end_ts, end_phys

    def put_arrays(self, hashes: np.ndarray, phys: np.ndarray, times: np.ndarray) -> int:
        """put() for items given as int64 arrays, until the file is full; returns how many went in.

        The whole run is written with a few array operations: an item's chain
        predecessor is the previous item of the run in the same slot (found with a
        stable sort on the slot), or the slot's value on disk for the first one; each
        touched slot ends up holding its last item. Same bytes as put() item by item.
        """
        room = self.capacity - self.count
        if room <= 0 or not len(hashes):
            return 0
        if len(hashes) > room:
            hashes, phys, times = hashes[:room], phys[:room], times[:room]
        k = len(hashes)
        self._back(k)
        if self.count == 0:
            self.begin_ts, self.begin_phys = int(times[0]), int(phys[0])
        slot_of = hashes % self.slots
        numbers = np.arange(self.count + 1, self.count + k + 1, dtype=np.int64)
        order = np.argsort(slot_of, kind="stable")
        sorted_slots = slot_of[order]
        sorted_numbers = numbers[order]
        first = np.empty(k, dtype=bool)
        first[0] = True
        np.not_equal(sorted_slots[1:], sorted_slots[:-1], out=first[1:])
        last = np.empty(k, dtype=bool)
        last[-1] = True
        last[:-1] = first[1:]
        prev_sorted = np.empty(k, dtype=np.int64)
        prev_sorted[1:] = sorted_numbers[:-1]
        table = np.frombuffer(self.mm, dtype=">i4", count=self.slots, offset=HEADER_SIZE)
        try:
            on_disk = table[sorted_slots[first]].astype(np.int64)
            on_disk[(on_disk < 0) | (on_disk >= sorted_numbers[first])] = 0  # garbage ends the chain
            prev_sorted[first] = on_disk
            table[sorted_slots[last]] = sorted_numbers[last]
        finally:
            del table  # a live view would keep the mmap from closing
        entries = np.empty(k, dtype=ENTRY_DTYPE)
        entries["hash"] = hashes
        entries["phys"] = phys
        entries["diff"] = np.clip((times - self.begin_ts) // 1000, -INT32_MAX, INT32_MAX)
        entries["prev"][order] = prev_sorted
        at = self.entries_at + self.count * ENTRY_SIZE
        self.mm[at:at + k * ENTRY_SIZE] = entries.tobytes()
        self.count += k
        self.end_ts = max(self.end_ts, int(times.max()))
        self.end_phys = max(self.end_phys, int(phys.max()))
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slots,
                         self.count)
        return k

    def lookup(self, hash_value: int, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Physical offsets of entries with this hash and time in [begin_ms, end_ms], newest first."""
        out: list[int] = []
        if self.count == 0 or self.end_ts < begin_ms or self.begin_ts > end_ms + 1000:
            return out
        mm = self.mm
        try:
            n = SLOT.unpack_from(mm, HEADER_SIZE + (hash_value % self.slots) * SLOT.size)[0]
            steps = 0
            while 0 < n <= self.count and len(out) < limit and steps <= self.count:
                h, phys, diff, prev = ENTRY.unpack_from(mm, self.entries_at + (n - 1) * ENTRY_SIZE)
                ts = self.begin_ts + diff * 1000
                if h == hash_value and begin_ms - 1000 < ts + 1000 and ts <= end_ms:
                    out.append(phys)
                if prev >= n:
                    break
                n = prev
                steps += 1
        except ValueError:  # the file was closed by retention
            return out
        return out

    def flush(self) -> None:
        """Write the file's dirty pages back (without holding the GIL: see the class)."""
        if self.closed:
            return
        try:
            os.fdatasync(self.fd)
        except OSError:
            if not self.closed:  # closed by retention meanwhile: nothing left to flush
                raise

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.mm.close()
            os.close(self.fd)


class IndexService:
    """The sequence of index files; the newest one takes writes.

    Appends hand their items over in bulk and the service writes them in runs of
    up to PENDING_MAX with put_arrays: numpy's per-call cost is then spread over
    thousands of items instead of one batch's hundred. Pending items are written
    before any lookup, flush, retention or close, so a lookup always sees every
    appended message and a checkpoint never covers unwritten items.
    """

    def __init__(self, directory: Path, slots: int, entries_per_file: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.slots = slots
        self.entries_per_file = entries_per_file
        names = sorted(p.name for p in self.directory.iterdir() if p.name.isdigit() and len(p.name) == 20)
        self._files: list[tuple[int, IndexFile]] = [
            (int(n), IndexFile(self.directory / n, slots, entries_per_file)) for n in names]
        self._deleted: list[IndexFile] = []
        self._lock = threading.Lock()  # pending items and writing them
        self._pending_hashes: list[int] = []
        self._pending_phys: list[int] = []
        self._pending_times: list[int] = []
        self._unsynced: set[IndexFile] = set()  # files written since the last flush
        self._full_said = -1e9  # when a full disk was last logged

    def _active(self) -> IndexFile:
        if not self._files or self._files[-1][1].full:
            seq = self._files[-1][0] + 1 if self._files else 1
            f = IndexFile(self.directory / file_name(seq), self.slots, self.entries_per_file)
            self._files = self._files + [(seq, f)]
        return self._files[-1][1]

    def put(self, key: str, phys: int, timestamp_ms: int) -> None:
        with self._lock:
            active = self._active()
            active.put(key_hash(key), phys, timestamp_ms)
            self._unsynced.add(active)

    def put_many(self, items: list[tuple[str, int, int]]) -> None:
        """Index (key, physical offset, store time) items, rolling files as they fill."""
        self.put_hashed([(crc32(k.encode()) & KEY_HASH_MASK, phys, ts) for k, phys, ts in items])

    def put_hashed(self, hashed: list[tuple[int, int, int]]) -> None:
        """Index (key hash, physical offset, store time) items (hashes from key_hash)."""
        if hashed:
            hashes, phys, times = zip(*hashed)
            self.put_columns(hashes, phys, times)

    def put_columns(self, hashes: Sequence[int], phys: Sequence[int], times: Sequence[int] | int, *,
                    defer: bool = False) -> None:
        """Index items given as columns (a single store time for all, or one per item).

        `hashes` are key_hash values or unmasked crc32 values of the keys: they are
        masked with KEY_HASH_MASK when written. `defer`: leave them pending however
        many they are, for the next lookup or flush to write (a large COMMIT publishes
        under the store's write lock, and writing a million index items there would
        hold every other writer).
        """
        n = len(hashes)
        if not n:
            return
        with self._lock:
            self._pending_hashes += hashes
            self._pending_phys += phys[:n] if len(phys) != n else phys
            self._pending_times += repeat(times, n) if type(times) is int else times
            if len(self._pending_hashes) >= PENDING_MAX and not defer:
                self._write_pending()

    def _write_pending(self) -> None:
        """Write the pending items (the caller holds the lock), rolling files as they fill."""
        if not self._pending_hashes:
            return
        hashes = np.array(self._pending_hashes, dtype=np.int64) & KEY_HASH_MASK
        phys = np.array(self._pending_phys, dtype=np.int64)
        times = np.array(self._pending_times, dtype=np.int64)
        self._pending_hashes, self._pending_phys, self._pending_times = [], [], []
        try:
            while len(hashes):
                active = self._active()
                done = active.put_arrays(hashes, phys, times)
                self._unsynced.add(active)
                hashes, phys, times = hashes[done:], phys[done:], times[done:]
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # A full disk: the items stay pending (lookups read them there) until space frees;
            # the messages themselves are in the CommitLog, which refuses writes on its own.
            self._pending_hashes, self._pending_phys, self._pending_times = \
                hashes.tolist(), phys.tolist(), times.tolist()
            now = time.monotonic()
            if now - self._full_said >= 10:
                self._full_said = now
                log.error("index %s: %s; %d items held in memory until space frees", self.directory, exc,
                          len(hashes))

    def write_pending(self) -> None:
        """Write what appends handed over so far (lookups, flush, retention and close do)."""
        if self._pending_hashes:
            with self._lock:
                self._write_pending()

    def lookup(self, key: str, begin_ms: int = 0, end_ms: int | None = None, limit: int = 64) -> list[int]:
        """Candidate physical offsets (unconfirmed), newest first, without duplicates."""
        self.write_pending()
        h = key_hash(key)
        end_ms = (1 << 62) if end_ms is None else end_ms
        seen: set[int] = set()
        out: list[int] = []
        with self._lock:  # items a full disk keeps pending: newer than every file's
            pending = [p for hh, p, t in zip(self._pending_hashes, self._pending_phys, self._pending_times)
                       if hh & KEY_HASH_MASK == h and begin_ms <= t <= end_ms]
        for phys in reversed(pending):
            if phys not in seen:
                seen.add(phys)
                out.append(phys)
        for _, f in reversed(self._files):
            for phys in f.lookup(h, begin_ms, end_ms, limit * 4):
                if phys not in seen:
                    seen.add(phys)
                    out.append(phys)
            if len(out) >= limit * 4:
                break
        return out

    def flush(self) -> None:
        """Write the pending items, then sync every file written since the last flush (a deferred
        write of a large COMMIT's items may have filled several)."""
        with self._lock:
            self._write_pending()
            unsynced, self._unsynced = self._unsynced, set()
        for f in unsynced:
            f.flush()

    def delete_below(self, min_phys: int) -> int:
        """Retention: drop files whose newest entry points below min_phys (never the active one)."""
        with self._lock:  # lookups may write pending items (and roll files) concurrently
            self._write_pending()
            for f in self._deleted:
                f.close()
            self._deleted = []
            removed = 0
            while len(self._files) > 1 and self._files[0][1].end_phys < min_phys:
                _, f = self._files[0]
                self._files = self._files[1:]
                try:
                    os.unlink(f.path)
                except FileNotFoundError:
                    pass
                self._deleted.append(f)
                removed += 1
            return removed

    def close(self) -> None:
        with self._lock:
            self._write_pending()
        for _, f in self._files:
            f.flush()
            f.close()
        for f in self._deleted:
            f.close()
