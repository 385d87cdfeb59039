"""Pop-style consumption per consumer group: receive, ack, change invisibility, redelivery.

This is what RocketMQ 5's SimpleConsumer and PushConsumer speak. A receive
hands out messages with a receipt handle and makes them invisible to the rest
of the group for a while; an ack retires them; a message that is not acked
before its invisibility ends is delivered again with `delivery_attempt + 1`
(after `max_delivery_attempts` it goes to the group's dead-letter topic
`%DLQ%<group>`). ChangeInvisibleDuration moves the deadline and returns a new
handle; the old one is superseded.

State per (group, topic, queue): `next_offset` (the first offset never handed
out), the in-flight entries, and `committed` — every offset below it is acked.
`committed` is persisted in the store's consumer offsets, so after a restart a
group resumes there: unacked messages are redelivered (at-least-once for the
consumer side; what the store holds is exactly-once). A group seen for the
first time starts at the queue's minimum offset, so messages sent before the
first consumer started are not skipped.

FIFO consumer groups (consumer_groups.py, RocketMQ's `consumeMessageOrderly`) pop each
queue orderly, as Apache's broker does (PopMessageProcessor with ConsumerOrderInfoManager):
while any message handed out from a queue is in flight (invisible, not acked), nothing more
of that queue is delivered to the group; once every one of them is acked, moved to the
dead-letter topic or visible again, the next receive hands out the unacked ones again first,
in offset order with `delivery_attempt + 1`, then the messages after them. A message group
lives on one queue (SendMessage picks it by the group's hash), so a group's next message
never overtakes one being retried, while the other queues' groups go on. Unlike Apache,
messages acked inside a range are not handed out again with it.

Receipt handles are opaque text: queue, offset, a version that increases with
every delivery/change, the deadline, and a checksum of (group, topic), so a
handle is rejected for another group, another topic, a superseded version or an
already acked message — each with a message that says which.
"""

from __future__ import annotations

import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable

from txmq.broker.errors import DataDeleted, IllegalOffset, InvalidReceiptHandle
from txmq.broker.store.message import Message, StoredMessage
from txmq.broker.store.message_filter import MessageFilter
from txmq.broker.server.core_seam import ServiceCore
from txmq.broker.server.moved_queues import copied_away, queue_base, to_physical, to_stored
from txmq.broker.server.offset_waiters import TopicSignals

DLQ_PREFIX = "%DLQ%"


@dataclass(slots=True)
class Inflight:
    offset: int
    physical_offset: int
    size: int
    attempt: int
    version: int
    deadline_ms: int


@dataclass(slots=True)
class QueueState:
    next_offset: int
    committed: int
    inflight: dict[int, Inflight] = field(default_factory=dict)
    acked_above: set[int] = field(default_factory=set)  # acked offsets >= committed
    # FIFO groups: the attempt id of the receive that handed out the in-flight range (a client
    # retrying that receive, its answer lost, gets the range again: Apache's needBlock(attemptId))
    attempt_id: str | None = None
    base: int = 0  # where the physical queue starts in its logical queue (moved_queues.py)


@dataclass(slots=True)
class Delivery:
    """One message handed to a consumer."""

    message: StoredMessage
    queue_id: int
    queue_offset: int
    attempt: int
    receipt_handle: str
    invisible_ms: int


@dataclass
class _GroupTopic:
    group: str
    topic: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    queues: dict[int, QueueState] = field(default_factory=dict)
    version: int = 0
    salt: int = 0
    rotation: int = 0  # start queue of receives that name no queue, so no queue starves


def _blocked(q: QueueState, now_ms: int) -> bool:
    """Whether a FIFO group must wait on this queue: a message it handed out is still invisible."""
    return any(e.deadline_ms > now_ms for e in q.inflight.values())


def parse_filter(expression_type: str, expression: str | None) -> MessageFilter | None:
    """None (everything) for a tag expression '', '*' or None; else the filter of a tag
    expression 'a || b || c' (type "TAG") or a SQL92 expression (type "SQL92")."""
    if expression_type != "SQL92":
        text = (expression or "").strip()
        if text in ("", "*"):
            return None
    return MessageFilter.of(expression_type, expression)


