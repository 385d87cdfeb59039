"""Helpers shared by the store tests."""

from __future__ import annotations

import os
from pathlib import Path

from txmq.broker.store import Message, MessageStore, StoreConfig


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
    store._closed = True
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
