"""Dispatch: from CommitLog records to ConsumeQueue entries, index entries and listeners.

ConsumeQueue and index entries are derived data: written right after the
records (by the appending thread), rebuilt by recovery after a crash. A batch's
queue entries are written to the queue files first and then *published*
(max offsets advanced) all together under the dispatch lock; a snapshot of max
offsets takes the same lock, so it never sees half of an atomic group.

Records whose transaction type is PREPARED or ROLLBACK are not dispatched to a
user topic's queue (RocketMQ's rule: only normal and committed messages are
consumable); they are still indexed. PREPARED records of the half topic are
dispatched to its queue, which only the transaction engine reads.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from itertools import compress, repeat
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Sequence

import numpy as np

from txmq.broker.store.consume_queue import ENTRY, ENTRY_DTYPE, ENTRY_SIZE, ConsumeQueue, discover_queues
from txmq.broker.store.checksum import crc32
from txmq.broker.store.index_file import IndexService, key_hash
from txmq.broker.store.message import (
    HALF_TOPIC,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    SYSFLAG_TRANSACTION_PREPARED,
)
from txmq.broker.store.tag_filter import tag_hash

log = logging.getLogger(__name__)


class DispatchEntry(NamedTuple):
    """One record as dispatched: where it is in its queue and in the CommitLog.

    A NamedTuple rather than a dataclass: one is built per appended message.
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tag_hash: int
    store_timestamp: int
    sys_flag: int


def goes_to_queue(sys_flag: int, topic: str | None = None) -> bool:
    """Whether a record gets a queue entry: NOT_TYPE and COMMIT records do; PREPARED
    records only in the half topic (the transaction engine reads its halves from that
    queue; no consumer ever does); ROLLBACK records never."""
    tx_type = sys_flag & SYSFLAG_TRANSACTION_MASK
    if tx_type in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT):
        return True
    return tx_type == SYSFLAG_TRANSACTION_PREPARED and topic == HALF_TOPIC


# NOT_TYPE (0) and COMMIT (8) go to queues; PREPARED (4) and ROLLBACK (12) have bit 2 set
# and need the full check (goes_to_queue with the topic).
NOT_QUEUED_BIT = SYSFLAG_TRANSACTION_PREPARED
assert all(goes_to_queue(f) == (not f & NOT_QUEUED_BIT) for f in (0, 4, 8, 12))


def index_keys(out: list, properties: dict[str, str], topic: str, phys: int, ts: int) -> None:
    """Append (index key, physical offset, store time) for the message's UNIQ_KEY and KEYS."""
    uniq = properties.get(PROP_UNIQ_KEY)
    if uniq:
        out.append(("#U#" + uniq, phys, ts))
    keys = properties.get(PROP_KEYS)
    if keys:
        for k in keys.split(" "):
            if k:
                out.append((f"{topic}#{k}", phys, ts))


_tag_hashes: dict[str, int] = {}


def cached_tag_hash(properties: dict[str, str]) -> int:
    tag = properties.get(PROP_TAGS)
    if not tag:
        return 0
    h = _tag_hashes.get(tag)
    if h is None:
        if len(_tag_hashes) > 65536:
            _tag_hashes.clear()
        h = _tag_hashes[tag] = tag_hash(tag)
    return h


_tag_hashes.update({None: 0, "": 0})  # no TAGS property: hash 0


def tag_hashes_of(tags: Sequence[str | None]) -> list[int]:
    """Tag hash per message (0 without a tag), computed once per distinct tag."""
    if tags.count(None) == len(tags):  # no tags at all (a COMMIT of untagged halves): no lookups
        return [0] * len(tags)
    cache = _tag_hashes
    missing = set(tags).difference(cache)
    if missing:
        if len(cache) + len(missing) > 65536:
            cache.clear()
            cache.update({None: 0, "": 0})
        for tag in missing:
            cache[tag] = tag_hash(tag)
    return list(map(cache.__getitem__, tags))


