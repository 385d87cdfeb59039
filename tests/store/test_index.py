"""Lookups: by offset message id, by client message id (UNIQ_KEY), by key and time range, by timestamp."""

from __future__ import annotations

import mmap
import threading
import time

import pytest

from txmq.broker.errors import MessageNotFound
from txmq.broker.store.index_file import HEADER_SIZE, IndexFile
from tests.store._helpers import msg


def test_get_by_offset_message_id(open_store) -> None:
    store = open_store()
    results = store.append([msg(body=b"%d" % i) for i in range(20)])
    assert store.get_by_message_id(results[13].msg_id).body == b"13"
    assert store.get_by_message_id(results[13].msg_id.lower()).body == b"13"


def test_get_by_client_message_id(open_store) -> None:
    store = open_store()
    store.append([msg(body=b"%d" % i, UNIQ_KEY="C0A80001%024X" % i) for i in range(300)])
    assert store.get_by_message_id("C0A80001%024X" % 257).body == b"257"


def test_unknown_message_id_raises(open_store) -> None:
    store = open_store()
    store.append([msg(UNIQ_KEY="abc")])
    with pytest.raises(MessageNotFound):
        store.get_by_message_id("nope")
    with pytest.raises(MessageNotFound):
        store.get_by_message_id("7F00000100002A9F00000000000FFFFF")


def test_query_by_key_finds_every_message_with_the_key(open_store) -> None:
    store = open_store()  # 128 entries per index file: this rolls index files
    for i in range(100):
        store.append([msg(body=b"%d" % i, KEYS=f"order-{i % 7} all")])
        store.append([msg(topic="Other", body=b"o", KEYS=f"order-{i % 7}")])
    found = store.query_by_key("T", "order-3", max_count=100)
    assert [m.body for m in found] == [b"%d" % i for i in range(100) if i % 7 == 3]
    assert len(store.query_by_key("T", "all", max_count=1000)) == 100
    assert len(store.query_by_key("T", "all", max_count=10)) == 10
    assert store.query_by_key("T", "missing") == []


def test_query_by_key_respects_the_time_range(open_store) -> None:
    store = open_store()
    early = store.append([msg(KEYS="k")])[0].store_timestamp
    time.sleep(0.02)
    late = store.append([msg(KEYS="k")])[0].store_timestamp
    assert [m.store_timestamp for m in store.query_by_key("T", "k", begin_ms=late)] == [late]
    assert [m.store_timestamp for m in store.query_by_key("T", "k", end_ms=late - 1)] == [early]


def test_index_survives_restart(open_store) -> None:
    store = open_store()
    store.append([msg(KEYS="persist", UNIQ_KEY="U-1")])
    store.close()
    store = open_store()
    assert len(store.query_by_key("T", "persist")) == 1
    assert store.get_by_message_id("U-1").keys == ["persist"]


def test_offset_for_timestamp_finds_the_first_message_at_or_after(open_store) -> None:
    store = open_store()
    stamps = []
    for i in range(8):
        stamps.append(store.append([msg(body=b"%d" % i)])[0].store_timestamp)
        time.sleep(0.003)
    for i, ts in enumerate(stamps):
        first = stamps.index(ts)
        assert store.offset_for_timestamp("T", 0, ts) == first
    assert store.offset_for_timestamp("T", 0, 0) == 0
    assert store.offset_for_timestamp("T", 0, stamps[-1] + 1) == 8
    assert store.offset_for_timestamp("Nope", 0, 0) == 0


def test_index_flush_lets_other_threads_run(tmp_path) -> None:
    """Writing back an index whose pages are all dirty takes long; the broker's other
    threads (gRPC handlers, the writer) must keep running meanwhile (mmap.flush would
    hold the GIL for the whole msync, and this thread would not run once inside it).
    Whether this thread ran inside the flush is asked, not how long its longest pause
    was: on a loaded host the scheduler alone pauses a thread for tens of milliseconds."""
    index = IndexFile(tmp_path / "00000000000000000001", slots=64 << 20, capacity=16)
    for at in range(HEADER_SIZE, len(index.mm), mmap.PAGESIZE):
        index.mm[at] = 1  # every page of the slot table dirty
    window: list[float] = []

    def flush() -> None:
        window.append(time.perf_counter())
        index.flush()
        window.append(time.perf_counter())

    flusher = threading.Thread(target=flush)
    ran_at: list[float] = []
    flusher.start()
    while flusher.is_alive():
        ran_at.append(time.perf_counter())
        time.sleep(0.0005)  # a handler's work between waits: the flush's thread gets its turns too
    flusher.join()
    index.close()
    started, ended = window
    took = ended - started
    if took < 0.04:
        pytest.skip(f"the write-back took only {took * 1000:.0f} ms here: too short to tell a stall")
    inside = [t for t in ran_at if started + took / 10 < t < ended - took / 10]
    assert inside, f"this thread did not run during the {took * 1000:.0f} ms flush (it held the GIL)"


def test_a_flush_syncs_every_index_file_written_since_the_last_one(tmp_path, monkeypatch) -> None:
    """A large COMMIT leaves its index items pending for the flush, which may fill several files:
    the checkpoint that follows vouches for all of them."""
    from txmq.broker.store import index_file
    from txmq.broker.store.index_file import IndexService

    service = IndexService(tmp_path / "index", slots=8, entries_per_file=4)
    service.put_columns(list(range(1, 21)), list(range(20)), 1000, defer=True)  # five files' worth
    synced: list[int] = []
    monkeypatch.setattr(index_file.os, "fdatasync", synced.append)
    service.flush()
    files = [f for _, f in service._files]
    assert len(files) == 5 and sorted(synced) == sorted(f.fd for f in files)
    synced.clear()
    service.flush()
    assert synced == []  # nothing written since
    monkeypatch.undo()
    service.close()
