"""The transaction table's records: states, resolutions, half references.

A `Transaction` is the engine's in-memory record of one transaction id: its
state, the half messages it collected (as references into the CommitLog) and
its check-back progress. The table holds PENDING and DISCARDED transactions in
full (they can still be committed or resumed); COMMITTED and ROLLED_BACK ones
shrink to a `FinalRecord` (state + time) because all that is left to do with
them is to answer a repeated or conflicting EndTransaction.
"""

from __future__ import annotations

import enum
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, islice, repeat
from operator import lt
from typing import TYPE_CHECKING, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from txmq.broker.store.message import AppendResult

if TYPE_CHECKING:  # decision.py imports Resolution from here
    from .decision import CrossGroup


_STRIPE_MASK = 1023
_STRIPES = [threading.Condition() for _ in range(_STRIPE_MASK + 1)]


class Resolution(enum.Enum):
    COMMIT = 1
    ROLLBACK = 2


class TxState(enum.Enum):
    PENDING = "PENDING"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"

    @property
    def is_final(self) -> bool:
        """COMMITTED and ROLLED_BACK never change again; DISCARDED can be resumed."""
        return self in (TxState.COMMITTED, TxState.ROLLED_BACK)


class HalfRef(NamedTuple):
    """Where one half message of a transaction lives, and where it must go on COMMIT.

    A tuple of ints and strs, so the cyclic garbage collector stops tracking it after
    its first pass: a Spark micro-batch holds millions of these until its COMMIT, and
    tracked objects would make every full collection walk them all.
    """

    physical_offset: int
    size: int
    half_queue_offset: int
    real_topic: str
    real_queue_id: int
    sender: str


_new_half_ref = partial(tuple.__new__, HalfRef)  # from a row tuple, in C


class _HalfChunk:
    """The halves of one prepare call (or a run of one sender's, read back by recovery) as columns."""

    __slots__ = ("physical_offsets", "sizes", "half_queue_offsets", "real_topics", "real_queue_ids", "sender",
                 "sealed")

    def __init__(self, physical_offsets: Sequence[int], sizes: Sequence[int], half_queue_offsets: Sequence[int],
                 real_topics: list[str], real_queue_ids: Sequence[int], sender: str, sealed: bool) -> None:
        self.physical_offsets = physical_offsets
        self.sizes = sizes
        self.half_queue_offsets = half_queue_offsets
        self.real_topics = real_topics
        self.real_queue_ids = real_queue_ids
        self.sender = sender
        self.sealed = sealed  # its lists may be shared (a snapshot's capture): never appended to

    @property
    def grown(self) -> bool:
        """Grown half by half (recovery: lists), not added as one prepare call's columns (arrays)."""
        return isinstance(self.physical_offsets, list)

    def refs(self) -> Iterator[HalfRef]:
        return map(_new_half_ref, zip(_ints(self.physical_offsets), _ints(self.sizes), _ints(self.half_queue_offsets),
                                      self.real_topics, _ints(self.real_queue_ids), repeat(self.sender)))


def count_topics(topics: Iterable[str]) -> dict[str, int]:
    """How many of each topic; counted in C (a COMMIT counts every half's topic), and for a
    sequence of one topic (a Spark micro-batch's), with one comparison per item."""
    if isinstance(topics, (list, tuple)) and topics and topics.count(topics[0]) == len(topics):
        return {topics[0]: len(topics)}
    return Counter(topics)