def queue_runs(keys: Sequence, queued: Sequence[bool] | None, starts: dict, phys: Sequence[int],
               sizes: Sequence[int], tag_hashes: Sequence[int]) -> dict:
    """The queue writes of a batch: queue key -> [first queue offset, packed entries].

    `keys` (any hashable naming a queue, the keys of `starts`) and the other columns
    are per message; `queued` masks out records that get no queue entry (None: all
    do). The entries are packed as one numpy record array (ENTRY_DTYPE) and, for
    several queues, grouped with one stable sort, so each queue's entries stay in
    queue-offset order.
    """
    n = len(keys)
    phys = phys[:n]
    if queued is not None:
        keys, phys, sizes, tag_hashes = (list(compress(c, queued)) for c in (keys, phys, sizes, tag_hashes))
        n = len(keys)
    if n <= _PACK_EACH_MAX:
        return _queue_runs_packed_each(keys, starts, phys, sizes, tag_hashes)
    if len(starts) == 1:
        order, counts = np.arange(n), [n]
    else:
        code_of = {key: i for i, key in enumerate(starts)}
        codes = np.fromiter(map(code_of.__getitem__, keys), dtype=np.intp, count=n)
        order, counts = np.argsort(codes, kind="stable"), np.bincount(codes, minlength=len(starts)).tolist()
    return queue_runs_grouped(QueueGroups(list(starts), list(starts.values()), counts, order), phys, sizes,
                              tag_hashes)


# fn(entries, topics): what a write dispatched and the topics it added entries to (listeners that
# wait on some topics look at the set and build no entry)
DispatchListener = Callable[[Sequence[DispatchEntry], frozenset[str]], None]


class QueueGroups(NamedTuple):
    """The records of one write grouped by queue (what QueueOffsets.assign_array finds for a
    large write of one topic, or queue_runs from the records' keys), for queue_runs_grouped."""

    keys: list  # the queues written, in key order
    firsts: list[int]  # the first queue offset assigned in each
    counts: list[int]  # how many records each gets
    order: np.ndarray  # record indices grouped by queue, each queue's in record order


def queue_runs_grouped(groups: QueueGroups, phys: Sequence[int], sizes: Sequence[int],
                       tag_hashes: Sequence[int]) -> dict:
    """queue_runs for records grouped by queue already (QueueGroups): no key is looked up per
    record, the entries are packed once and cut into one run per queue."""
    n = len(groups.order)
    entries = np.empty(n, dtype=ENTRY_DTYPE)
    entries["phys"] = phys[:n]
    entries["size"] = sizes
    entries["tag_hash"] = tag_hashes
    packed = entries[groups.order].tobytes() if len(groups.keys) > 1 else entries.tobytes()
    out = {}
    begin = 0
    for key, first, count_ in zip(groups.keys, groups.firsts, groups.counts):
        out[key] = [first, packed[begin * ENTRY_SIZE:(begin + count_) * ENTRY_SIZE]]
        begin += count_
    return out


_PACK_EACH_MAX = 256  # below this many entries, packing each costs less than numpy's set-up


def _queue_runs_packed_each(keys: Sequence, starts: dict, phys: Sequence[int], sizes: Sequence[int],
                            tag_hashes: Sequence[int]) -> dict:
    """queue_runs for a small batch (a producer's send): each entry packed with struct."""
    packed = list(map(ENTRY.pack, phys, sizes, tag_hashes))
    if len(starts) == 1:
        ((key, first),) = starts.items()
        return {key: [first, b"".join(packed)]}
    by_queue: dict = {key: [] for key in starts}
    for key, entry in zip(keys, packed):
        by_queue[key].append(entry)
    return {key: [first, b"".join(by_queue[key])] for key, first in starts.items()}


_UNIQ_PREFIX_CRC = crc32(b"#U#")  # crc32(b"#U#" + id) == crc32(id, crc32(b"#U#"))


