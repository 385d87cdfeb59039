"""The timer service: puts each scheduled message into its real topic when it is due.

One thread does all the work in turn, so the files need no lock: it indexes new
records of TIMER_TOPIC's queue into the TimerLog and the wheel, delivers what is due
(in time order, never before its time), and checkpoints.

A delivery is one atomic group written through the store's normal write path (so
a broker group replicates it): the copy in the real topic, carrying PROP_TIMER_OF
(its original's queue offset), and a marker in TIMER_DELIVERED_TOPIC whose body is
that offset. The group is all-or-nothing across a crash, so the markers say exactly
which scheduled messages were delivered: on start the service applies every marker
past its checkpoint and never puts a marked message again (exactly once).

Everything here is derived from the CommitLog: the checkpoint only saves work, and
is trusted only if the queues still hold the records it names.
"""

from __future__ import annotations

import base64
import heapq
import logging
import math
import os
import queue
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from txmq.broker.store.commit_ref import is_slot, resolve
from txmq.broker.store.message import (
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TIMER_OF,
    TIMER_DELIVERED_TOPIC,
    TIMER_TOPIC,
    Message,
    StoredMessage,
)
from txmq.broker.store.metadata import read_json, write_json_atomically
from txmq.broker.timer.files import NONE, TimerLog, TimerWheel

log = logging.getLogger(__name__)

READ_BATCH = 4096  # scheduled records indexed per read
PUT_BATCH = 512  # copies per delivery group
TICK_S = 0.01  # the shortest sleep between passes that found nothing to do
# The longest sleep: the thread is woken by a new scheduled record (a dispatch listener), a
# recall or the stop, and otherwise sleeps until something may be due: an idle broker's timer
# wakes about once a second.
IDLE_WAIT_S = 1.0
# New scheduled records are indexed at most this often (or once READ_BATCH wait): large batches
# cost the senders' threads less GIL time than many small ones, and a message due sooner than
# this after its send is late by at most this much.
INDEX_EVERY_S = 0.05
CHECKPOINT_S = 1.0
WHEEL_MARGIN_S = 3600  # slots beyond the horizon: room for a late cursor
MARKER = struct.Struct(">q")
READ_SPAN_MAX = 16 << 20  # one read covers a batch of scheduled records up to this span
DELIVER_KEY = b"\x02TIMER_DELIVER_MS\x01"
TIMER_DIR = "timer"  # the service's files, in the store's data directory
# Histogram bucket sizes the console's view picks from: 1 s up to 1 day.
BUCKETS_MS = (1000, 10_000, 60_000, 600_000, 3_600_000, 21_600_000, 86_400_000)


@dataclass(frozen=True)
class ScheduledMessage:
    deliver_ms: int
    topic: str
    message_id: str
    recall_handle: str


@dataclass(frozen=True)
class ScheduledView:
    pending: int  # scheduled messages not delivered or recalled yet
    bucket_ms: int
    buckets: list[tuple[int, int]]  # (bucket start ms, messages due in it), by time
    soonest: list[ScheduledMessage]


MOVED_RETRY_MS = 1000  # a message due to a queue being moved, or whose new group is down, is tried again this late


class MovedQueues(Protocol):
    """Delivery into a queue that moved to another group (cluster/moves.py `QueueMover`)."""

    def deliver_timer(self, copy: Message, index: int) -> None:
        """Put `copy` (due to this group's sealed physical queue `copy.queue_id`) into the queue
        where the queue lives now, exactly once per `index` however often it is called; raises
        (retriable) while the queue is being moved or its group cannot take it."""


