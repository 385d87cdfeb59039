"""The CommitLog's page-cache window: flushed bytes older than the window leave the page cache.

What left the cache is read from the kernel (mincore over a map of the file), so
these tests see what the advice really did, not what the code meant to do. What
must stay is checked on the advice given (no advice touched it): the kernel may
evict any page on its own under memory pressure, which a test cannot prevent.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from pathlib import Path

import pytest

from txmq.broker.store import Message, MessageStore, StoreConfig
from txmq.broker.store.page_cache import PROTECT_FACTOR, PageCacheWindow

PAGE = mmap.PAGESIZE
# The page cache may hold a file in folios of up to 2 MiB, and advice evicts whole folios
# only: the tests move in units of that size (the broker drops steps of 64 MiB).
UNIT = 2 << 20
UNIT_PAGES = UNIT // PAGE
_libc = ctypes.CDLL(None, use_errno=True)


def resident_pages(path: Path) -> list[bool]:
    """Which pages of the file are in the page cache: mincore over a shared map of it (the map
    touches no page; for a file mapping mincore reports the page cache)."""
    size = path.stat().st_size
    pages = (size + PAGE - 1) // PAGE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as m:
        anchor = ctypes.c_char.from_buffer(m)
        try:
            if _libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
        finally:
            del anchor  # the map cannot close while a ctypes object points into it
    return [bool(b & 1) for b in vec]


class Segment:
    """The parts of a CommitLog segment the window uses."""

    def __init__(self, path: Path, start: int, capacity: int) -> None:
        self.path, self.start, self.capacity, self.closed = path, start, capacity, False
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def fill(self, size: int) -> None:
        os.pwrite(self.fd, os.urandom(size), 0)
        os.fsync(self.fd)


@pytest.fixture(autouse=True)
def advice_is_honoured(tmp_path):
    """Skip where the file system keeps advised-out pages (tmpfs holds files only in memory)."""
    probe = Segment(tmp_path / "probe", 0, UNIT)
    try:
        probe.fill(UNIT)
        os.posix_fadvise(probe.fd, 0, UNIT, os.POSIX_FADV_DONTNEED)
        if any(resident_pages(probe.path)):
            pytest.skip("this file system does not drop advised-out pages")
    finally:
        os.close(probe.fd)


@pytest.fixture(autouse=True)
def advice(monkeypatch) -> dict[int, list[tuple[int, int]]]:
    """Every range the window advises out, per file descriptor (the advice is still given)."""
    from txmq.broker.store import page_cache

    given: dict[int, list[tuple[int, int]]] = {}
    real = page_cache._fadvise

    def recording(fd: int, offset: int, length: int, what: int) -> None:
        given.setdefault(fd, []).append((offset, offset + length))
        real(fd, offset, length, what)

    monkeypatch.setattr(page_cache, "_fadvise", recording)
    return given


def left_alone(seg: "Segment", advice: dict[int, list[tuple[int, int]]]) -> list[bool]:
    """Per UNIT of the segment's file: True where no advice touched it (it stays as cached as the
    kernel leaves it)."""
    size = seg.path.stat().st_size
    return [not any(lo < start + UNIT and start < hi for lo, hi in advice.get(seg.fd, []))
            for start in range(0, size, UNIT)]


@pytest.fixture
def two_segments(tmp_path):
    segs = [Segment(tmp_path / "a", 0, 4 * UNIT), Segment(tmp_path / "b", 4 * UNIT, 4 * UNIT)]
    for seg in segs:
        seg.fill(4 * UNIT)
    yield segs
    for seg in segs:
        os.close(seg.fd)


def units(path: Path) -> list[bool | None]:
    """Residency per UNIT of the file: True (every page cached), False (none), None (mixed)."""
    pages = resident_pages(path)
    out = []
    for i in range(0, len(pages), UNIT_PAGES):
        chunk = pages[i:i + UNIT_PAGES]
        out.append(True if all(chunk) else False if not any(chunk) else None)
    return out


def test_flushed_bytes_older_than_the_window_leave_the_page_cache(two_segments, advice):
    a, b = two_segments
    window = PageCacheWindow(2 * UNIT, lambda: two_segments, step_bytes=UNIT)
    assert window.release(6 * UNIT) == 4 * UNIT  # [0, 4 units) dropped: all of a, none of b
    assert units(a.path) == [False] * 4
    assert left_alone(b, advice) == [True] * 4


def test_the_window_drops_across_a_segment_boundary(two_segments, advice):
    a, b = two_segments
    window = PageCacheWindow(UNIT, lambda: two_segments, step_bytes=UNIT)
    window.release(6 * UNIT)  # drops [0, 5 units)
    assert units(a.path) == [False] * 4
    assert units(b.path)[0] is False and left_alone(b, advice) == [False, True, True, True]


def test_the_window_waits_for_a_whole_step(two_segments, advice):
    a, _ = two_segments
    window = PageCacheWindow(2 * UNIT, lambda: two_segments, step_bytes=2 * UNIT)
    assert window.release(3 * UNIT) == 0  # one unit past the window: less than a step
    assert left_alone(a, advice) == [True] * 4
    assert window.release(4 * UNIT) == 2 * UNIT
    assert units(a.path)[:2] == [False, False] and left_alone(a, advice) == [False, False, True, True]


def test_bytes_already_dropped_are_not_advised_again(two_segments):
    window = PageCacheWindow(2 * UNIT, lambda: two_segments, step_bytes=UNIT)
    assert window.release(4 * UNIT) == 2 * UNIT
    assert window.release(4 * UNIT) == 0
    assert window.release(5 * UNIT) == UNIT
    assert window.released_bytes == 3 * UNIT


def test_keep_zero_turns_the_window_off(two_segments, advice):
    a, _ = two_segments
    window = PageCacheWindow(0, lambda: two_segments, step_bytes=UNIT)
    assert not window.enabled
    assert window.release(8 * UNIT) == 0
    assert left_alone(a, advice) == [True] * 4


def test_a_negative_window_is_refused():
    with pytest.raises(ValueError, match="keep_bytes must not be negative"):
        PageCacheWindow(-1, list)
    with pytest.raises(ValueError, match="page_cache_keep_bytes"):
        StoreConfig(Path("/nonexistent"), page_cache_keep_bytes=-1)


def test_a_store_drops_old_flushed_bytes_and_still_reads_them(tmp_path, advice):
    store = MessageStore(StoreConfig(tmp_path / "s", page_cache_keep_bytes=UNIT, commitlog_segment_bytes=4 * UNIT))
    try:
        store.page_cache.step_bytes = UNIT
        bodies = [os.urandom(1000) for _ in range(12_000)]  # ~13 MB: segments 0-2 and part of 3
        for i in range(0, len(bodies), 500):
            store.append([Message("t", body, 0) for body in bodies[i:i + 500]])
        store._periodic()  # the flush thread's round: flush, checkpoint, release
        assert store.stats()["page_cache_released_bytes"] == store.page_cache.released == (
            (store.commitlog.flushed_end - UNIT) // UNIT * UNIT)  # whole 2 MiB folios
        assert units(store.commitlog.segments[0].path) == [False] * 4
        assert left_alone(store.commitlog.segments[-1], advice)[-1]  # the newest bytes stay
        read = store.read_queue("t", 0, 0, len(bodies))
        assert [m.body for m in read.messages] == bodies  # dropped bytes come back from disk
    finally:
        store.close()


def test_protected_bytes_stay_cached_behind_the_window(two_segments, advice):
    a, _ = two_segments
    window = PageCacheWindow(UNIT, lambda: two_segments, step_bytes=UNIT)
    window.protect(lambda: 2 * UNIT)  # e.g. the first half of a pending transaction
    assert window.release(6 * UNIT) == 2 * UNIT  # [0, 2 units) only, not [0, 5)
    assert units(a.path)[:2] == [False, False] and left_alone(a, advice) == [False, False, True, True]


def test_protection_ends_a_few_windows_behind_the_flushed_end(two_segments, advice):
    a, b = two_segments
    window = PageCacheWindow(UNIT, lambda: two_segments, step_bytes=UNIT)
    window.protect(lambda: 0)  # a transaction pending since the start of the log
    assert window.release(8 * UNIT) == (8 - PROTECT_FACTOR) * UNIT
    assert units(a.path) == [False] * 4
    assert left_alone(b, advice) == [True] * 4


def test_nothing_pending_protects_nothing(two_segments):
    window = PageCacheWindow(UNIT, lambda: two_segments, step_bytes=UNIT)
    window.protect(lambda: None)
    assert window.release(6 * UNIT) == 5 * UNIT


def test_the_transaction_engine_protects_its_pending_halves(tmp_path):
    from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine

    store = MessageStore(StoreConfig(tmp_path / "s"))
    try:
        engine = TransactionEngine(store, TransactionConfig())
        assert engine.lowest_pending_half() is None
        store.append([Message("t", b"before", 0)])
        start_of_a = store.commitlog.write_end
        engine.prepare([Message("t", b"half-a", 0)], transaction_id="a")
        start_of_b = store.commitlog.write_end
        engine.prepare([Message("t", b"half-b", 0)], transaction_id="b")
        assert engine.lowest_pending_half() == start_of_a
        engine.end("a", Resolution.COMMIT)
        assert engine.lowest_pending_half() == start_of_b  # only b is pending
        engine.end("b", Resolution.ROLLBACK)
        assert engine.lowest_pending_half() is None
        assert store.page_cache._lowest_needed == engine.lowest_pending_half
    finally:
        store.close()


# --- pages the broker itself has mapped -----------------------------------------------------------


def test_pages_the_broker_has_mapped_are_dropped_too(tmp_path):
    """Columnar reads (a COMMIT's, a pull's) map whole segments; a mapped page stays cached until its
    map lets go of it, so the window makes the broker's own maps forget what it drops."""
    from txmq.broker.store.columnar_read import _mapped_segment

    store = MessageStore(StoreConfig(tmp_path / "s", page_cache_keep_bytes=UNIT, commitlog_segment_bytes=16 * UNIT))
    try:
        placed = store.append([Message("t", os.urandom(1000), 0) for _ in range(7000)])  # ~7.3 MB
        store.commitlog.flush()
        _, mapped = _mapped_segment(store, 0, placed[-1].physical_offset + placed[-1].size)
        assert int(mapped[: 3 * UNIT : PAGE].sum()) >= 0  # touch every page of units 0-2 through the map
        store.page_cache.step_bytes = UNIT
        store.page_cache.release(4 * UNIT)
        assert units(store.commitlog.segments[0].path)[:3] == [False] * 3
        first = placed[5]
        assert bytes(mapped[first.physical_offset:first.physical_offset + 4]) == first.size.to_bytes(4, "big")
        assert [m.body for m in store.read_queue("t", 0, 5, 1).messages] == [store.read_at(first.physical_offset).body]
    finally:
        store.close()


def test_the_window_advises_whole_folios(two_segments):
    """The page cache may hold a file in 2 MiB folios and evicts a folio only when advised all of it:
    a window that ends inside one stops before it (the next step takes it whole)."""
    window = PageCacheWindow(UNIT // 2, lambda: two_segments, step_bytes=UNIT)
    assert window.release(3 * UNIT) == 2 * UNIT  # 2.5 units past the window: 2 whole units
    assert window.release(4 * UNIT) == UNIT


# --- dead bytes: a large COMMIT's halves, once copied ------------------------------------------------