def index_hashes(uniq_keys: Sequence[str | bytes | None], keys: Sequence[str | None],
                 topics: Sequence[str]) -> tuple[list[int], list[int] | None]:
    """(index key hashes, the record each belongs to) for every UNIQ_KEY and KEYS of a batch
    (BatchColumns.dispatch_columns: a UNIQ_KEY as str, or as the bytes stored). The records
    are None in the common case, one UNIQ_KEY per record and no KEYS: hash i is record i's.

    Nothing here depends on where the records land (index_positions adds that), so a large
    COMMIT's part computes it while the part is built, off the writing thread. The hashes are
    left unmasked (crc32 values): IndexService masks them with KEY_HASH_MASK when it writes
    them, one array operation for thousands of items.
    """
    rows: list[int] | None = None
    if not all(uniq_keys):  # (none at all, as halves prepared without ids: no walk)
        rows = [i for i, u in enumerate(uniq_keys) if u] if any(uniq_keys) else []
        uniq_keys = [uniq_keys[i] for i in rows]
    if uniq_keys and type(uniq_keys[0]) is str:
        uniq_keys = list(map(str.encode, uniq_keys))
    hashes = list(map(crc32, uniq_keys, repeat(_UNIQ_PREFIX_CRC)))
    if any(keys):
        rows = list(range(len(hashes))) if rows is None else rows
        for i, (record_keys, topic) in enumerate(zip(keys, topics)):
            if record_keys:
                for k in record_keys.split(" "):
                    if k:
                        hashes.append(key_hash(f"{topic}#{k}"))
                        rows.append(i)
    return hashes, rows


def index_positions(hashes: Sequence[int], rows: list[int] | None, phys: Sequence[int]) -> list[int]:
    """The physical offset of each index_hashes entry, from the records' offsets."""
    return list(phys[:len(hashes)]) if rows is None else list(map(phys.__getitem__, rows))


