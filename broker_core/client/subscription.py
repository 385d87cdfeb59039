"""Subscription: committed messages pushed by the broker as they are published (no wait, no pull).

One Flight DoGet stream per subscription (server: `NativeService.subscribe_stream`) carries
every followed queue's batches. The broker sends what each consistent cut adds, woken by each
publish, so a commit reaches the subscriber in one message; it sends a batch only once the one
before is on the wire, so a subscriber that stops reading holds the broker to that much.

`positions` is where each queue's next batch starts; a stream that fails (the broker restarted,
the group's leader changed) is opened again from there, so within one Subscription every
message arrives once. Save the positions (or a consumer group's committed offsets) to resume
in another process.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable, Iterator, Mapping, Protocol, Sequence

import pyarrow.flight as flight

from txmq.broker import errors
from txmq.broker.client.types import PushedBatch
from txmq.broker.protocol import native_pb2 as pb

log = logging.getLogger(__name__)

BACKOFF_START_S = 0.05
BACKOFF_MAX_S = 1.0


class SubscribingClient(Protocol):
    """What a subscription needs of its NativeClient."""

    retry_unavailable_s: float

    def follow(self, request: pb.SubscribeRequest,
               on_open: Callable[[flight.FlightStreamReader], None]) -> Iterator[PushedBatch]: ...
    def fail_over(self) -> None: ...
    def min_offsets(self, topics: Sequence[str]) -> dict[str, dict[int, int]]: ...


class Subscription:
    """Iterate to receive PushedBatches, in offset order per queue, until `close()`."""

    def __init__(self, client: SubscribingClient, start: Mapping[str, Mapping[int, int]], *, tags: str | None = None,
                 sql: str | None = None, max_bytes: int = 0, skip_deleted: bool = True,
                 retry_s: float | None = None) -> None:
        """`start`: {topic: {queue id: first offset}}. `retry_s`: how long a broker that cannot be
        reached is retried before the iteration raises (default: the client's retry_unavailable_s)."""
        self.client = client
        self.positions: dict[str, dict[int, int]] = {t: {int(q): int(o) for q, o in qs.items()}
                                                     for t, qs in start.items()}
        if not any(self.positions.values()):
            raise ValueError("a subscription needs at least one queue: {topic: {queue id: offset}}")
        self.tags, self.sql, self.max_bytes = tags or "", sql or "", max_bytes
        self.skip_deleted = skip_deleted
        self.retry_s = client.retry_unavailable_s if retry_s is None else retry_s
        self.reconnects = 0
        self._lock = threading.Lock()
        self._reader: flight.FlightStreamReader | None = None
        self._closed = False

    def _request(self) -> pb.SubscribeRequest:
        return pb.SubscribeRequest(start=[pb.TopicOffsets(topic=t, offsets=qs) for t, qs in self.positions.items()],
                                   tags=self.tags, sql=self.sql, max_bytes=self.max_bytes)

    def _opened(self, reader: flight.FlightStreamReader) -> None:
        with self._lock:
            self._reader = reader
            closed = self._closed
        if closed:
            reader.cancel()

    def __iter__(self) -> Iterator[PushedBatch]:
        backoff = BACKOFF_START_S
        retry_until = time.monotonic() + self.retry_s
        while not self._closed:
            try:
                for pushed in self.client.follow(self._request(), self._opened):
                    queues = self.positions[pushed.topic]
                    assert pushed.next_offset > queues[pushed.queue_id], \
                        f"{pushed.topic}/{pushed.queue_id}: a pushed batch must move past {queues[pushed.queue_id]}"
                    queues[pushed.queue_id] = pushed.next_offset
                    backoff, retry_until = BACKOFF_START_S, time.monotonic() + self.retry_s
                    yield pushed
                if not self._closed:  # the broker ended it (it does not by itself): follow again
                    raise errors.BrokerUnavailable("the broker ended the subscription")
            except errors.DataDeleted:
                if self._closed or not self.skip_deleted or not self._skip_deleted():
                    raise
            except (errors.BrokerUnavailable, errors.RequestTimeout):
                if self._closed:
                    return
                if time.monotonic() + backoff >= retry_until:
                    raise
                log.debug("subscription lost its stream; following again from %s in %.2fs", self.positions, backoff)
                self.client.fail_over()
                time.sleep(backoff * (0.5 + random.random() / 2))
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                self.reconnects += 1

    def _skip_deleted(self) -> bool:
        """Move the queues whose next messages retention deleted to their first kept offset;
        False when none was behind it."""
        low = self.client.min_offsets(list(self.positions))
        moved = False
        for topic, queues in self.positions.items():
            for queue_id, pos in queues.items():
                first = low.get(topic, {}).get(queue_id, 0)
                if pos < first:
                    log.warning("%s:%s offsets %d..%d were deleted by retention; skipping", topic, queue_id, pos, first)
                    queues[queue_id] = first
                    moved = True
        return moved

    def close(self) -> None:
        """End the stream; an iteration in another thread stops at once."""
        with self._lock:
            self._closed = True
            reader = self._reader
        if reader is not None:
            reader.cancel()

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
