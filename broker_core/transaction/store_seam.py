"""The store as the transaction engine sees it: what engine.py and recovery.py call on it.

`MessageStore` implements it; tests/transaction/memory_store.py's `MemoryStore` is the fake.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence

from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.message import AppendResults, Message, StoredMessage
from txmq.broker.store.record_copy import RecordCopies


class _StoreConfig(Protocol):
    data_dir: Path


class _QueueRead(Protocol):
    messages: list[StoredMessage]
    next_offset: int


class PageCache(Protocol):
    def protect(self, lowest_needed: Callable[[], int | None]) -> None: ...


class EngineStore(Protocol):
    config: _StoreConfig
    # None where no page cache is managed (the in-memory fake): nothing to keep pending halves in
    page_cache: PageCache | None

    # The engine writes with durable=False and acknowledges afterwards: it first applies the write
    # to its table, so that what the log holds and what the engine believes never differ, even
    # when the acknowledgement fails (ReplicationTimeout, NotLeader, a failed fsync).
    def append(self, messages: Sequence[Message], *, allow_system: bool = False,
               wait_reserved: bool = True, durable: bool = True) -> AppendResults: ...

    def append_group(self, messages: Sequence[Message], *, allow_system: bool = False,
                     durable: bool = True) -> AppendResults: ...

    def append_group_encoded(self, batch: BatchColumns, *, durable: bool = True) -> AppendResults: ...

    def append_group_copies(self, copies: RecordCopies, messages: Sequence[Message] = (), *,
                            wait_reserved: bool = True, durable: bool = True) -> AppendResults: ...

    def append_committed(self, copies: RecordCopies, messages: Sequence[Message] = (), *,
                         wait_reserved: bool = True, durable: bool = True) -> AppendResults: ...

    def acknowledge(self, end: int) -> None:
        """Return once the write ending at `end` (AppendResults.end) may be acknowledged; raise the
        typed error saying why not. Acknowledging `end` acknowledges every write before it."""

    def read_queue(self, topic: str, queue_id: int, offset: int, max_count: int) -> _QueueRead: ...

    def read_at(self, physical_offset: int, size: int | None = None) -> StoredMessage: ...

    def min_offset(self, topic: str, queue_id: int) -> int: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    def first_sealed(self, topics: Sequence[str], queue_ids: Sequence[int]) -> tuple[str, int] | None: ...

    def max_offsets_snapshot(self, topics: Iterable[str] | None = None) -> dict[tuple[str, int], int]: ...

    def written_offsets(self) -> dict[tuple[str, int], int]: ...
