"""The client as the connector sees it: the NativeClient calls the source, sink and foreachBatch make.

`NativeClient` implements all of it; the stand-ins of tests/spark implement the role they stand in
for (a partition's `QueueReader`, the driver's `PlannerClient`).
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import pyarrow as pa

from txmq.broker.client.types import CheckRequest, EndSummary, PrepareSummary, QueueRef, Routes, TopicInfo, TransactionInfo


class Pulled(Protocol):
    batch: pa.RecordBatch
    next_offset: int


class QueueReader(Protocol):
    """What a partition's read calls (in a Spark worker)."""

    def read_queue(self, topic: str, queue_id: int, start: int, end: int, *, tags: str | None = None,
                   sql: str | None = None, batch_bytes: int = 0) -> Iterator[Pulled]: ...


class PlannerClient(QueueReader, Protocol):
    """What the source's driver calls: topics, cuts, one-row pulls and the group's offsets."""

    def pull_arrow(self, topic: str, queue_id: int, start: int, end: int, *, tags: str | None = None,
                   max_bytes: int = 0) -> Pulled: ...

    def list_topics(self, *, include_system: bool = False) -> list[TopicInfo]: ...

    def snapshot_offsets(self, topics: Sequence[str]) -> dict[str, dict[int, int]]: ...

    def min_offsets(self, topics: Sequence[str]) -> dict[str, dict[int, int]]: ...

    def offsets_for_timestamp(self, topics: Sequence[str], timestamp_ms: int) -> dict[str, dict[int, int]]: ...

    def wait_for_offsets(self, topics: Sequence[str], known: Mapping[str, Mapping[int, int]],
                         timeout_ms: int) -> dict[str, dict[int, int]]: ...

    def commit_offsets(self, group: str, offsets: Mapping[str, Mapping[int, int]]) -> None: ...

    def consistent_cut(self, topics: Sequence[str], start: Mapping[str, Mapping[tuple[str, int], int]],
                       snapshot: Mapping[str, Mapping[tuple[str, int], int]]) -> dict: ...

    def close(self) -> None: ...


class CheckbackHandle(Protocol):
    def close(self) -> None: ...


class TransactionClient(Protocol):
    """What the sink and foreachBatch call: halves from executors, the decision on the driver."""

    def prepare_stream(self, transaction_id: str, batches: Iterable[pa.RecordBatch | pa.Table], *,
                       topic: str | None = None, producer_group: str, sender: str,
                       return_message_ids: bool = False, participants: Sequence[str] = ()) -> PrepareSummary: ...

    def end_transaction(self, transaction_id: str, resolution: str, *, include_senders: Sequence[str] | None = None,
                        producer_group: str | None = None, source: str = "client",
                        participants: Sequence[str] = ()) -> EndSummary: ...

    def get_transaction(self, transaction_id: str, *, participants: Sequence[str] = ()) -> TransactionInfo: ...

    def resume_transaction(self, transaction_id: str) -> None: ...

    def checkback_session(self, producer_group: str, topics: Sequence[str],
                          handler: Callable[[CheckRequest], str]) -> CheckbackHandle: ...

    def close(self) -> None: ...


class ConnectorClient(PlannerClient, TransactionClient, Protocol):
    """Everything the connector calls: what `Connection.client()` returns."""

    def queues(self, topic: str) -> tuple[QueueRef, ...]: ...

    def routes(self, topics: Sequence[str] = (), *, refresh: bool = False) -> Routes: ...
