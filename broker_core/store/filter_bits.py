"""Filter bit maps: seed 003's dispatch-time bit map for SQL92 consumers.

RocketMQ computes, as its reput thread dispatches each message, one bit per consumer group
registered with a SQL92 expression (a Bloom filter kept beside the ConsumeQueue entry); a
pull then skips the entries whose bit is clear without reading their messages, and
confirms the others on their real properties. Here:

- An expression is registered for a topic by the reads that use it (a consumer group sends
  its expression with every pull and receive), up to MAX_SLOTS per topic, and kept in
  `filter_expressions.json` so a restart computes bits for new messages at once.
- A background thread, behind the dispatcher as RocketMQ's reput thread is behind the
  CommitLog, computes each new entry's bits: the compiled property scan finds the names all
  of the topic's expressions read, each expression is evaluated over them as columns, and
  bit k of an entry says whether expression k may select it (an entry the scan cannot read
  gets every bit). A slot is exact, one per expression, so no false positives beyond those.
- The bits are derived and in memory (8 bytes an entry): from the moment an expression is
  registered (or the broker started), per queue. A range they do not cover is filtered by
  the compiled scan at read time instead (filter_read.prefilter), with the same result.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from txmq.broker.errors import TxmqError
from txmq.broker.store.columnar_read import read_queue_bytes
from txmq.broker.store.filter_read import RecordColumnsOf, property_columns
from txmq.broker.store.durable import write_bytes_atomically
from txmq.broker.store.message_filter import MessageFilter, compiled_sql, visible_to_sql
from txmq.broker.store.sql92 import SqlFilter

log = logging.getLogger(__name__)

MAX_SLOTS = 64  # bits of an entry's map
CHUNK = 65536  # entries computed per read
# Entries whose bits a queue keeps (64 MiB): readers mostly read what is new; an older range,
# like one retention deleted, is filtered by the scan at read time.
MAX_HELD = 1 << 23
IDLE_WAIT_S = 0.05  # how often the thread looks for new entries when it found none


@dataclass
class _QueueBits:
    base: int  # queue offset of bits[0]
    bits: np.ndarray = field(default_factory=lambda: np.zeros(1024, dtype=np.uint64))
    count: int = 0  # entries computed: [base, base + count)
    slot_from: dict[int, int] = field(default_factory=dict)  # slot -> first queue offset its bit holds for

    @property
    def through(self) -> int:
        return self.base + self.count

    def drop_below(self, offset: int) -> None:
        """Forget the bits of entries before `offset`."""
        cut = min(max(0, offset - self.base), self.count)
        if cut:
            self.bits = self.bits[cut:self.count].copy()
            self.count -= cut
            self.base += cut

    def append(self, values: np.ndarray) -> None:
        need = self.count + len(values)
        if need > len(self.bits):
            grown = np.zeros(max(need, 2 * len(self.bits)), dtype=np.uint64)
            grown[:self.count] = self.bits[:self.count]
            self.bits = grown
        self.bits[self.count:need] = values
        self.count = need


class FilterBitmaps:
    """The store's filter bit maps (see the module docstring)."""

    def __init__(self, store, path: Path) -> None:
        self.store = store
        self.path = Path(path)
        self._lock = threading.Lock()
        self._slots: dict[str, list[str]] = self._load()  # topic -> expressions, by slot
        self._queues: dict[tuple[str, int], _QueueBits] = {}
        # where a queue's bits start: its end when its topic's first expression was registered (or
        # at start-up); a queue created after that starts at its first entry
        self._starts: dict[tuple[str, int], int] = {}
        for topic in self._slots:
            self._note_starts(topic)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.computed = 0  # entries whose bits were computed (metrics, tests)
        if self._slots:
            self._start()

    # --- registration --------------------------------------------------------------------

    def register(self, topic: str, message_filter: MessageFilter) -> None:
        """Note that a reader filters `topic` with this SQL expression (no-op when known or full)."""
        sql = message_filter.sql
        if sql is None:
            return
        with self._lock:
            slots = self._slots.setdefault(topic, [])
            if sql.expression in slots or len(slots) >= MAX_SLOTS:
                return
            if not slots:
                self._note_starts(topic)
            slots.append(sql.expression)
            slot = len(slots) - 1
            for (t, _), qb in self._queues.items():
                if t == topic:
                    qb.slot_from[slot] = qb.through  # bits computed before it hold nothing for it
            snapshot = json.dumps(self._slots, sort_keys=True).encode()
        write_bytes_atomically(self.path, snapshot)
        self._start()
        self._wake.set()

    def _note_starts(self, topic: str) -> None:
        for queue_id in self.store.queue_ids(topic):
            self._starts.setdefault((topic, queue_id), self.store.max_offset(topic, queue_id))

    def _load(self) -> dict[str, list[str]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("filter expressions in %s unreadable (%s): bit maps start empty", self.path, exc)
            return {}
        return {str(t): [str(e) for e in exprs][:MAX_SLOTS] for t, exprs in data.items()}

    # --- reads ----------------------------------------------------------------------------

    def may_pass(self, topic: str, queue_id: int, start: int, count: int,
                 message_filter: MessageFilter) -> np.ndarray | None:
        """Which of the entries [start, start + count) the filter's SQL part may select, from their
        bits; None when the bits do not cover them all (the caller scans instead)."""
        sql = message_filter.sql
        if sql is None or count <= 0:
            return None
        with self._lock:
            slots = self._slots.get(topic)
            qb = self._queues.get((topic, queue_id))
            if not slots or qb is None or sql.expression not in slots:
                return None
            slot = slots.index(sql.expression)
            first = max(qb.base, qb.slot_from.get(slot, qb.base))
            if start < first or start + count > qb.through:
                return None
            window = qb.bits[start - qb.base:start - qb.base + count]
            return ((window >> np.uint64(slot)) & np.uint64(1)).astype(bool)

    # --- the thread -----------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="txmq-filter-bits", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.compute_once()
            except TxmqError as exc:  # e.g. a range deleted by retention meanwhile: the next round moves on
                log.warning("filter bit maps: %s", exc)
                busy = False
            except Exception:
                log.exception("filter bit maps: a round failed")
                busy = False
            if not busy:
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()

    def compute_once(self) -> bool:
        """Compute bits for one chunk of every queue of a registered topic that has new entries;
        True when there may be more to do."""
        with self._lock:
            topics = {t: list(exprs) for t, exprs in self._slots.items() if exprs}
        busy = False
        for topic, expressions in topics.items():
            filters = [compiled_sql(e) for e in expressions]
            names = sorted({n for f in filters for n in f.names if visible_to_sql(n)})
            for queue_id in self.store.queue_ids(topic):
                busy |= self._compute_queue(topic, queue_id, filters, names)
        return busy

    def _compute_queue(self, topic: str, queue_id: int, filters: list[SqlFilter], names: list[str]) -> bool:
        end = self.store.max_offset(topic, queue_id)
        with self._lock:
            qb = self._queues.get((topic, queue_id))
            if qb is None:  # what came before its start is filtered by the scan at read time
                begin = self._starts.get((topic, queue_id), self.store.min_offset(topic, queue_id))
                qb = self._queues[(topic, queue_id)] = _QueueBits(begin)
            start = qb.through
        if start >= end:
            return False
        read = read_queue_bytes(self.store, topic, queue_id, start, min(CHUNK, end - start))
        n = len(read.phys)
        if n == 0:
            return False
        values = np.zeros(n, dtype=np.uint64)
        try:
            arrays, unreadable = property_columns(read, names)
            columns = RecordColumnsOf(n, arrays)
            for slot, sql in enumerate(filters):
                mask = sql.mask_columns(columns) | unreadable
                values |= mask.astype(np.uint64) << np.uint64(slot)
        except pa.ArrowInvalid:  # a value that is not UTF-8: every expression may select them
            values[:] = np.uint64(2**64 - 1)
        with self._lock:
            slots_now = len(self._slots.get(topic, ()))
            if slots_now != len(filters):
                return True  # an expression was registered meanwhile: compute these again with it
            if self._queues.get((topic, queue_id)) is qb and qb.through == start:
                assert start + n <= self.store.max_offset(topic, queue_id), "bits only for visible entries"
                qb.append(values)
                self.computed += n
                low = max(self.store.min_offset(topic, queue_id), qb.through - MAX_HELD)
                if low - qb.base >= CHUNK:  # retention deleted them, or too many held: keep memory bounded
                    qb.drop_below(low)
        return start + n < end


__all__ = ["FilterBitmaps", "MAX_SLOTS"]
