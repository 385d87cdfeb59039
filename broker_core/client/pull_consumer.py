"""PullConsumer: read committed messages as Arrow record batches, tracking offsets per queue.

Each poll takes a consistent cut (long-polling when nothing is new) and pulls
every queue up to it, so a committed transaction's messages arrive in the same
poll. Offsets advance only over what was returned; `commit()` stores them for
a consumer group, and a consumer with a group resumes from its committed offsets.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, Sequence

import pyarrow as pa

from txmq.broker import errors
from txmq.broker.client._connection import client_for
from txmq.broker.client.native_client import NativeClient
from txmq.broker.store.sql92 import SqlFilter

log = logging.getLogger(__name__)

Offsets = dict[str, dict[int, int]]


class PullConsumer:
    """Pulls committed messages of `topics` from `start` ("earliest", "latest", a timestamp in ms, or offsets),
    only those passing `tags` ("a || b") and `sql` (a SQL92 filter) when given."""

    def __init__(self, broker: NativeClient | str, topics: Sequence[str], *, group: str | None = None,
                 start: str | int | Offsets = "earliest", tags: str | None = None, sql: str | None = None,
                 max_bytes: int = 2 << 20,
                 skip_deleted: bool = True, **client_kwargs: Any) -> None:
        if not topics:
            raise ValueError("a PullConsumer needs at least one topic")
        if sql:
            # Checked before any read too, so a bad expression fails now, not at the first message.
            SqlFilter.compile(sql)
        self.client, self._owned = client_for(broker, **client_kwargs)
        self.topics = list(topics)
        self.group = group
        self.tags = tags
        self.sql = sql
        self.max_bytes = max_bytes
        self.skip_deleted = skip_deleted
        self.positions: Offsets = self._initial_positions(start)

    def _initial_positions(self, start: str | int | Offsets) -> Offsets:
        if isinstance(start, dict):
            base = self.client.min_offsets(self.topics)
            for topic, queues in start.items():
                base.setdefault(topic, {}).update(queues)
            positions = base
        elif start == "latest":
            positions = self.client.snapshot_offsets(self.topics)
        elif isinstance(start, int):
            positions = self.client.offsets_for_timestamp(self.topics, start)
        elif start == "earliest":
            positions = self.client.min_offsets(self.topics)
        else:
            raise ValueError(f"start must be 'earliest', 'latest', a timestamp (ms) or offsets, not {start!r}")
        if self.group:
            self._apply_committed(positions)
        return positions

    def _apply_committed(self, positions: Offsets) -> None:
        try:
            lag = self.client.group_lag(self.group, self.topics)
        except errors.ConsumerGroupNotFound:
            return
        for topic, queues in lag.items():
            for queue_id, entry in queues.items():
                if entry.committed >= 0:
                    positions.setdefault(topic, {})[queue_id] = entry.committed

    def poll(self, timeout_ms: int = 1000) -> list[pa.RecordBatch]:
        """Every committed message past the current positions, up to a consistent cut; [] on timeout."""
        cut = self.client.snapshot_offsets(self.topics)
        if not self._behind(cut) and timeout_ms > 0:
            cut = self.client.wait_for_offsets(self.topics, self.positions, timeout_ms)
        batches: list[pa.RecordBatch] = []
        for topic, queues in cut.items():
            for queue_id, end in queues.items():
                batches.extend(self._pull_queue(topic, queue_id, end))
        return batches

    def _behind(self, cut: Offsets) -> bool:
        return any(end > self.positions.get(t, {}).get(q, 0) for t, qs in cut.items() for q, end in qs.items())

    def _pull_queue(self, topic: str, queue_id: int, end: int) -> list[pa.RecordBatch]:
        out = []
        position = self.positions.setdefault(topic, {}).get(queue_id, 0)
        while position < end:
            try:
                for result in self.client.read_queue(topic, queue_id, position, end, tags=self.tags,
                                                     sql=self.sql, batch_bytes=self.max_bytes):
                    if result.batch.num_rows:
                        out.append(result.batch)
                    position = result.next_offset
            except errors.DataDeleted as exc:
                if not self.skip_deleted or exc.min_offset <= position:
                    raise
                log.warning("%s:%d offsets %d..%d were deleted by retention; skipping", topic, queue_id,
                            position, exc.min_offset)
                position = exc.min_offset
        self.positions[topic][queue_id] = position
        return out

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """Follow the topics forever (long-polling), one record batch at a time."""
        while True:
            yield from self.poll(timeout_ms=5000)

    def commit(self) -> None:
        """Store the current positions as the group's committed offsets."""
        if not self.group:
            raise ValueError("commit needs a consumer group (PullConsumer(group=...))")
        self.client.commit_offsets(self.group, self.positions)

    def close(self) -> None:
        if self._owned:
            self.client.close()

    def __enter__(self) -> "PullConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