class HalfRefs:
    """A transaction's halves, in the order they were added, kept as columns: one chunk per
    prepare call, not one HalfRef tuple per half.

    A Spark micro-batch is one transaction of a million halves. As tuples they cost a
    tuple and three int objects each to make at prepare, to take apart at COMMIT and
    to free after it (0.25 s of a 1M-half COMMIT, on its critical path); as columns a
    prepare keeps its integers as int64 arrays and a COMMIT concatenates them. Reads of
    single halves (first half, recovery, admin) see HalfRef tuples of plain ints, made on
    demand. Chunks grown half by half (recovery) hold lists.
    """

    __slots__ = ("_chunks", "_count")

    def __init__(self, refs: Iterable[HalfRef] = ()) -> None:
        self._chunks: list[_HalfChunk] = []
        self._count = 0
        for ref in refs:
            self.append(ref)

    def add(self, physical_offsets: list[int], sizes: list[int], half_queue_offsets: list[int],
            real_topics: Sequence[str], real_queue_ids: Sequence[int], sender: str) -> None:
        """Add one prepare call's halves, given as columns (the integers kept as int64 arrays)."""
        n = len(physical_offsets)
        if not (len(sizes) == len(half_queue_offsets) == len(real_topics) == len(real_queue_ids) == n):
            raise ValueError("half columns differ in length")
        if n:
            self._chunks.append(_HalfChunk(_int64(physical_offsets), _int64(sizes), _int64(half_queue_offsets),
                                           list(real_topics), _int64(real_queue_ids), sender, sealed=True))
            self._count += n

    def append(self, ref: HalfRef) -> None:
        """Add one half (recovery reads them back one by one): to the last chunk when it is one
        sender's run still growing."""
        last = self._chunks[-1] if self._chunks else None
        if last is None or last.sealed or last.sender != ref.sender:
            last = _HalfChunk([], [], [], [], [], ref.sender, sealed=False)
            self._chunks.append(last)
        last.physical_offsets.append(ref.physical_offset)
        last.sizes.append(ref.size)
        last.half_queue_offsets.append(ref.half_queue_offset)
        last.real_topics.append(ref.real_topic)
        last.real_queue_ids.append(ref.real_queue_id)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[HalfRef]:
        return chain.from_iterable(chunk.refs() for chunk in self._chunks)

    def __getitem__(self, index: int) -> HalfRef:
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("half index out of range")
        for chunk in self._chunks:
            if index < len(chunk.sizes):
                return HalfRef(int(chunk.physical_offsets[index]), int(chunk.sizes[index]),
                               int(chunk.half_queue_offsets[index]), chunk.real_topics[index],
                               int(chunk.real_queue_ids[index]), chunk.sender)
            index -= len(chunk.sizes)
        raise AssertionError("HalfRefs count out of step with its chunks")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HalfRefs):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"HalfRefs({self._count} halves in {len(self._chunks)} chunks)"

    def of_senders(self, senders: frozenset[str]) -> "HalfRefs":
        """The halves of these senders (a sender's halves are whole chunks: shared, not copied)."""
        out = HalfRefs()
        for chunk in self._chunks:
            if chunk.sender in senders:
                chunk.sealed = True
                out._chunks.append(chunk)
                out._count += len(chunk.sizes)
        return out

    def columns(self) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
        """(physical offsets, sizes, real topics, real queue ids) of every half, in order: the
        integers as int64 arrays, the topics as a list, each joined from the chunks' columns."""
        chunks = self._chunks
        phys = _concatenated([c.physical_offsets for c in chunks])
        sizes = _concatenated([c.sizes for c in chunks])
        queue_ids = _concatenated([c.real_queue_ids for c in chunks])
        return phys, sizes, [*chain.from_iterable(c.real_topics for c in chunks)], queue_ids

    def in_log_order(self) -> bool:
        """Whether the halves lie in the log in the order they were added. A prepare call's chunk
        is in order itself (its halves are one store write), so only the chunks' ends are
        compared, not every half; chunks grown half by half (recovery) are checked whole."""
        ends = [(int(c.physical_offsets[0]), int(c.physical_offsets[-1])) for c in self._chunks if len(c.sizes)]
        return all(last < first for (_, last), (first, _) in zip(ends, ends[1:])) and all(
            map(_ascending, (c.physical_offsets for c in self._chunks if c.grown)))

    def real_topics(self) -> Iterator[str]:
        return chain.from_iterable(c.real_topics for c in self._chunks)

    def topic_counts(self) -> dict[str, int]:
        """How many halves of each real topic, counted chunk by chunk: a prepare call's halves
        mostly go to one topic, and a one-topic chunk is counted in C with one comparison per half."""
        counts: Counter[str] = Counter()
        for chunk in self._chunks:
            counts.update(count_topics(chunk.real_topics))
        return counts

    def senders(self) -> set[str]:
        return {c.sender for c in self._chunks}

    def captured(self) -> "HalfRefs":
        """A copy that later additions do not change (a snapshot's capture, under the table lock):
        the chunks are shared, sealed first, so nothing is copied per half."""
        out = HalfRefs()
        for chunk in self._chunks:
            chunk.sealed = True
        out._chunks = list(self._chunks)
        out._count = self._count
        return out


