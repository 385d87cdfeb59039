"""PullConsumer: read committed messages as Arrow record batches, tracking offsets per queue.

Each poll takes a consistent cut (long-polling when nothing is new) and pulls
every queue up to it, so a committed transaction's messages arrive in the same
poll. Offsets advance only over what was returned; `commit()` stores them for
a consumer group, and a consumer with a group resumes from its committed offsets.

Given a ClusterClient it reads every group of a cluster, its queues keyed (group, queue id).
With `allocation` ("average" or "consistent_hash") the members of a consumer group divide
the queues among themselves: each heartbeats to the brokers, learns the live members and
reads only its share, re-dividing when a member joins or leaves (RocketMQ's rebalance).

With `push=True` (one broker group, every queue) the broker pushes instead: one subscription
stream (client/subscription.py) is read by a thread into a small bounded buffer that `poll`
drains, so a commit reaches the consumer without a wait call and a pull.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from typing import Any, Hashable, Iterable, Iterator, Mapping, Protocol, Sequence, TypeVar

import pyarrow as pa

from txmq.broker import __version__, errors
from txmq.broker.client._connection import client_for
from txmq.broker.client.allocation import STRATEGIES, allocate
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.subscription import Subscription
from txmq.broker.client.types import PushedBatch

log = logging.getLogger(__name__)

# Pushed batches a push consumer holds that `poll` has not taken: the stream waits beyond that.
PUSH_BUFFER_BATCHES = 8
K = TypeVar("K", bound=Hashable)  # a queue's key: its id in one group, (group, id) in a cluster
Offsets = dict[str, dict[Any, int]]


class ConsumerClient(Protocol[K]):
    """What a consumer calls: a NativeClient (queues keyed by id) or a ClusterClient (keyed (group, id))."""

    def snapshot_offsets(self, topics: Sequence[str]) -> dict[str, dict[K, int]]: ...
    def min_offsets(self, topics: Sequence[str]) -> dict[str, dict[K, int]]: ...
    def offsets_for_timestamp(self, topics: Sequence[str], timestamp_ms: int) -> dict[str, dict[K, int]]: ...
    def wait_for_offsets(self, topics: Sequence[str], known: Mapping[str, Mapping[K, int]],
                         timeout_ms: int) -> dict[str, dict[K, int]]: ...
    def read_queue(self, topic: str, queue: K, start: int, end: int, **kwargs: Any) -> Iterator: ...
    def committed_offsets(self, consumer_group: str, topics: Sequence[str]) -> dict[str, dict[K, int]]: ...
    def commit_offsets(self, consumer_group: str, offsets: Mapping[str, Mapping[K, int]]) -> None: ...
    def consumer_heartbeat(self, group: str, member_id: str, ttl_ms: int, *, leave: bool = False,
                           client: str = "", queues: Iterable[tuple[str, str, int]] = ()) -> list[str]: ...
    def close(self) -> None: ...


class PullConsumer:
    """Pulls committed messages of `topics` from `start` ("earliest", "latest", a timestamp in ms, or offsets),
    only those passing `tags` ("a || b") and `sql` (a SQL92 filter) when given."""

    def __init__(self, broker: NativeClient | ClusterClient | str, topics: Sequence[str], *, group: str | None = None,
                 start: str | int | Offsets = "earliest", tags: str | None = None, sql: str | None = None,
                 max_bytes: int = 2 << 20, skip_deleted: bool = True, allocation: str | None = None,
                 member_id: str | None = None, heartbeat_ttl_ms: int = 10_000, push: bool = False,
                 **client_kwargs: Any) -> None:
        if not topics:
            raise ValueError("a PullConsumer needs at least one topic")
        if sql:
            from txmq.broker.store.sql92 import SqlFilter  # only a filtering consumer needs the SQL92 compiler

            # Checked before any read too, so a bad expression fails now, not at the first message.
            SqlFilter.compile(sql)
        if allocation is not None and allocation not in STRATEGIES:
            raise ValueError(f"unknown allocation {allocation!r} (use {', '.join(STRATEGIES)})")
        if allocation is not None and not group:
            raise ValueError("dividing queues (allocation=...) needs a consumer group (group=...)")
        self.client: ConsumerClient
        self.client, self._owned = client_for(broker, **client_kwargs)
        self.topics = list(topics)
        self.group = group
        self.tags = tags
        self.sql = sql
        self.max_bytes = max_bytes
        self.skip_deleted = skip_deleted
        self.allocation = allocation
        self.member_id = member_id or f"consumer-{uuid.uuid4().hex[:12]}"
        self.heartbeat_ttl_ms = heartbeat_ttl_ms
        self.members: list[str] = []
        self.assigned: dict[str, set] | None = None  # None: every queue (no allocation)
        self._next_heartbeat = 0.0
        self._start = start
        self.positions: Offsets = self._initial_positions(start)
        self._push: _PushFeed | None = None
        if push:
            if allocation is not None:
                raise ValueError("a push consumer reads every queue: dividing them (allocation=...) needs pull")
            if not isinstance(self.client, NativeClient):
                raise ValueError("a push consumer reads one broker group: give it a NativeClient or an endpoint")
            self._push = _PushFeed(self.client.subscribe(self.positions, tags=tags, sql=sql, max_bytes=max_bytes,
                                                         skip_deleted=skip_deleted))

    def _initial_positions(self, start: str | int | Offsets, topics: Sequence[str] | None = None) -> Offsets:
        topics = list(topics or self.topics)
        if isinstance(start, dict):
            base = self.client.min_offsets(topics)
            for topic, queues in start.items():
                base.setdefault(topic, {}).update(queues)
            positions = base
        elif start == "latest":
            positions = self.client.snapshot_offsets(topics)
        elif isinstance(start, int):
            positions = self.client.offsets_for_timestamp(topics, start)
        elif start == "earliest":
            positions = self.client.min_offsets(topics)
        else:
            raise ValueError(f"start must be 'earliest', 'latest', a timestamp (ms) or offsets, not {start!r}")
        if self.group:
            for topic, queues in self.client.committed_offsets(self.group, topics).items():
                positions.setdefault(topic, {}).update(queues)
        return positions

    # ---- rebalance ------------------------------------------------------------------

    def _rebalance(self, cut: Offsets) -> None:
        """Heartbeat when due; when the members changed, commit the positions of queues this
        member gives up and start the queues it takes from the group's committed offsets."""
        if self.allocation is None or time.monotonic() < self._next_heartbeat:
            return
        self._next_heartbeat = time.monotonic() + self.heartbeat_ttl_ms / 3000.0
        members = self._heartbeat()
        if self.member_id not in members:
            members = sorted(set(members) | {self.member_id})
        every = sorted((t, q) for t, queues in cut.items() for q in queues)
        mine = allocate(self.allocation, every, members, self.member_id)
        assigned: dict[str, set] = {t: set() for t in self.topics}
        for topic, key in mine:
            assigned[topic].add(key)
        if assigned == self.assigned and members == self.members:
            return
        if self.assigned is not None:
            given_up = {t: {q: self.positions[t][q] for q in self.assigned.get(t, set()) - assigned.get(t, set())
                            if q in self.positions.get(t, {})} for t in self.topics}
            if any(given_up.values()):
                self.client.commit_offsets(self.group, {t: qs for t, qs in given_up.items() if qs})
            for topic, queues in given_up.items():
                for key in queues:
                    del self.positions[topic][key]
        log.info("consumer %s of %s: members %s, %d queues", self.member_id, self.group, members, len(mine))
        taken = self._initial_positions(self._start)
        for topic in self.topics:
            held = self.assigned.get(topic, set()) if self.assigned is not None else set()
            for key in assigned[topic] - held:
                self.positions.setdefault(topic, {})[key] = taken.get(topic, {}).get(key, 0)
        self.members, self.assigned = members, assigned
        self._heartbeat()  # at once, so that the brokers (and the console) know the queues it now holds

    def _heartbeat(self) -> list[str]:
        return self.client.consumer_heartbeat(self.group, self.member_id, self.heartbeat_ttl_ms,
                                              client=f"txmq-python {__version__} PullConsumer",
                                              queues=self._held())

    def _held(self) -> list[tuple[str, str, int]]:
        """The queues this member holds as (topic, broker group, queue id): a cluster's keys are
        (group, id), a lone broker's plain ids."""
        held = []
        for topic, keys in sorted((self.assigned or {}).items()):
            for key in sorted(keys, key=str):
                group, queue_id = key if isinstance(key, tuple) else ("", key)
                held.append((topic, group, queue_id))
        return held

    def _mine(self, cut: Offsets) -> Offsets:
        if self.assigned is None:
            return cut
        return {t: {q: end for q, end in queues.items() if q in self.assigned.get(t, set())} for t, queues in cut.items()}

    # ---- reads ----------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[pa.RecordBatch]:
        """Every committed message past the current positions, up to a consistent cut; [] on timeout.
        A push consumer returns what the broker pushed so far (waiting up to `timeout_ms` for some)."""
        if self._push is not None:
            return self._poll_pushed(timeout_ms)
        cut = self.client.snapshot_offsets(self.topics)
        self._rebalance(cut)
        if not self._behind(self._mine(cut)) and timeout_ms > 0:
            # others' queues count as known at the cut: only a move past it wakes this member
            known = {t: {**queues, **self.positions.get(t, {})} for t, queues in cut.items()}
            cut = self.client.wait_for_offsets(self.topics, known, timeout_ms)
        batches: list[pa.RecordBatch] = []
        for topic, queues in self._mine(cut).items():
            for key, end in queues.items():
                batches.extend(self._pull_queue(topic, key, end))
        return batches

    def _poll_pushed(self, timeout_ms: int) -> list[pa.RecordBatch]:
        assert self._push is not None
        batches = []
        for pushed in self._push.take(timeout_ms / 1000.0):
            self.positions.setdefault(pushed.topic, {})[pushed.queue_id] = pushed.next_offset
            if pushed.batch.num_rows:
                batches.append(pushed.batch)
        return batches

    def _behind(self, cut: Offsets) -> bool:
        return any(end > self.positions.get(t, {}).get(q, 0) for t, qs in cut.items() for q, end in qs.items())

    def _pull_queue(self, topic: str, key: Any, end: int) -> list[pa.RecordBatch]:
        out = []
        position = self.positions.setdefault(topic, {}).get(key, 0)
        while position < end:
            try:
                for result in self.client.read_queue(topic, key, position, end, tags=self.tags, sql=self.sql,
                                                batch_bytes=self.max_bytes):
                    if result.batch.num_rows:
                        out.append(result.batch)
                    position = result.next_offset
            except errors.DataDeleted as exc:
                if not self.skip_deleted or exc.min_offset <= position:
                    raise
                log.warning("%s:%s offsets %d..%d were deleted by retention; skipping", topic, key,
                            position, exc.min_offset)
                position = exc.min_offset
        self.positions[topic][key] = position
        return out

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """Follow the topics forever (long-polling), one record batch at a time."""
        while True:
            yield from self.poll(timeout_ms=5000)

    def commit(self) -> None:
        """Store the current positions (of the queues this member holds) as the group's committed offsets."""
        if not self.group:
            raise ValueError("commit needs a consumer group (PullConsumer(group=...))")
        self.client.commit_offsets(self.group, self._mine(self.positions))

    def close(self) -> None:
        if self._push is not None:
            self._push.close()
        try:
            if self.allocation is not None and self.members:
                self.client.consumer_heartbeat(self.group, self.member_id, self.heartbeat_ttl_ms, leave=True)  # at once
        except errors.TxmqError:
            pass  # its heartbeat runs out instead
        finally:
            if self._owned:
                self.client.close()

    def __enter__(self) -> "PullConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _PushFeed:
    """A thread reading a subscription into a bounded buffer: the stream waits while it is full."""

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self._buffer: queue.Queue[PushedBatch | BaseException] = queue.Queue(PUSH_BUFFER_BATCHES)
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="txmq-push-consumer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for pushed in self.subscription:
                while not self._stop.is_set():
                    try:
                        self._buffer.put(pushed, timeout=0.2)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # the consumer's next poll raises it
            if not self._stop.is_set():
                self._buffer.put(exc)

    def take(self, timeout_s: float) -> list[PushedBatch]:
        """What was pushed: at least one batch unless `timeout_s` passes first."""
        if self._failure is not None:
            raise self._failure
        items: list[PushedBatch] = []
        try:
            item = self._buffer.get(timeout=timeout_s) if timeout_s > 0 else self._buffer.get_nowait()
            while True:
                if isinstance(item, BaseException):  # raised after the batches before it are taken
                    self._failure = item
                    break
                items.append(item)
                item = self._buffer.get_nowait()
        except queue.Empty:
            pass
        if not items and self._failure is not None:
            raise self._failure
        return items

    def close(self) -> None:
        self._stop.set()
        self.subscription.close()
        self._thread.join(5)