class Dispatcher:
    """Owns the ConsumeQueues and the index; publishes entries atomically per append."""

    def __init__(self, queue_root: Path, entries_per_file: int, index: IndexService) -> None:
        self.queue_root = Path(queue_root)
        self.entries_per_file = entries_per_file
        self.index = index
        self.lock = threading.Lock()  # the dispatch lock
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._listeners: list[DispatchListener] = []
        self._dirty: set[ConsumeQueue] = set()
        self._dirty_lock = threading.Lock()
        self.dispatched_through = 0  # physical offset one past the last dispatched record
        # while a split group is written: where it starts. Records past it are not all
        # dispatched yet (the group's are not), so dispatched_through, which the
        # checkpoint takes as recovery's scan start, stays there.
        self.hold: int | None = None
        # A replicated group's leader publishes only what its in-sync replicas hold (RocketMQ 5's
        # confirm offset, Kafka's high watermark): None publishes every dispatch at once; else
        # the CommitLog offset confirmed so far, and dispatches past it wait in `_unconfirmed`.
        self._confirmed: int | None = None
        self._unconfirmed: deque = deque()  # (end offset, [(queue, written end)], entries to notify)
        self.publications = 0  # publications numbered since boot (each queue's PublishHistory)
        for topic, qid, path in discover_queues(self.queue_root):
            self._queues[(topic, qid)] = ConsumeQueue(path, topic, qid, entries_per_file)

    # --- queues ------------------------------------------------------------------

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def queue_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(self.queue_root / topic / str(queue_id), topic, queue_id, self.entries_per_file)
            queues = dict(self._queues)
            queues[(topic, queue_id)] = cq
            self._queues = queues
        return cq

    def queues(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for (t, q) in self._queues if t == topic)

    def drop_topic(self, topic: str) -> None:
        with self.lock:
            queues = dict(self._queues)
            for key in [k for k in queues if k[0] == topic]:
                queues.pop(key).destroy()
            self._queues = queues

    def drop_all(self, through: int) -> None:
        """Remove every queue (a follower's log restarted at `through`: its entries point below it)."""
        with self.lock:
            for cq in self._queues.values():
                cq.destroy()
            self._queues = {}
            self._unconfirmed.clear()
            self.hold = None
            self.dispatched_through = through
        with self._dirty_lock:
            self._dirty = set()

    # --- dispatch ----------------------------------------------------------------

    def add_listener(self, fn: DispatchListener) -> None:
        self._listeners = self._listeners + [fn]

    @property
    def has_listeners(self) -> bool:
        return bool(self._listeners)

    def dispatch(self, queue_writes: dict[tuple[str, int], list], index_items: list[tuple[str, int, int]],
                 entries: list[DispatchEntry], end_physical: int, *, notify: bool = True,
                 index_columns: tuple[list[int], list[int], int] | None = None, defer_index: bool = False) -> None:
        """Write queue entries and index keys, then publish atomically and tell listeners.

        `queue_writes` maps (topic, queue id) to [first queue offset, packed entry, ...]
        (contiguous offsets); `index_items` are (index key, physical offset, store
        time), or `index_columns` the same as (key hashes, physical offsets, store
        time), left pending for the flush with `defer_index`; `entries` are what listeners get.
        """
        touched = []
        for (topic, qid), lst in queue_writes.items():
            cq = self.queue_or_create(topic, qid)
            cq.write(lst[0], b"".join(lst[1:]))
            touched.append(cq)
        if index_items:
            self.index.put_many(index_items)
        if index_columns is not None:
            self.index.put_columns(*index_columns, defer=defer_index)
        with self._dirty_lock:  # before publishing: a flush that sees the new offset flushes these
            self._dirty.update(touched)
        with self.lock:
            if self._confirmed is None or end_physical <= self._confirmed:
                self.publications += 1
                for cq in touched:
                    cq.history.record(self.publications, cq.max_offset)
                    cq.max_offset = cq.written_offset
            else:
                self._unconfirmed.append((end_physical, [(cq, cq.written_offset) for cq in touched],
                                          entries if notify else ()))
                notify = False
            self.dispatched_through = end_physical if self.hold is None else min(end_physical, self.hold)
        if notify and entries:
            self.notify(entries, frozenset(cq.topic for cq in touched))

    def publish_confirmed(self, confirmed: int | None) -> None:
        """Publish only dispatches ending at or before `confirmed` from now on (and those waiting
        that do); None publishes everything at once again (a single broker, a follower)."""
        ready = []
        with self.lock:
            if confirmed is not None and self._confirmed is not None:
                assert confirmed >= self._confirmed, "the confirmed offset never moves back"
            self._confirmed = confirmed
            while self._unconfirmed and (confirmed is None or self._unconfirmed[0][0] <= confirmed):
                _, written, entries = self._unconfirmed.popleft()
                self.publications += 1
                for cq, end in written:
                    if end > cq.max_offset:
                        cq.history.record(self.publications, cq.max_offset)
                        cq.max_offset = end
                if entries:
                    ready.append((entries, frozenset(cq.topic for cq, _ in written)))
        for entries, topics in ready:
            self.notify(entries, topics)

    def notify(self, entries: Sequence[DispatchEntry], topics: frozenset[str]) -> None:
        """Tell the listeners what was dispatched (after it is visible), and to which topics."""
        for fn in self._listeners:
            try:
                fn(entries, topics)
            except Exception:  # a listener must never fail an append
                log.exception("dispatch listener %r failed", fn)

    def snapshot(self, topics: Iterable[str] | None = None) -> dict[tuple[str, int], int]:
        """Max offset of every queue (of `topics`), taken under the dispatch lock."""
        wanted = None if topics is None else set(topics)
        with self.lock:
            return {key: cq.max_offset for key, cq in self._queues.items() if wanted is None or key[0] in wanted}

    def written_snapshot(self) -> dict[tuple[str, int], int]:
        """Entries written to every queue, published or not yet (a replicated leader's)."""
        with self.lock:
            return {key: cq.written_offset for key, cq in self._queues.items()}

    def visible_through(self) -> int:
        """CommitLog offset up to which every dispatched record is visible to readers."""
        with self.lock:
            end = self.dispatched_through
            return end if self._confirmed is None else min(end, self._confirmed)

    def snapshot_before(self, topic: str, queue_id: int, offset: int,
                        topics: Iterable[str]) -> dict[tuple[str, int], int] | None:
        """Max offset of every queue of `topics` just before entry `offset` of (topic, queue_id)
        became visible: a cut as consistent as `snapshot`'s, lying before that entry's atomic
        group. None when the queues' publish histories no longer (or never) held that moment."""
        wanted = set(topics)
        with self.lock:
            cq = self._queues.get((topic, queue_id))
            seq = None if cq is None else cq.history.seq_of(offset, cq.max_offset)
            if seq is None:
                return None
            cut = {}
            for key, q in self._queues.items():
                if key[0] in wanted:
                    before = q.history.before(seq, q.max_offset)
                    if before is None:
                        return None
                    cut[key] = before
            assert cut.get((topic, queue_id), offset) <= offset, "the cut lies before the entry"
            return cut

    # --- durability ----------------------------------------------------------------

    def flush(self) -> int:
        """fsync queue files and the index; returns the physical offset now covered."""
        through = self.dispatched_through
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
        for cq in dirty:
            cq.flush()
        self.index.flush()
        return through

    def close(self) -> None:
        for cq in self._queues.values():
            cq.close()