class TimerService:
    def __init__(self, store, directory: Path, *, max_delay_s: float, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self.log = TimerLog(self.dir / "timerlog")
        self.wheel = TimerWheel(self.dir / "timerwheel", int(max_delay_s) + WHEEL_MARGIN_S)
        self.indexed = 0  # TIMER_TOPIC queue offsets below this are in the log
        self.applied = 0  # TIMER_DELIVERED_TOPIC markers below this are applied
        self.low = 0  # every log entry below this is delivered
        self.cursor = 0  # the second whose slot is being delivered
        self._seen_head = NONE  # the newest entry of the cursor's slot already taken into _due
        self._due: list[tuple[int, int]] = []  # (deliver_ms, index) taken from slots, not yet put
        self._stop = threading.Event()
        self._wake = threading.Event()  # a scheduled record written, a recall asked, or the stop
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._recalls: queue.SimpleQueue = queue.SimpleQueue()  # (index, topic, message id, reply)
        self._generation = int(time.time() * 1000)  # names of flag snapshots: increasing across restarts
        self._checkpointed: tuple[int, int, int] | None = None
        self.delivered = 0  # copies put by this process (for metrics and tests)
        self.forwarded = 0  # of them, copies put into a queue that moved to another group
        self.moved: MovedQueues | None = None  # set on a cluster group's leader
        self.lateness_ms_max = 0

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        # retention (72 h by default) is as long as a message may wait (the horizon): it must
        # keep the oldest undelivered one's segment
        self.store.retain(self)
        self.store.add_dispatch_listener(self._on_dispatch)
        self._thread = threading.Thread(target=self._run, name="txmq-timer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.store.release(self)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            self._checkpoint()
        except Exception:  # the store may be closed already: the next start catches up
            log.debug("timer checkpoint at stop failed", exc_info=True)

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._recover()
                break
            except Exception:
                log.exception("timer recovery failed; retrying")
                self._stop.wait(1.0)
        self._ready.set()
        next_checkpoint = time.monotonic() + CHECKPOINT_S
        next_index = 0.0
        while not self._stop.is_set():
            try:
                hi = self.store.max_offset(TIMER_TOPIC, 0)
                busy = False
                if hi - self.indexed >= READ_BATCH or time.monotonic() >= next_index:
                    next_index = time.monotonic() + INDEX_EVERY_S
                    busy = self._index(hi)
                busy |= self._serve_recalls()
                busy |= self._deliver()
                if time.monotonic() >= next_checkpoint:
                    next_checkpoint = time.monotonic() + CHECKPOINT_S
                    self._checkpoint()
            except Exception:  # a write refused (a leader fenced, a full disk): try again shortly
                log.exception("timer delivery failed; retrying")
                self._stop.wait(1.0)
                continue
            if not busy:
                self._sleep(next_index, next_checkpoint)

    def _on_dispatch(self, entries, topics: frozenset[str]) -> None:
        """On the writer's thread after each dispatch: wake the timer when a scheduled record came."""
        if TIMER_TOPIC in topics:
            self._wake.set()

    def _sleep(self, next_index: float, next_checkpoint: float) -> None:
        """Wait until the thread may have work: new scheduled records (at once, or at the next
        index pass when some wait for it), a recall, the next due delivery, the next second's wheel
        slot and the checkpoint while anything is undelivered; at most IDLE_WAIT_S."""
        self._wake.clear()  # cleared before looking, so a record written meanwhile wakes the wait
        now = time.monotonic()
        if self.store.max_offset(TIMER_TOPIC, 0) > self.indexed:
            self._stop.wait(min(max(next_index - now, TICK_S), IDLE_WAIT_S))
            return
        wait_s = IDLE_WAIT_S
        if self._due or self.low < self.indexed:  # something undelivered (or not yet checkpointed)
            clock_s = self.clock()
            due_s = self._due[0][0] / 1000 if self._due else math.floor(clock_s) + 1
            wait_s = min(wait_s, due_s - clock_s, math.floor(clock_s) + 1 - clock_s, next_checkpoint - now)
        self._wake.wait(max(wait_s, TICK_S))

    # --- recovery and checkpoint ----------------------------------------------------

    def _entry_phys(self, topic: str, offset: int) -> int | None:
        if offset <= 0:
            return None
        entries = self.store.read_queue_entries(topic, 0, offset - 1, 1)
        return entries[0].physical_offset if entries else -1

    def _recover(self) -> None:
        cp = read_json(self.dir / "checkpoint.json", None)
        if (isinstance(cp, dict) and cp.get("slots") == self.wheel.slots
                and self._entry_phys(TIMER_TOPIC, cp["indexed"]) == cp["indexed_phys"]
                and self._entry_phys(TIMER_DELIVERED_TOPIC, cp["applied"]) == cp["applied_phys"]):
            self.indexed, self.applied, self.low = cp["indexed"], cp["applied"], cp["low"]
            self._load_flags(cp)
        else:  # nothing to trust (first start, lost files, a log truncated under them): rebuild all
            self.log.clear(self.log.capacity)
            self.indexed = self.low = self.store.min_offset(TIMER_TOPIC, 0)
            self.applied = self.store.min_offset(TIMER_DELIVERED_TOPIC, 0)
        self._index(self.store.max_offset(TIMER_TOPIC, 0), link=False)
        self._apply_markers()
        self.cursor = int(self.clock() * 1000) // 1000
        self._rebuild_wheel()
        self._checkpoint()

    def _apply_markers(self) -> None:
        hi = self.store.max_offset(TIMER_DELIVERED_TOPIC, 0)
        flags = self.log.array["delivered"]
        while self.applied < hi:
            read = self.store.read_queue(TIMER_DELIVERED_TOPIC, 0, self.applied, READ_BATCH)
            for m in read.messages:
                index = MARKER.unpack(m.body)[0]
                if index < self.log.capacity:
                    flags[index] = 1
            if read.next_offset <= self.applied:
                break
            self.applied = read.next_offset

    def _rebuild_wheel(self) -> None:
        """Link every undelivered entry into the wheel; one overdue now goes in the current second."""
        arr = self.log.array[self.low:self.indexed]
        pending = np.flatnonzero(arr["delivered"] == 0)
        if not len(pending):
            return
        seconds = np.maximum(arr["deliver_ms"][pending] // 1000, self.cursor)
        seconds = np.minimum(seconds, self.cursor + self.wheel.slots - 1)
        self.wheel.link(self.log.array, (pending + self.low).astype(np.int64), seconds.astype(np.int64))

    def _load_flags(self, cp: dict) -> None:
        """The delivered flags as of the checkpoint (the mapped log's own flags may be newer than
        markers a crash or a cut tail took away); markers past it are applied after this."""
        flags = self.log.array["delivered"]
        flags[self.low:] = 0
        path = self.dir / str(cp.get("flags", ""))
        if cp.get("flags") and path.is_file():
            n = self.indexed - self.low
            flags[self.low:self.indexed] = np.unpackbits(np.fromfile(path, dtype=np.uint8), count=n)

    def _checkpoint(self) -> None:
        flags = self.log.array["delivered"][self.low:self.indexed]
        open_at = np.flatnonzero(flags == 0)
        self.low = self.low + int(open_at[0]) if len(open_at) else self.indexed
        state = (self.indexed, self.applied, self.low)
        if state == self._checkpointed:
            return
        self.log.flush()
        # the flags of [low, indexed) as of `applied` markers: a new file each time, named in
        # the checkpoint, so the two always match
        self._generation += 1
        name = f"delivered.{self._generation}"
        packed = np.packbits(self.log.array["delivered"][self.low:self.indexed] != 0)
        tmp = self.dir / (name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(packed.tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.dir / name)
        write_json_atomically(self.dir / "checkpoint.json", {
            "indexed": self.indexed, "indexed_phys": self._entry_phys(TIMER_TOPIC, self.indexed),
            "applied": self.applied, "applied_phys": self._entry_phys(TIMER_DELIVERED_TOPIC, self.applied),
            "low": self.low, "slots": self.wheel.slots, "flags": name})
        self._checkpointed = state
        for old in self.dir.glob("delivered.*"):
            if old.name != name:
                old.unlink(missing_ok=True)

    # --- indexing ----------------------------------------------------------------------

    def _index(self, hi: int, *, link: bool = True) -> bool:
        """Add TIMER_TOPIC records [indexed, hi) to the log (and the wheel). True if any."""
        if self.indexed >= hi:
            return False
        while self.indexed < hi:
            entries = self.store.read_queue_entries(TIMER_TOPIC, 0, self.indexed, min(READ_BATCH, hi - self.indexed))
            if not entries:  # below the queue's minimum (retention): start at what is left
                self.indexed = max(self.indexed + 1, self.store.min_offset(TIMER_TOPIC, 0))
                continue
            idx = np.fromiter((e.queue_offset for e in entries), np.int64, len(entries))
            phys = np.fromiter((e.physical_offset for e in entries), np.int64, len(entries))
            sizes = np.fromiter((e.size for e in entries), np.int64, len(entries))
            deliver = np.fromiter(self._deliver_times(phys, sizes), np.int64, len(entries))
            self.log.ensure(int(idx[-1]) + 1)
            a = self.log.array
            a["deliver_ms"][idx] = deliver
            a["phys"][idx] = phys
            a["size"][idx] = sizes
            a["prev"][idx] = NONE
            a["delivered"][idx] = 0
            if link:
                seconds = np.clip(deliver // 1000, self.cursor, self.cursor + self.wheel.slots - 1)
                self.wheel.link(a, idx, seconds)
            self.indexed = int(idx[-1]) + 1
        return True

    def _deliver_times(self, phys: np.ndarray, sizes: np.ndarray):
        """Each record's TIMER_DELIVER_MS, found in its raw bytes (no decode of the record): the
        last "\x02TIMER_DELIVER_MS\x01" of a record is its property (property text cannot hold
        those separators, and the body comes before the properties; scheduled() never puts it first)."""
        commitlog = self.store.commitlog
        lo = int(phys[0])
        span = int(phys[-1] + sizes[-1]) - lo
        buf = commitlog.read(lo, span) if span <= READ_SPAN_MAX else b""
        for p, s in zip(phys.tolist(), sizes.tolist()):
            at = p - lo
            rec = buf[at:at + s] if at + s <= len(buf) else commitlog.read(p, s)
            if is_slot(rec):  # scheduled by a COMMIT by reference: the record its slot stands for
                rec = resolve(commitlog.read, p)
            pos = rec.rfind(DELIVER_KEY)
            if pos < 0:
                yield 0  # not a scheduled record: due at once
                continue
            start = pos + len(DELIVER_KEY)
            yield int(rec[start:rec.index(b"\x02", start)])

    # --- delivery ------------------------------------------------------------------------

    def _take_slot(self) -> None:
        """Move the cursor slot's entries not yet taken into _due (walking from the newest)."""
        w = self.wheel.array
        s = self.wheel.slot(self.cursor)
        if w["second"][s] != self.cursor:
            return
        head = int(w["head"][s])
        a = self.log.array
        i = head
        while i != NONE and i != self._seen_head:
            entry = a[i]
            if not entry["delivered"]:
                heapq.heappush(self._due, (int(entry["deliver_ms"]), i))
            i = int(entry["prev"])
        self._seen_head = head

    def _deliver(self) -> bool:
        now_ms = int(self.clock() * 1000)
        now_s = now_ms // 1000
        busy = False
        while True:
            self._take_slot()
            if self._due and self._due[0][0] <= now_ms:
                batch = []
                flags = self.log.array["delivered"]
                while self._due and self._due[0][0] <= now_ms and len(batch) < PUT_BATCH:
                    item = heapq.heappop(self._due)
                    if not flags[item[1]]:  # not recalled meanwhile
                        batch.append(item)
                if not batch:
                    continue
                try:
                    self._put(batch)
                except Exception:  # not put: due again at the next try
                    flags = self.log.array["delivered"]
                    for item in batch:
                        if not flags[item[1]]:
                            heapq.heappush(self._due, item)
                    raise
                busy = True
                now_ms = int(self.clock() * 1000)
                continue
            if self.cursor < now_s:  # this second is over: the next slot
                self.cursor += 1
                self._seen_head = NONE
                continue
            return busy

    def _copy(self, index: int) -> tuple[Message, Message]:
        entry = self.log.array[index]
        original: StoredMessage = self.store.read_at(int(entry["phys"]), int(entry["size"]))
        props = dict(original.properties)
        topic = props.pop(PROP_REAL_TOPIC)
        queue_id = int(props.pop(PROP_REAL_QUEUE_ID))
        props[PROP_TIMER_OF] = str(index)
        copy = Message(topic=topic, body=original.body, queue_id=queue_id, properties=props, flag=original.flag,
                       sys_flag=original.sys_flag, born_timestamp=original.born_timestamp,
                       born_host=original.born_host)
        return copy, Message(topic=TIMER_DELIVERED_TOPIC, body=MARKER.pack(index))

    def _put(self, batch: list[tuple[int, int]]) -> None:
        """Deliver `batch`: the copies and their markers as one group, marked delivered as soon as
        the group is in the log, then acknowledged. A failed acknowledgement (a replicated group's
        ReplicationTimeout) raises with them marked: delivered again they would be twice in the log."""
        pairs = [self._copy(i) for _, i in batch]
        if any(self.store.queue_sealed(c.topic, c.queue_id) for c, _ in pairs):
            batch, pairs = self._forward_moved(batch, pairs)
            if not batch:
                return
        try:
            copies = [c for c, _ in pairs if c is not None]
            results = self.store.append_group(copies + [m for _, m in pairs], allow_system=True, durable=False)
            marker_results = results[len(copies):]
        except Exception as exc:  # refused, nothing written
            if len(batch) == 1:
                return self._drop(batch[0], pairs[0][1], exc)
            for one in batch:  # find the one the store refuses (its topic deleted, say)
                self._put([one])
            return
        pairs = [p for p in pairs if p[0] is not None]
        flags = self.log.array["delivered"]
        for (deliver_ms, i), r in zip(batch, marker_results):
            flags[i] = 1
            self.lateness_ms_max = max(self.lateness_ms_max, r.store_timestamp - deliver_ms)
        self.applied = max(self.applied, marker_results[-1].queue_offset + 1)
        self.delivered += len(batch)
        self.store.acknowledge(results.end)

    def _forward_moved(self, batch: list[tuple[int, int]], pairs: list[tuple[Message, Message]]):
        """Messages due to queues a move sealed here go where their queue lives now (exactly once:
        `deliver_timer` is idempotent per index, and the marker written after it ends the retries);
        those that cannot go yet are due again a little later. The batch left: only markers for them."""
        kept_batch, kept_pairs = [], []
        now_ms = int(self.clock() * 1000)
        for item, (copy, marker) in zip(batch, pairs):
            if not self.store.queue_sealed(copy.topic, copy.queue_id):
                kept_batch.append(item)
                kept_pairs.append((copy, marker))
                continue
            try:
                if self.moved is None:
                    raise RuntimeError("this broker is not a cluster group's leader")
                self.moved.deliver_timer(copy, item[1])
            except Exception as exc:  # not delivered (or not known to be): the same index is tried again
                log.warning("timer message %d for moved queue %s:%d not delivered yet: %s", item[1], copy.topic,
                            copy.queue_id, exc)
                heapq.heappush(self._due, (now_ms + MOVED_RETRY_MS, item[1]))
                continue
            self.forwarded += 1
            kept_batch.append(item)
            kept_pairs.append((None, marker))
        return kept_batch, kept_pairs

    def _drop(self, item: tuple[int, int], marker: Message, exc: Exception) -> None:
        """A message the store will never take (its topic gone): marked delivered, so it is not tried forever."""
        from txmq.broker.errors import BadRequest, TopicNotFound
        if not isinstance(exc, (BadRequest, TopicNotFound)):
            raise exc
        log.warning("timer message %d cannot be delivered and is dropped: %s", item[1], exc)
        r = self.store.append([marker], allow_system=True)[0]
        self.log.array["delivered"][item[1]] = 1
        self.applied = max(self.applied, r.queue_offset + 1)

    # --- recall ---------------------------------------------------------------------------------

    def recall(self, handle: str, topic: str, timeout_s: float = 10.0) -> str:
        """Cancel a scheduled message not yet delivered (RocketMQ 5's RecallMessage); its message id.

        Served by the timer's own thread, so a recall and a delivery of one message never race:
        the recall writes a marker in TIMER_DELIVERED_TOPIC (no copy), and a restart sees it
        as done like any delivery."""
        from txmq.broker.errors import RequestTimeout
        index, message_id = parse_recall_handle(handle)
        reply: queue.SimpleQueue = queue.SimpleQueue()
        self._recalls.put((index, topic, message_id, reply))
        self._wake.set()
        try:
            outcome = reply.get(timeout=timeout_s)
        except queue.Empty:
            raise RequestTimeout("the timer did not answer the recall in time") from None
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _serve_recalls(self) -> bool:
        busy = False
        while True:
            try:
                index, topic, message_id, reply = self._recalls.get_nowait()
            except queue.Empty:
                return busy
            busy = True
            try:
                reply.put(self._recall(index, topic, message_id))
            except Exception as exc:  # answered to the caller, typed
                reply.put(exc)

    def _recall(self, index: int, topic: str, message_id: str) -> str:
        from txmq.broker.errors import InvalidRecallHandle, MessageNotFound
        if index >= self.indexed:  # sent since the last indexing: index it now
            self._index(self.store.max_offset(TIMER_TOPIC, 0))
        if index >= self.indexed:
            raise InvalidRecallHandle("the recall handle names no scheduled message")
        entry = self.log.array[index]
        original = self.store.read_at(int(entry["phys"]), int(entry["size"]))
        # a RocketMQ client's id is its UNIQ_KEY; a native send without one was told the record's offset id
        if original.properties.get(PROP_REAL_TOPIC) != topic or message_id not in (original.unique_key,
                                                                                   original.msg_id):
            raise InvalidRecallHandle(f"the recall handle names no scheduled message of topic {topic!r}")
        if entry["delivered"]:
            raise MessageNotFound(f"message {message_id} was already delivered or recalled")
        r = self.store.append([Message(topic=TIMER_DELIVERED_TOPIC, body=MARKER.pack(index))], allow_system=True)[0]
        self.log.array["delivered"][index] = 1
        self.applied = max(self.applied, r.queue_offset + 1)
        return message_id

    # --- the console's view ------------------------------------------------------------------

    def scheduled(self, *, bucket_ms: int = 0, limit: int = 50) -> "ScheduledView":
        """The scheduled messages not yet delivered: how many are due in each `bucket_ms` (0: a
        round size giving at most 60 buckets), and the `limit` due soonest with recall handles.
        Read from the timer's arrays without its thread, as lowest_needed_offset does: a message
        sent since the last indexing (INDEX_EVERY_S) is not counted yet."""
        low, indexed = min(self.low, self.indexed), self.indexed
        a = self.log.array
        waiting = low + np.flatnonzero(a["delivered"][low:indexed] == 0)
        due = a["deliver_ms"][waiting]
        if not len(due):
            return ScheduledView(0, max(bucket_ms, 1000), [], [])
        first, last = int(due.min()), int(due.max())
        if bucket_ms <= 0:
            bucket_ms = next((b for b in BUCKETS_MS if (last - first) // b < 60), BUCKETS_MS[-1])
        starts, counts = np.unique(due // bucket_ms * bucket_ms, return_counts=True)
        soonest = waiting[np.argsort(due, kind="stable")[:limit]] if limit > 0 else waiting[:0]
        rows = []
        for index in soonest.tolist():
            entry = a[index]
            record = self.store.read_at(int(entry["phys"]), int(entry["size"]))
            message_id = record.unique_key or record.msg_id  # the id its send answered (see _recall)
            rows.append(ScheduledMessage(int(entry["deliver_ms"]), record.properties.get(PROP_REAL_TOPIC, ""),
                                         message_id, recall_handle(index, message_id)))
        return ScheduledView(len(due), bucket_ms, list(zip(starts.tolist(), counts.tolist())), rows)

    # --- retention ----------------------------------------------------------------------------

    def lowest_needed_offset(self) -> int | None:
        """The CommitLog offset of the oldest scheduled message not yet delivered (None: none), for
        the store's retention (RetentionFloor). Read from the timer's arrays without its thread's
        cooperation: entries below `indexed` are complete, and a flag read mid-delivery only makes
        the answer older, which keeps more."""
        if not self._ready.is_set():
            return 0  # not recovered yet: what is pending is unknown, so everything is kept
        indexed = self.indexed
        low = min(self.low, indexed)
        a = self.log.array
        waiting = np.flatnonzero(a["delivered"][low:indexed] == 0)
        if len(waiting):  # queue order is log order: the first one waiting is the lowest
            return int(a["phys"][low + int(waiting[0])])
        if self.store.max_offset(TIMER_TOPIC, 0) > indexed:  # scheduled since the last indexing: after the last indexed
            return int(a["phys"][indexed - 1] + a["size"][indexed - 1]) if indexed > 0 else 0
        return None

    # --- introspection -----------------------------------------------------------------------

    def stats(self) -> dict:
        pending = 0
        if self.indexed > self.low:
            pending = int(np.count_nonzero(self.log.array["delivered"][self.low:self.indexed] == 0))
        return {"indexed": self.indexed, "pending": pending, "delivered": self.delivered,
                "lateness_ms_max": self.lateness_ms_max}


def recall_handle(queue_offset: int, message_id: str) -> str:
    """The handle a send of a timer message answers with: where it waits, and its message id."""
    return base64.urlsafe_b64encode(f"txmq1 {queue_offset} {message_id}".encode()).decode()


def parse_recall_handle(handle: str) -> tuple[int, str]:
    from txmq.broker.errors import InvalidRecallHandle
    try:
        version, offset, message_id = base64.urlsafe_b64decode(handle.encode()).decode().split(" ")
        if version != "txmq1":
            raise ValueError(version)
        return int(offset), message_id
    except (ValueError, UnicodeError):
        raise InvalidRecallHandle(f"recall handle {handle[:60]!r} is not one this broker gave out") from None
