"""Copying a moved queue's history into the group it lives on now, throttled (docs/cluster.md,
"Copying the history").

A move (moves.py) leaves the queue's history where it lies: segment [base, end) on the source
group. A copy puts that history into a new physical queue of the target group, record by record
with the same logical offsets (the copy's offset 0 is `base`), committed messages only (all of a
sealed segment is decided), with their bodies, tags, keys, user properties, message ids and born
times; then the layout puts the copy in the source's place in one compare-and-swap (the source
segment stays listed, empty, so its physical queue id is never reused). From then on readers read
the history from the target and the source group may stop for good.

The copy runs on the target group's leader, which alone writes the new physical queue: it is
marked in the layout (`QueueRef.copying`, with its rate), so a leader elected meanwhile takes it
over. Progress is the target queue's written end: every batch is appended only if the queue ends
where the copier expects (MessageStore.append_copy), so a batch repeated after kill -9 of either
leader or of the copier is refused, never written twice, and the copy resumes where the target's
log ends. Progress (bytes, offsets, rate) is published in etcd for `txmq cluster status` and kept
for the broker's metrics.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from txmq.broker.errors import CopyOutOfStep, NotLeader, StoreError, TxmqError
from txmq.broker.store.message import (PROP_UNIQ_KEY, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK,
                                      SYSFLAG_TRANSACTION_NOT_TYPE, Message)
from txmq.broker.store.record import decode_record

from .coordination import CoordinationUnavailable
from .routes import TOPICS_ROOT, Copy, QueueRef, RouteView, Segment, TopicLayout

log = logging.getLogger(__name__)

PROGRESS_ROOT = "/txmq/copies/"  # /txmq/copies/<topic>/<group>:<id>: a history copy's progress (JSON)
DEFAULT_RATE = 32 * 1024 * 1024  # bytes per second of a copy unless the move says otherwise
BATCH_BYTES = 1024 * 1024  # records read and appended per step (less at a low rate: the bucket stays smooth)
PUBLISH_EVERY_S = 0.5
RETRY_AFTER_S = 5.0  # a copy that failed (its source unreachable, say) is started again this much later


class TokenBucket:
    """`take(n)` returns once n bytes fit the rate: tokens accrue at `rate` per second up to one
    second's worth; a take beyond the tokens held runs a debt that the caller sleeps off, so the
    long-run rate holds whatever the batch sizes. Rate 0: unlimited."""

    def __init__(self, rate: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self.clock, self.sleep = clock, sleep
        self._tokens = 0.0
        self._at = clock()

    def take(self, n: int) -> None:
        if self.rate <= 0:
            return
        now = self.clock()
        self._tokens = min(float(self.rate), self._tokens + (now - self._at) * self.rate) - n
        self._at = now
        if self._tokens < 0:
            self.sleep(-self._tokens / self.rate)


class CopyStore(Protocol):
    """What the copier needs of the target leader's store."""

    def append_copy(self, messages: Sequence[Message], expected_offset: int) -> Sequence[Any]: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    def read_queue(self, topic: str, queue_id: int, offset: int, max_count: int) -> Any: ...


# a client reading a group's queues (any of its replicas: the history below a seal is on all of them)
OpenGroup = Callable[[str], AbstractContextManager]
# (topic, copy target's physical queue id, the queue's current physical queue id on this group): carry the
# consumer groups' committed offsets of the queue to the copy, for the clients that read physical queues
CarryOffsets = Callable[[str, int, int], None]


@dataclass
class Progress:
    topic: str
    queue: str  # the logical queue, group:id
    source: str  # group:physical id
    target: str
    total: int  # messages to copy
    copied: int = 0
    bytes: int = 0
    rate_limit: int = 0
    started: float = 0.0
    state: str = "copying"  # copying | done | failed
    error: str = ""

    def view(self, now: float) -> dict:
        elapsed = max(now - self.started, 1e-6)
        out = {"topic": self.topic, "queue": self.queue, "from": self.source, "to": self.target,
               "copied": self.copied, "total": self.total, "bytes": self.bytes, "rate_limit": self.rate_limit,
               "bytes_per_s": round(self.bytes / elapsed), "state": self.state, "seconds": round(elapsed, 3)}
        if self.copied:  # the bytes still to copy, estimated from the mean record so far
            out["total_bytes"] = round(self.bytes * self.total / self.copied)
        if self.error:
            out["error"] = self.error
        return out


