"""One write of the write path: queue offsets assigned, records written, queue and index entries
derived (not yet dispatched). Shared by plain writes and by the parts of a split group."""

from __future__ import annotations

from functools import partial
from itertools import compress, repeat
from typing import Callable, NamedTuple, Sequence

import numpy as np

from txmq.broker.errors import StoreError
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.commitlog import CommitLog, WritePlan
from txmq.broker.store.dispatch import (
    DispatchEntry,
    index_hashes,
    index_positions,
    queue_runs,
    queue_runs_grouped,
    tag_hashes_of,
)
from txmq.broker.store.message import AppendResult, LazyList
from txmq.broker.store.queue_offsets import QueueOffsets, queued_mask
from txmq.broker.store.record import message_ids

_ARRAY_KEYS_FROM = 256  # from this many records of one topic, queue offsets are assigned with arrays
_new_append_result = partial(tuple.__new__, AppendResult)  # from a row tuple, in C
_new_dispatch_entry = partial(tuple.__new__, DispatchEntry)  # from a row tuple, without a Python __new__


def append_results(topics: Sequence[str], qids: Sequence[int], queue_offsets: Sequence[int],
                   phys: Sequence[int], sizes: Sequence[int], now: int, store_host_raw: bytes) -> list[AppendResult]:
    """A batch's AppendResults from its columns (run when AppendResults are first read)."""
    ids = message_ids(store_host_raw, phys[:len(topics)])
    return list(map(_new_append_result, zip(topics, qids, queue_offsets, phys, sizes, ids, repeat(now))))


class Written(NamedTuple):
    """A batch just written to the CommitLog, and the queue and index entries it needs."""

    queued: list[bool] | None  # which records get a queue entry (None: all)
    queue_offsets: list[int]
    phys: list[int]  # physical offsets, and one more item: the end of the batch
    sizes: list[int]
    tag_hashes: list[int]
    runs: dict  # queue_runs: queue key -> [first queue offset, packed entries]
    hashes: list[int]  # index_hashes
    positions: list[int]


class DispatchHashes(NamedTuple):
    """A batch's dispatch inputs that do not depend on where it lands: a split group's part
    derives them while it is built, off the thread that writes it."""

    tags: list[int]  # tag_hashes_of
    index: list[int]  # index_hashes
    index_rows: list[int] | None


def dispatch_hashes(batch: BatchColumns) -> DispatchHashes:
    tags, uniq_keys, record_keys = batch.dispatch_columns()
    return DispatchHashes(tag_hashes_of(tags), *index_hashes(uniq_keys, record_keys, batch.topics))


def built_with_hashes(build: Callable[[], BatchColumns]) -> tuple[BatchColumns, DispatchHashes]:
    batch = build()
    return batch, dispatch_hashes(batch)


def dispatch_entries(topics, qids, queue_offsets, phys, sizes, tag_hashes, now, sys_flags,
                     queued) -> LazyList[DispatchEntry]:
    """What dispatch listeners get for the queued records of a write (made when first read: the
    broker's listeners only ask whether anything was dispatched)."""
    def build() -> list[DispatchEntry]:
        rows = zip(topics, qids, queue_offsets, phys, sizes, tag_hashes, repeat(now), sys_flags)
        return list(map(_new_dispatch_entry, rows if queued is None else compress(rows, queued)))

    return LazyList(len(topics) if queued is None else queued.count(True), build)


def write_part(commitlog: CommitLog, batch: BatchColumns, sys_flags: Sequence[int], keys: Sequence | None,
               offsets: QueueOffsets, now: int, plan: WritePlan, hashes: DispatchHashes | None = None) -> Written:
    """Assign a batch its queue offsets, write its records, and derive (not yet write) its queue
    and index entries. `keys`: the queue key of each record, None for (topic, queue id);
    `hashes`: its dispatch_hashes, when derived already."""
    queued = queued_mask(sys_flags, batch.topics)
    topics = batch.topics
    if queued is None and len(topics) >= _ARRAY_KEYS_FROM and topics.count(topics[0]) == len(topics):
        offsets_array, groups = offsets.assign_array(topics[0], np.asarray(batch.queue_ids, dtype=np.int64))
        queue_offsets = offsets_array.tolist()
    else:
        groups = None
        if keys is None:
            keys = list(zip(topics, batch.queue_ids))
        starts, queue_offsets = offsets.assign(keys, queued)
    phys, sizes = _write_records(commitlog, batch, sys_flags, queue_offsets, now, plan)
    if hashes is None:
        hashes = dispatch_hashes(batch)
    if groups is not None:
        runs = queue_runs_grouped(groups, phys, sizes, hashes.tags)
    else:
        runs = queue_runs(keys, queued, starts, phys, sizes, hashes.tags)
    positions = index_positions(hashes.index, hashes.index_rows, phys)
    return Written(queued, queue_offsets, phys, sizes, hashes.tags, runs, hashes.index, positions)


def _write_records(commitlog: CommitLog, batch: BatchColumns, sys_flags: Sequence[int],
                   queue_offsets: Sequence[int], now: int, plan: WritePlan) -> tuple[list[int], list[int]]:
    """Encode and write a batch's records: (physical offsets plus the end, sizes)."""
    try:
        placed = commitlog.write_columns(batch, sys_flags, queue_offsets, now, plan)
        if placed is not None:
            return placed
        # IPv6 hosts or an oversized record: the general encoder
        pairs = commitlog.write_batch(batch.messages, batch.props_raw, sys_flags, queue_offsets, now, plan)
    except OSError as exc:  # the CommitLog already dropped the partial batch (or the part in flight)
        raise StoreError(f"CommitLog write failed: {exc}") from exc
    phys = [p for p, _ in pairs]
    phys.append(phys[-1] + pairs[-1][1])
    return phys, [s for _, s in pairs]