def _ascending(values: list[int]) -> bool:
    return all(map(lt, values, islice(values, 1, None)))


def _int64(values: Sequence[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _ints(values: Sequence[int]) -> list[int]:
    """A column's values as Python ints (what HalfRefs hand out: they end up in JSON and protobuf)."""
    return values.tolist() if isinstance(values, np.ndarray) else values


def _concatenated(columns: list[Sequence[int]]) -> np.ndarray:
    if not columns:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([_int64(c) for c in columns])


@dataclass(slots=True)
class FinalRecord:
    """What is remembered of a committed or rolled-back transaction."""

    state: TxState
    resolved_ms: int


@dataclass(eq=False)
class Transaction:
    """The engine's mutable record of one transaction id (PENDING or DISCARDED).

    Concurrency: `cond` guards every field. Prepares may run concurrently on
    one transaction (each counts itself in `inflight` while its halves are being
    appended); an end/resume/discard takes the transaction exclusively
    (`exclusive()`), which first waits for in-flight prepares to land, so a
    resolution always covers every half that was acknowledged before it.
    """

    transaction_id: str
    producer_group: str = ""
    state: TxState = TxState.PENDING
    halves: HalfRefs = field(default_factory=HalfRefs)
    created_ms: int = 0  # first prepare (engine clock)
    immunity_ms: int = 0  # no check-back before created_ms + immunity_ms
    checks: int = 0  # check-backs delivered to a producer
    last_check_ms: int = 0
    resumed_ms: int = 0  # last resume by an admin (restarts the orphan clock)
    in_progress_ms: int = 0  # last IN_PROGRESS answer (a check delivered before it does not count)
    next_check_ms: int = 0  # when the check-back service looks at it next
    inflight: int = 0
    ending: bool = False
    cross: "CrossGroup | None" = None  # set when its halves name a coordinator group (decision.py)

    # This transaction's condition: one of a fixed pool, chosen by id. A Condition
    # per transaction would cost more than the rest of the record (100 000 pending
    # transactions are rebuilt at recovery); conditions are held only for field
    # updates (never across a store append) and waiters re-check their own
    # predicate, so sharing a stripe is harmless.
    cond: threading.Condition = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.cond = _STRIPES[hash(self.transaction_id) & _STRIPE_MASK]

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the transaction alone: no other end/resume/discard, no prepare in flight."""
        with self.cond:
            while self.ending:
                self.cond.wait()
            self.ending = True
            while self.inflight:
                self.cond.wait()
        try:
            yield
        finally:
            with self.cond:
                self.ending = False
                self.cond.notify_all()

    def topics(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.halves.real_topics())))

    def senders(self) -> tuple[str, ...]:
        return tuple(sorted(self.halves.senders()))


@dataclass(frozen=True)
class TransactionInfo:
    """A read-only view of one transaction, for the server, the CLI and check-back."""

    transaction_id: str
    state: TxState
    producer_group: str = ""
    topics: tuple[str, ...] = ()
    half_count: int = 0
    senders: tuple[str, ...] = ()
    created_ms: int = 0
    age_s: float = 0.0
    checks: int = 0
    last_check_ms: int = 0
    next_check_ms: int = 0  # 0: none scheduled (ended, discarded, or a round holds it now)
    coordinator: str = ""  # a cross-group transaction's coordinator group
    participants: tuple[str, ...] = ()


@dataclass
class PendingCount:
    """PENDING transactions of one (producer group, topic): how many, the oldest's age, the most checked."""

    transactions: int = 0
    oldest_age_ms: int = 0
    max_check_times: int = 0

    def add(self, age_ms: int, check_times: int) -> None:
        self.transactions += 1
        self.oldest_age_ms = max(self.oldest_age_ms, age_ms)
        self.max_check_times = max(self.max_check_times, check_times)


@dataclass(frozen=True)
class PrepareResult:
    transaction_id: str
    results: list[AppendResult]


@dataclass(frozen=True)
class EndResult:
    state: TxState
    newly_ended: bool
    committed: Sequence[AppendResult] = field(default_factory=list)
