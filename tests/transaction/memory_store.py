"""An in-memory stand-in for MessageStore, following the ARCHITECTURE.md contract.

Why: the engine's rules (states, idempotence, check-back timing) are tested
fast and deterministically against this; the real store is used by the
recovery, crash and stateful tests. Only the calls the engine makes exist.
A `fail_next_append` switch simulates a store failure (the append writes nothing);
`fail_acknowledgements` makes acknowledge() raise it (the write stays, as with a
replicated group's ReplicationTimeout).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

from txmq.broker.errors import DataDeleted, IllegalOffset, IllegalTopic, MessageNotFound, StoreError
from txmq.broker.store.message import (
    SYSFLAG_GROUP_END,
    SYSFLAG_GROUP_MEMBER,
    SYSFLAG_TRANSACTION_MASK,
    SYSTEM_TOPICS,
    AppendResult,
    AppendResults,
    Message,
    StoredMessage,
)
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.record_copy import RecordCopies

_NOT_INHERITED = SYSFLAG_TRANSACTION_MASK | SYSFLAG_GROUP_MEMBER | SYSFLAG_GROUP_END


@dataclass
class _Config:
    data_dir: Path


@dataclass
class QueueRead:
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int


class MemoryStore:
    def __init__(self, data_dir: Path) -> None:
        self.config = _Config(Path(data_dir))
        self.page_cache = None  # no files, so no page cache to keep halves in
        self._lock = threading.Lock()
        self._records: dict[int, StoredMessage] = {}
        self._queues: dict[tuple[str, int], list[int]] = {}
        self._next_physical = 0
        self.appends = 0
        self.fail_next_append = False
        self.fail_acknowledgements: Exception | None = None
        self.acknowledged = 0  # the highest end acknowledged
        self.pause_after_append_s = 0.0  # widens the window between an append and its caller's next step

    def append(self, messages: Sequence[Message], *, allow_system: bool = False,
               wait_reserved: bool = True, durable: bool = True) -> AppendResults:
        # no large COMMITs written in parts here: nothing to wait for
        return self._acknowledged(self._write(messages, allow_system), durable)

    def append_group(self, messages: Sequence[Message], *, allow_system: bool = False,
                     durable: bool = True) -> AppendResults:
        return self._acknowledged(self._write(messages, allow_system), durable)

    def acknowledge(self, end: int) -> None:
        if self.fail_acknowledgements is not None:
            raise self.fail_acknowledgements
        self.acknowledged = max(self.acknowledged, end)

    def _acknowledged(self, results: AppendResults, durable: bool) -> AppendResults:
        if durable:
            self.acknowledge(results.end)
        return results

    def append_group_encoded(self, batch: BatchColumns, *, durable: bool = True) -> AppendResults:
        raise NotImplementedError("prepare_bodies is tested on the real store (tests/transaction/test_prepare_bodies.py)")

    def append_committed(self, copies: RecordCopies, messages: Sequence[Message] = (), *,
                         wait_reserved: bool = True, durable: bool = True) -> AppendResults:
        """A COMMIT by reference reads as the copies it stands for (MessageStore.append_committed's
        contract): here it is those copies."""
        return self.append_group_copies(copies, messages, wait_reserved=wait_reserved, durable=durable)

    def append_group_copies(self, copies: RecordCopies, messages: Sequence[Message] = (), *,
                            wait_reserved: bool = True, durable: bool = True) -> AppendResults:
        """The record copies as Messages (the contract of MessageStore.append_group_copies), then
        one append_group (which a test's subclass may intercept) like any other."""
        with self._lock:
            missing = [p for p in copies.physical_offsets if p not in self._records]
            if missing:
                raise MessageNotFound(f"no record at physical offset {missing[0]}")
            sources = [self._records[p] for p in copies.physical_offsets]
        reroute = copies.reroute
        destinations = [(reroute.topic, reroute.queue_id) if reroute and reroute.marker in src.properties else (t, q)
                        for src, t, q in zip(sources, copies.topics, copies.queue_ids)]
        made = [Message(topic, src.body, qid,
                        {k: v for k, v in src.properties.items() if k not in copies.drop_properties}, src.flag,
                        (src.sys_flag & ~_NOT_INHERITED) | copies.transaction_type, src.born_timestamp,
                        src.born_host, src.reconsume_times, src.physical_offset)
                for src, (topic, qid) in zip(sources, destinations)]
        return self.append_group([*made, *messages], allow_system=True, durable=durable)

    def _write(self, messages: Sequence[Message], allow_system: bool) -> AppendResults:
        for m in messages:
            if m.topic in SYSTEM_TOPICS and not allow_system:
                raise IllegalTopic(f"{m.topic} is a system topic")
        with self._lock:
            if self.fail_next_append:
                self.fail_next_append = False
                raise StoreError("simulated store failure")
            self.appends += 1
            results = []
            for m in messages:
                queue = self._queues.setdefault((m.topic, m.queue_id), [])
                size = 100 + len(m.body)
                stored = StoredMessage(**{f: getattr(m, f) for f in Message.__slots__},
                                       queue_offset=len(queue), physical_offset=self._next_physical,
                                       size=size, store_timestamp=1)
                stored.properties = dict(m.properties)
                self._records[self._next_physical] = stored
                queue.append(self._next_physical)
                results.append(AppendResult(m.topic, m.queue_id, stored.queue_offset, stored.physical_offset,
                                            size, f"{stored.physical_offset:016X}", 1))
                self._next_physical += size
            end = self._next_physical
        if self.pause_after_append_s:
            time.sleep(self.pause_after_append_s)
        return AppendResults(len(results), lambda: results, end=end)

    def read_queue(self, topic: str, queue_id: int, offset: int, max_count: int, **_: object) -> QueueRead:
        with self._lock:
            queue = self._queues.get((topic, queue_id), [])
            if offset > len(queue):
                raise IllegalOffset(f"{offset} > {len(queue)}")
            picked = queue[offset:offset + max_count]
            return QueueRead([replace(self._records[p]) for p in picked], offset + len(picked), 0, len(queue))

    def read_at(self, physical_offset: int, size: int | None = None) -> StoredMessage:
        with self._lock:
            if physical_offset not in self._records:
                raise MessageNotFound(str(physical_offset))
            return replace(self._records[physical_offset])

    def min_offset(self, topic: str, queue_id: int) -> int:
        return 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        with self._lock:
            return len(self._queues.get((topic, queue_id), []))

    def first_sealed(self, topics, queue_ids) -> tuple[str, int] | None:
        return None  # no queue of this store ever moves to another group

    def max_offsets_snapshot(self, topics: Iterable[str] | None = None) -> dict[tuple[str, int], int]:
        with self._lock:
            wanted = set(topics) if topics is not None else None
            return {k: len(v) for k, v in self._queues.items() if wanted is None or k[0] in wanted}

    def written_offsets(self) -> dict[tuple[str, int], int]:
        return self.max_offsets_snapshot()  # every write is visible at once here

    def visible(self, topic: str, queue_id: int) -> list[StoredMessage]:
        """Everything a consumer of (topic, queue) would read."""
        return self.read_queue(topic, queue_id, 0, 1 << 30).messages

    def close(self) -> None:
        pass


_ = DataDeleted  # the real store raises it from read_queue; recovery handles it


def clone(store: MemoryStore, data_dir: Path) -> MemoryStore:
    """A copy of the store as it is now (what a crash that loses later writes leaves behind)."""
    copy = MemoryStore(data_dir)
    with store._lock:
        copy._records = {k: replace(v) for k, v in store._records.items()}
        copy._queues = {k: list(v) for k, v in store._queues.items()}
        copy._next_physical = store._next_physical
    return copy
