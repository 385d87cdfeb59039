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
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Sequence

from txmq.broker.store.message import AppendResult


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
    halves: list[HalfRef] = field(default_factory=list)
    created_ms: int = 0  # first prepare (engine clock)
    immunity_ms: int = 0  # no check-back before created_ms + immunity_ms
    checks: int = 0  # check-backs delivered to a producer
    last_check_ms: int = 0
    resumed_ms: int = 0  # last resume by an admin (restarts the orphan clock)
    next_check_ms: int = 0  # when the check-back service looks at it next
    inflight: int = 0
    ending: bool = False

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
        return tuple(sorted({h.real_topic for h in self.halves}))

    def senders(self) -> tuple[str, ...]:
        return tuple(sorted({h.sender for h in self.halves}))


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


@dataclass(frozen=True)
class PrepareResult:
    transaction_id: str
    results: list[AppendResult]


@dataclass(frozen=True)
class EndResult:
    state: TxState
    newly_ended: bool
    committed: Sequence[AppendResult] = field(default_factory=list)
