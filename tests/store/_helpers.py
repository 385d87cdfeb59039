"""Helpers shared by the store tests."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from txmq.broker.store import Message, MessageStore, StoreConfig, message_store, split_group
from txmq.broker.store.message import SYSFLAG_TRANSACTION_COMMIT
from txmq.broker.store.record_copy import RecordCopies

SOURCE = "SOURCE"


def small_config(data_dir: Path, **overrides) -> StoreConfig:
    values = dict(commitlog_segment_bytes=16 * 1024, consume_queue_entries_per_file=16, index_slots=64,
                  index_entries_per_file=128, flush_interval_ms=50, checkpoint_interval_ms=100)
    values.update(overrides)
    return StoreConfig(data_dir, **values)


def msg(topic: str = "T", body: bytes = b"hello", queue_id: int = 0, **props: str) -> Message:
    return Message(topic=topic, body=body, queue_id=queue_id, properties=dict(props))


def crash(store: MessageStore) -> None:
    """Abandon a store the way a killed process would: no flush, no checkpoint, abort marker left."""
    store._flusher.stop()
    store.write_lock.closed = True
    store.dispatcher.close()
    store.index.close()
    store.commitlog.close()
    store.checkpoint.close()
    os.close(store._lock_fd)


def queue_contents(store: MessageStore) -> dict[tuple[str, int], list[bytes]]:
    """Every readable message body per queue, after checking that every ConsumeQueue
    entry agrees with the CommitLog record it points to."""
    from txmq.broker.store.dispatch import cached_tag_hash

    out: dict[tuple[str, int], list[bytes]] = {}
    for cq in store.dispatcher.queues():
        key = (cq.topic, cq.queue_id)
        bodies = []
        for entry in store.read_queue_entries(cq.topic, cq.queue_id, cq.min_offset, cq.max_offset - cq.min_offset):
            rec = store.read_at(entry.physical_offset)
            assert (rec.topic, rec.queue_id, rec.queue_offset, rec.size) == (
                cq.topic, cq.queue_id, entry.queue_offset, entry.size), f"queue entry {entry} disagrees with {rec}"
            assert entry.tag_hash == cached_tag_hash(rec.properties)
            bodies.append(rec.body)
        assert len(bodies) == cq.max_offset - cq.min_offset
        if bodies:
            out[key] = bodies
    return out


def copies_of_new_sources(store, count: int, queue_id: int = 1) -> RecordCopies:
    """`count` source records, and copies of them to a FINAL queue (a COMMIT's finals)."""
    placed = [(r.physical_offset, r.size) for r in store.append([msg(SOURCE, b"s%d" % i) for i in range(count)])]
    return RecordCopies([p for p, _ in placed], [s for _, s in placed], ["FINAL"] * count, [queue_id] * count,
                        SYSFLAG_TRANSACTION_COMMIT, source_topic=SOURCE)


class PausedCommit:
    """A COMMIT of one part per copy (then one for the op record), run on a thread and held
    before building its part number `pause_at` (counted from 1), outside the write lock; the
    constructor returns once every part before that one is written (parts are built one ahead
    of the writer, so the build can pause before the previous part's write)."""

    def __init__(self, store, copies: RecordCopies, monkeypatch, *, pause_at: int = 2,
                 fail_at: int | None = None) -> None:
        monkeypatch.setattr(message_store, "COPY_PART_BYTES", 1)
        self.paused, self.resume = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        built = []
        real_copy_columns = message_store.copy_columns

        def copy_columns(store_, part):
            built.append(part)
            if len(built) == pause_at:
                self.paused.set()
                assert self.resume.wait(10)
            if len(built) == fail_at:
                raise KeyboardInterrupt("killed while building a part")
            return real_copy_columns(store_, part)

        monkeypatch.setattr(message_store, "copy_columns", copy_columns)
        written = threading.Semaphore(0)
        real_write_part = split_group.SplitGroupWriter.write_part

        def write_split_part(store_, *args, **kwargs):
            real_write_part(store_, *args, **kwargs)
            written.release()

        monkeypatch.setattr(split_group.SplitGroupWriter, "write_part", write_split_part)

        def commit() -> None:
            try:
                self.results = store.append_group_copies(copies, [msg("OP", b"op")])
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                self.error = exc

        self.thread = threading.Thread(target=commit)
        self.thread.start()
        assert self.paused.wait(10)
        for _ in range(pause_at - 1):
            assert written.acquire(timeout=10), "a part before the pause was not written"

    def finish(self) -> None:
        self.resume.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