def copy_messages(topic: str, queue_id: int, batch) -> tuple[list[Message], int]:
    """The source's records (a records pull: RECORDS_SCHEMA) as messages for the copy queue, decoded
    by the record codec: every property, the flag, born time and host, reconsume times and the
    transaction type as stored; not what points into the source's log (the prepared offset of a
    committed half); and their bytes (bodies and properties) for the rate."""
    out, nbytes = [], 0
    for raw in batch.column("record").to_pylist():
        r = decode_record(raw)
        kind = r.sys_flag & SYSFLAG_TRANSACTION_MASK
        assert kind in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT), \
            f"a queue's record is a committed message, not transaction type {kind:#x}"
        out.append(Message(topic, r.body, queue_id, r.properties, flag=r.flag, sys_flag=r.sys_flag,
                           born_timestamp=r.born_timestamp, born_host=r.born_host,
                           reconsume_times=r.reconsume_times))
        nbytes += len(r.body) + sum(len(k) + len(v) for k, v in r.properties.items())
    return out, nbytes


class HistoryCopier:
    """The copies into this broker's group, run while it leads (`poll` each second)."""

    def __init__(self, view: RouteView, open_group: OpenGroup, *, clock: Callable[[], float] = time.time) -> None:
        self.view = view
        self.etcd = view.registry.etcd
        self.open_group = open_group
        self.clock = clock
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str, int], Progress] = {}
        self._retry_at: dict[tuple[str, str, int], float] = {}
        self.recent: list[dict] = []
        self.copied_bytes = 0
        self.copied_messages = 0

    def poll(self, store: CopyStore, carry: CarryOffsets, still_leads: Callable[[], bool]) -> None:
        """Start a thread for each copy into this group that is not running here."""
        for name, layout in self.view.topics().items():
            for q in layout.queues:
                copy = q.copying
                if copy is None or copy.target.group != self.view.group:
                    continue
                key = (name, *q.key)
                with self._lock:
                    if key in self._running or time.monotonic() < self._retry_at.get(key, 0.0):
                        continue
                    total = (q.end_of(copy.source) or copy.source.base) - copy.source.base
                    self._running[key] = Progress(name, f"{q.group}:{q.queue_id}",
                                                  f"{copy.source.group}:{copy.source.queue_id}",
                                                  f"{copy.target.group}:{copy.target.queue_id}", total,
                                                  rate_limit=copy.rate, started=self.clock())
                threading.Thread(target=self._run, args=(key, q, store, carry, still_leads), daemon=True,
                                 name=f"txmq-copy-{name}").start()

    def _run(self, key: tuple[str, str, int], q: QueueRef, store: CopyStore, carry: CarryOffsets,
             still_leads: Callable[[], bool]) -> None:
        progress = self._running[key]
        try:
            self.copy(key[0], q, store, progress, still_leads)
            self._swap(key[0], q)
            assert q.copying is not None
            carry(key[0], q.copying.target.queue_id, q.current.queue_id)
            progress.state = "done"
            log.warning("copied %s %s: %d messages, %d bytes from %s to %s in %.1fs", key[0], progress.queue,
                        progress.copied, progress.bytes, progress.source, progress.target,
                        self.clock() - progress.started)
        except Exception as exc:  # a leader change or an unreachable source: the next poll starts it again
            progress.state, progress.error = "failed", str(exc)
            log.warning("copy of %s %s stopped: %s", key[0], progress.queue, exc)
            with self._lock:
                self._retry_at[key] = time.monotonic() + RETRY_AFTER_S
        finally:
            self._publish(progress)
            with self._lock:
                self._running.pop(key, None)
                self.recent = (self.recent + [progress.view(self.clock())])[-20:]

    def copy(self, topic: str, q: QueueRef, store: CopyStore, progress: Progress,
             still_leads: Callable[[], bool]) -> None:
        """Copy the segment's records not yet on this group, from the target queue's end on."""
        copy = q.copying
        assert copy is not None
        src, dst = copy.source, copy.target
        bucket = TokenBucket(copy.rate)
        batch_bytes = max(4096, min(BATCH_BYTES, copy.rate // 4)) if copy.rate else BATCH_BYTES
        published = 0.0
        with self.open_group(src.group) as client:
            pos = store.max_offset(topic, dst.queue_id)  # what a copier before this one wrote (acknowledged)
            if pos == 0:  # nothing copied yet: what a consumer could still read of the source, from its start
                pos = client.min_offsets([topic]).get(topic, {}).get(src.queue_id, 0)
                if pos and pos >= progress.total:  # no record left to carry the target queue's start
                    raise StoreError(f"copy of {topic} {progress.queue}: retention deleted the whole segment on "
                                     f"{src.group}; nothing is left to copy")
            progress.copied = pos
            self._publish(progress)
            while pos < progress.total:
                if not still_leads():
                    raise NotLeader(f"group {self.view.group}: this broker no longer leads; its next leader copies")
                result = client.pull_arrow(topic, src.queue_id, pos, progress.total, max_bytes=batch_bytes,
                                           records=True)
                if not result.batch.num_rows:  # a replica not caught up yet: ask again shortly
                    time.sleep(0.1)
                    continue
                offsets = result.batch.column("queueOffset").to_pylist()
                assert offsets == list(range(pos, pos + len(offsets))), \
                    f"the source's queue {src.group}:{src.queue_id} skipped offsets at {pos}"
                messages, nbytes = copy_messages(topic, dst.queue_id, result.batch)
                bucket.take(nbytes)
                try:
                    store.append_copy(messages, pos)
                except CopyOutOfStep as exc:  # a copier before this one wrote these: skip them, checked
                    log.warning("copy of %s %s: %s", topic, progress.queue, exc)
                    if exc.written < pos:
                        pos = progress.copied = exc.written
                        continue
                    n = min(exc.written - pos, len(messages))
                    held = store.read_queue(topic, dst.queue_id, pos, n).messages
                    if [m.properties.get(PROP_UNIQ_KEY) for m in held] != \
                            [m.properties.get(PROP_UNIQ_KEY) for m in messages[:n]]:
                        raise StoreError(f"copy of {topic} {progress.queue}: queue {dst.group}:{dst.queue_id} "
                                         f"holds records at {pos} that are not the source's")
                    pos = progress.copied = pos + n
                    continue
                pos += len(messages)
                progress.copied, progress.bytes = pos, progress.bytes + nbytes
                with self._lock:
                    self.copied_bytes += nbytes
                    self.copied_messages += len(messages)
                if time.monotonic() - published >= PUBLISH_EVERY_S:
                    published = time.monotonic()
                    self._publish(progress)
        assert pos == progress.total, f"copied to {pos}, the segment ends at {progress.total}"

    def _swap(self, topic: str, q: QueueRef) -> None:
        """The copy takes the source segment's place, in one compare-and-swap."""
        for _ in range(16):
            layout = self.view.registry.topic(topic)
            assert layout is not None, f"topic {topic} left the registry during a copy"
            now = layout.queue(*q.key)
            if now.copying != q.copying:
                return  # swapped by a copier before this one
            if self.etcd.put_if_revision(TOPICS_ROOT + topic, layout.replaced(now.with_copy_done()).to_json(),
                                         layout.revision):
                self.view.refresh()
                return
        raise CoordinationUnavailable(f"topic {topic!r}: its layout kept changing under the copy's swap")

    def _publish(self, progress: Progress) -> None:
        try:
            key = f"{PROGRESS_ROOT}{progress.topic}/{progress.queue}"
            self.etcd.put(key, json.dumps(progress.view(self.clock())).encode())
        except (CoordinationUnavailable, TxmqError) as exc:
            log.warning("copy progress of %s not published: %s", progress.queue, exc)

    def status(self) -> dict:
        now = self.clock()
        with self._lock:
            return {"running": [p.view(now) for p in self._running.values()], "recent": list(self.recent[-10:]),
                    "copied_bytes": self.copied_bytes, "copied_messages": self.copied_messages}


def copy_progress(etcd) -> list[dict]:
    """Every copy's last published progress (cluster status)."""
    return [json.loads(v) for _, v, _ in etcd.range_prefix(PROGRESS_ROOT)]


def plan_copy(layout: TopicLayout, q: QueueRef, group: str, rate: int) -> Copy | None:
    """The copy of `q`'s oldest segment holding history on `group` into a new physical queue of the
    group the queue lives on now (numbered after that group's physical queues); None when no segment
    of `group` holds history, or a copy of the queue is under way."""
    if q.copying is not None:
        return None
    current = q.current
    for s in q.segments:
        end = q.end_of(s)
        if s.group == group and s != current and end is not None and end > s.base:
            return Copy(s, Segment(current.group, layout.share(current.group), s.base), rate)
    return None