class PopService:
    """Receive/ack/change-invisible state of every consumer group on this broker."""

    def __init__(self, core: ServiceCore, *, clock: Callable[[], float] = time.time) -> None:
        self.core = core
        self.store = core.store
        self.clock = clock
        self.groups = core.consumer_groups
        self._states: dict[tuple[str, str], _GroupTopic] = {}
        self._states_lock = threading.Lock()
        self.arrivals = TopicSignals()  # receives waiting for messages of their topic
        # Committed offsets waiting to be persisted: the store rewrites its offsets
        # file on every commit, so acks are batched by a flusher instead of
        # persisting each one (a crash re-delivers at most the last interval).
        self._dirty: dict[str, dict[tuple[str, int], int]] = {}
        self._dirty_lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        self._flush_stop = threading.Event()

    # --- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        self.store.add_dispatch_listener(self.arrivals.dispatched)
        self._flusher = threading.Thread(target=self._flush_loop, name="txmq-pop-offsets", daemon=True)
        self._flusher.start()

    def stop(self) -> None:
        self.arrivals.close()  # waiting receives return, and none waits from now on
        self._flush_stop.set()
        if self._flusher is not None:
            self._flusher.join(5)
        self.flush_offsets()

    def _flush_loop(self) -> None:
        while not self._flush_stop.wait(0.5):
            try:
                self.flush_offsets()
            except Exception:  # never kill the flusher; the next round retries
                pass

    def flush_offsets(self) -> None:
        """Persist the committed offsets that moved since the last flush."""
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, {}
        for group, offsets in dirty.items():
            self.store.offsets.commit_many(group, offsets)

    # --- state ----------------------------------------------------------------

    def _state(self, group: str, topic: str) -> _GroupTopic:
        key = (group, topic)
        st = self._states.get(key)
        if st is None:
            with self._states_lock:
                st = self._states.get(key)
                if st is None:
                    st = _GroupTopic(group, topic, salt=zlib.crc32(f"{group}\0{topic}".encode()))
                    self._states[key] = st
        return st

    def _queue(self, st: _GroupTopic, queue_id: int) -> QueueState:
        q = st.queues.get(queue_id)
        if q is None:
            base = queue_base(self.core, st.topic, queue_id)
            stored = self._load_committed(st.group, st.topic, queue_id)
            committed = self.store.min_offset(st.topic, queue_id) if stored is None else to_physical(base, stored)
            q = st.queues[queue_id] = QueueState(next_offset=committed, committed=committed, base=base)
        return q

    def _load_committed(self, group: str, topic: str, queue_id: int) -> int | None:
        offsets = self.store.offsets
        try:
            value = offsets.get(group, topic, queue_id)
        except Exception:  # OffsetNotFound or a store without this group
            return None
        return None if value is None or value < 0 else int(value)

    def _persist_committed(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._dirty_lock:
            self._dirty.setdefault(group, {})[(topic, queue_id)] = offset

    # --- receipt handles -------------------------------------------------------

    def _handle(self, st: _GroupTopic, queue_id: int, e: Inflight) -> str:
        return f"{queue_id}.{e.offset}.{e.version}.{e.deadline_ms}.{st.salt:08x}"

    def _parse_handle(self, st: _GroupTopic, handle: str) -> tuple[int, int, int]:
        parts = handle.split(".") if len(handle) <= 120 else []
        if len(parts) != 5 or not all(p.isdigit() for p in parts[:4]):
            raise InvalidReceiptHandle(f"receipt handle {handle[:80]!r} is malformed")
        if parts[4] != f"{st.salt:08x}":
            raise InvalidReceiptHandle(
                f"receipt handle {handle[:80]!r} was not issued to group {st.group!r} for topic {st.topic!r}")
        return int(parts[0]), int(parts[1]), int(parts[2])

    def _find(self, st: _GroupTopic, handle: str, *, live: bool = False) -> tuple[int, QueueState, Inflight]:
        """The in-flight entry a handle names; `live`: refused once its invisible time is over
        (ack and change-invisible, as the proxy's "receipt handle is expired")."""
        queue_id, offset, version = self._parse_handle(st, handle)
        q = st.queues.get(queue_id)
        e = q.inflight.get(offset) if q else None
        if e is None:
            raise InvalidReceiptHandle(
                f"receipt handle for {st.topic}/{queue_id}@{offset} is not in flight (already acked or expired)")
        if e.version != version:
            raise InvalidReceiptHandle(
                f"receipt handle for {st.topic}/{queue_id}@{offset} was superseded (redelivered or its "
                f"invisible duration changed)")
        if live and e.deadline_ms <= self._now_ms():
            raise InvalidReceiptHandle("receipt handle is expired")
        return queue_id, q, e

    # --- operations -------------------------------------------------------------

    def _now_ms(self) -> int:
        """The clock in whole milliseconds, the resolution of every deadline (rounded, not truncated,
        so that a clock reading like 1000002.313 s is 1000002313 ms whatever its float error)."""
        return round(self.clock() * 1000)

    def receive(self, group: str, topic: str, queue_count: int, *, start_queue: int, batch: int,
                invisible_ms: int, message_filter: MessageFilter | None,
                attempt_id: str | None = None) -> list[Delivery]:
        """Take up to `batch` messages (expired in-flight ones first, then new ones); no waiting.
        `attempt_id`: the client's id of this receive, the same when it retries one (FIFO groups)."""
        st = self._state(group, topic)
        settings = self.groups.get(group)
        max_attempts = settings.max_delivery_attempts
        now = self._now_ms()
        out: list[Delivery] = []
        with st.lock:
            if settings.fifo and start_queue >= 0:
                order = [start_queue]  # a FIFO group pops the queue it names alone, as Apache's broker does
            else:
                if start_queue < 0:
                    st.rotation += 1
                    start_queue = st.rotation
                order = [(start_queue + i) % queue_count for i in range(queue_count)]
            if settings.fifo:
                for qid in order:
                    if len(out) >= batch:
                        break
                    self._deliver_orderly(st, qid, self._queue(st, qid), now, invisible_ms, batch - len(out),
                                          message_filter, max_attempts, attempt_id, out)
                return out
            for qid in order:
                if len(out) >= batch:
                    break
                q = self._queue(st, qid)
                self._redeliver_expired(st, qid, q, now, invisible_ms, batch - len(out), max_attempts, out)
            for qid in order:
                if len(out) >= batch:
                    break
                q = self._queue(st, qid)
                self._deliver_new(st, qid, q, now, invisible_ms, batch - len(out), message_filter, out)
        return out

    def _deliver_orderly(self, st: _GroupTopic, qid: int, q: QueueState, now: int, invisible_ms: int, room: int,
                         message_filter: MessageFilter | None, max_attempts: int, attempt_id: str | None,
                         out: list[Delivery]) -> None:
        """A FIFO group's receive from one queue: nothing while any of the queue's messages is in
        flight (unless this receive retries the one that took them); else its unacked messages
        again, in offset order, then the new ones after them."""
        before = len(out)
        if _blocked(q, now):
            if attempt_id is None or attempt_id != q.attempt_id:
                return
            self._hand_out_again(st, qid, q, now, invisible_ms, room, out)
        else:
            self._redeliver_expired(st, qid, q, now, invisible_ms, room, max_attempts, out)
        room -= len(out) - before
        if room > 0:
            assert all(e.deadline_ms > now for e in q.inflight.values()), \
                "every unacked message of the range goes out before any new one"
            self._deliver_new(st, qid, q, now, invisible_ms, room, message_filter, out)
        if len(out) > before:
            q.attempt_id = attempt_id

    def _hand_out_again(self, st: _GroupTopic, qid: int, q: QueueState, now: int, invisible_ms: int, room: int,
                        out: list[Delivery]) -> None:
        """The in-flight range once more, to a receive retried with its attempt id: the same attempts
        (the client never saw them), new handles and deadlines."""
        for offset in sorted(q.inflight)[:room]:
            e = q.inflight[offset]
            msg = self._read_inflight(st, qid, q, offset, e)
            if msg is None:
                continue
            st.version += 1
            e.version = st.version
            e.deadline_ms = now + invisible_ms
            out.append(Delivery(msg, qid, offset, e.attempt, self._handle(st, qid, e), invisible_ms))

    def _read_inflight(self, st: _GroupTopic, qid: int, q: QueueState, offset: int, e: Inflight) -> StoredMessage | None:
        """An in-flight message's record, or None when retention deleted it (the entry is retired)."""
        try:
            return self.store.read_at(e.physical_offset, e.size)
        except DataDeleted:
            self._retire(st, qid, q, offset)
            return None

    def _redeliver_expired(self, st: _GroupTopic, qid: int, q: QueueState, now: int, invisible_ms: int,
                           room: int, max_attempts: int, out: list[Delivery]) -> None:
        expired = sorted(o for o, e in q.inflight.items() if e.deadline_ms <= now)
        for offset in expired:
            if room <= 0:
                return
            e = q.inflight[offset]
            msg = self._read_inflight(st, qid, q, offset, e)
            if msg is None:
                continue
            if e.attempt >= max_attempts:
                self._to_dead_letter(st, msg, e.attempt)
                self._retire(st, qid, q, offset)
                continue
            st.version += 1
            e.attempt += 1
            e.version = st.version
            e.deadline_ms = now + invisible_ms
            out.append(Delivery(msg, qid, offset, e.attempt, self._handle(st, qid, e), invisible_ms))
            room -= 1

    def _deliver_new(self, st: _GroupTopic, qid: int, q: QueueState, now: int, invisible_ms: int, room: int,
                     message_filter: MessageFilter | None, out: list[Delivery]) -> None:
        if copied_away(self.core, st.topic, qid):
            return  # its history is popped from the group it was copied to
        while room > 0:
            try:
                read = self.store.read_queue(st.topic, qid, q.next_offset, min(room, 64))
            except DataDeleted as exc:
                q.next_offset = max(q.next_offset, exc.min_offset)
                if q.committed < exc.min_offset:
                    self._advance_committed_to(st, qid, q, exc.min_offset)
                continue
            except IllegalOffset:
                return
            if not read.messages:
                q.next_offset = max(q.next_offset, read.next_offset)
                return
            for msg in read.messages:
                offset = msg.queue_offset
                if offset < q.next_offset:
                    continue
                q.next_offset = offset + 1
                if message_filter is not None and not message_filter.accepts(msg):
                    self._retire(st, qid, q, offset)  # filtered out: consumed for this group
                    continue
                st.version += 1
                e = Inflight(offset, msg.physical_offset, msg.size, 1, st.version, now + invisible_ms)
                q.inflight[offset] = e
                out.append(Delivery(msg, qid, offset, 1, self._handle(st, qid, e), invisible_ms))
                room -= 1
                if room <= 0:
                    break
            if room > 0:
                q.next_offset = max(q.next_offset, read.next_offset)

    def ack(self, group: str, topic: str, handle: str) -> None:
        st = self._state(group, topic)
        with st.lock:
            qid, q, e = self._find(st, handle, live=True)
            self._retire(st, qid, q, e.offset)
        self._wake_orderly(group, topic)

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        """Move the deadline of an in-flight message; returns its new receipt handle."""
        st = self._state(group, topic)
        with st.lock:
            qid, q, e = self._find(st, handle, live=True)
            st.version += 1
            e.version = st.version
            e.deadline_ms = self._now_ms() + invisible_ms
            handle = self._handle(st, qid, e)
        self._wake_orderly(group, topic)
        return handle

    def forward_to_dead_letter(self, group: str, topic: str, handle: str) -> None:
        st = self._state(group, topic)
        with st.lock:
            qid, q, e = self._find(st, handle)
            msg = self.store.read_at(e.physical_offset, e.size)
            self._to_dead_letter(st, msg, e.attempt)
            self._retire(st, qid, q, e.offset)
        self._wake_orderly(group, topic)

    def next_deadline_s(self, group: str, topic: str) -> float | None:
        """Seconds until the earliest in-flight message of (group, topic) becomes visible again."""
        st = self._states.get((group, topic))
        if st is None:
            return None
        now = self._now_ms()
        with st.lock:
            deadlines = [e.deadline_ms for q in st.queues.values() for e in q.inflight.values()]
        return max(0.0, (min(deadlines) - now) / 1000) if deadlines else None

    # --- internals ---------------------------------------------------------------

    def _wake_orderly(self, group: str, topic: str) -> None:
        """A FIFO group's queue may have come free: the topic's waiting receives look again now rather
        than at their next deadline (Apache's ackOrderly notifies the long polls the same way)."""
        settings = self.groups.find(group)  # an unconfigured group is not FIFO: nothing to build for it
        if settings is not None and settings.fifo:
            self.arrivals.signal([topic])

    def _retire(self, st: _GroupTopic, qid: int, q: QueueState, offset: int) -> None:
        q.inflight.pop(offset, None)
        if offset == q.committed:
            new = offset + 1
            while new in q.acked_above:
                q.acked_above.discard(new)
                new += 1
            self._advance_committed_to(st, qid, q, new)
        elif offset > q.committed:
            q.acked_above.add(offset)

    def _advance_committed_to(self, st: _GroupTopic, qid: int, q: QueueState, offset: int) -> None:
        q.committed = offset
        q.acked_above = {o for o in q.acked_above if o >= offset}
        self._persist_committed(st.group, st.topic, qid, to_stored(q.base, offset))

    def _to_dead_letter(self, st: _GroupTopic, msg: StoredMessage, attempts: int) -> None:
        dlq = DLQ_PREFIX + st.group
        self.core.topic_queue_count(dlq, create=True)
        props = dict(msg.properties)
        props["ORIGIN_TOPIC"] = st.topic
        props["RETRY_TIMES"] = str(attempts)
        self.store.append([Message(topic=dlq, body=msg.body, queue_id=0, properties=props,
                                   born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                                   flag=msg.flag, sys_flag=msg.sys_flag & ~0xC)])


