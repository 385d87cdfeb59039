"""The transaction engine: prepare, end, resume, discard, consistent cut.

RocketMQ's half/op design with its holes closed:
- one transaction id collects many halves (topics, queues, senders) until ended;
- COMMIT appends commit records and the op record as ONE store group
  (append_committed: a COMMIT by reference, whose slots publish each half where it
  lies, as the record a copy of it would be), so a crash leaves all of the transaction visible or none
  of it, and readers never see part of it (the store publishes a group's queue
  entries together);
- the op record is in the store (fsynced in sync mode) before end() returns;
- repeats are acknowledged and write nothing, contradictions are refused;
- what the log holds and what the table believes never differ: every write is
  applied to the table as soon as it is in the log, and only then acknowledged
  (store.acknowledge: fsync, in-sync replicas). When the acknowledgement fails
  (ReplicationTimeout, NotLeader) the caller gets that error (the outcome is
  indeterminate) and a retry finds the write applied: it only waits for the
  acknowledgement of what is there, and writes nothing again.

Locking: each transaction has its own condition (see state.Transaction); the
table lock guards only dictionary and heap operations (microseconds); the store
append of one transaction never blocks another's except inside the store
itself. A shared/exclusive gate (gate.py) lets a snapshot see the table and
the queue ends in agreement.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from txmq.broker.errors import (
    BadRequest,
    CoordinatorUnavailable,
    QueueSealed,
    RequestTimeout,
    TransactionAlreadyEnded,
    TransactionConflict,
    UnknownTransaction,
)
from txmq.broker.store.message import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROP_TIMER_DELIVER_MS,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    SYSTEM_TOPICS,
    TIMER_TOPIC,
    AppendResults,
    Message,
    StoredMessage,
)
from txmq.broker.store.record_copy import RecordCopies, Reroute

from .config import TransactionConfig
from .cross_records import CrossCommitWatch
from .decision import CrossGroup, Decision, DecisionAuthority, cross_group_of
from .gate import SharedExclusiveGate
from .gc_pause import collector_paused_for
from .half import (
    PROP_PREPARED_MS,
    build_half_columns,
    build_halves,
    check_transaction_id,
    check_transactional,
    check_transactional_topics,
    immunity_ms,
)
from .metrics import TransactionMetrics
from .op import OpKind, OpRecord, build_op
from .pending_index import PendingIndex, walk
from .recovery import RecoveredTable, forget_resolved_before, recover_table, replay_tail
from .snapshot import TableSnapshot, encode_tx, load_snapshots, write_snapshot
from .state import (
    EndResult,
    FinalRecord,
    HalfRefs,
    PendingCount,
    PrepareResult,
    Resolution,
    Transaction,
    TransactionInfo,
    TxState,
    count_topics,
)
from .store_seam import EngineStore

log = logging.getLogger(__name__)
CHECK_SOURCES = frozenset({"check", "server_check", "SOURCE_SERVER_CHECK"})
# How long a periodic snapshot waits for in-flight mutations (it holds new ones back meanwhile).
SNAPSHOT_WAIT_S = 0.05
# A COMMIT copies a half that carries a delivery time into the timer's queue, where the timer
# (timer/service.py) reads its real topic and queue from the REAL_TOPIC/REAL_QID the half kept.
SCHEDULED = Reroute(marker=PROP_TIMER_DELIVER_MS, topic=TIMER_TOPIC, queue_id=0)


class TransactionEngine:
    def __init__(self, store: EngineStore, config: TransactionConfig | None = None,
                 clock: Callable[[], float] = time.time, *, warm: RecoveredTable | None = None) -> None:
        """`warm`: the table a follower kept while it replicated (standby.py), taken over as it leads."""
        self.store = store
        self.config = config or TransactionConfig()
        self.clock = clock
        self.metrics = TransactionMetrics()
        self._table: dict[str, Transaction] = {}
        self._finals: dict[str, FinalRecord] = {}
        self._table_lock = threading.Lock()
        self._gate = SharedExclusiveGate()
        self._due: list[tuple[int, int, str]] = []  # (next_check_ms, seq, tx id): a lazy heap
        self._due_seq = itertools.count()
        self._snapshot_lock = threading.Lock()
        self._last_snapshot_s = 0.0
        # cross-group transactions: decisions this group holds as a coordinator (derived from DECIDE
        # ops like the table), and how this group reaches other coordinators (set by the broker)
        self._decisions: dict[str, Decision] = {}
        self._decide_locks = [threading.Lock() for _ in range(64)]
        # a transaction's latest write (its decision, COMMIT, ROLLBACK, ...) not acknowledged yet:
        # an answer about the transaction waits for it first (guarded by the table lock)
        self._unacked: dict[str, int] = {}
        self._acked_through = 0  # every write ending at or before this offset is acknowledged
        self.authority: DecisionAuthority | None = None
        self.state_dir = self.config.state_dir_of(store.config.data_dir)
        self.recovery_stats: dict = {}
        self._pending = PendingIndex()  # the console's counts, kept as transactions change (pending_index.py)
        self._recover(warm)
        self.cross_commits = CrossCommitWatch(store.written_offsets())
        if store.page_cache is not None:
            store.page_cache.protect(self.lowest_pending_half)

    # --- public API ---------------------------------------------------------------

    def prepare(self, messages: Sequence[Message], *, transaction_id: str | None = None,
                producer_group: str = "", sender: str = "") -> PrepareResult:
        """Store `messages` as halves of `transaction_id` (a new id when None).

        The halves of one call are one append_group: a crash keeps all or none of
        them, so a producer's retry never doubles half of a batch.
        """
        immunity_s = check_transactional(messages, now_ms=self._now_ms(),
                                          max_delay_ms=int(self.config.timer_max_delay_s * 1000))
        cross = _cross_of(messages)

        def append_halves(tx_id: str, now: int):
            halves = build_halves(messages, transaction_id=tx_id, producer_group=producer_group,
                                  sender=sender, prepared_ms=now)
            return self.store.append_group(halves, allow_system=True, durable=False)

        return self._prepare(append_halves, [m.topic for m in messages], [m.queue_id for m in messages],
                             immunity_s, transaction_id, producer_group, sender, cross)

    def prepare_bodies(self, topics: Sequence[str], bodies: pa.BinaryArray | Sequence[bytes], queue_ids: Sequence[int],
                       unique_keys: Sequence[str] | None, *, born_timestamp: int, transaction_id: str | None = None,
                       producer_group: str = "", sender: str = "",
                       cross: Mapping[str, str] | None = None) -> PrepareResult:
        """prepare() for messages that are a topic, a body, a queue and a message id (or no id:
        `unique_keys` None), nothing else (the Spark sink's rows), given as columns (the bodies
        as an Arrow column are written from it in place).

        The same halves as prepare() would store for Message(topic, body, queue_id,
        {UNIQ_KEY: id} or {}, born_timestamp=born_timestamp), encoded from one property
        template per call instead of a Message and a property dict per message.
        """
        check_transactional_topics(topics)

        def append_halves(tx_id: str, now: int):
            halves = build_half_columns(topics, bodies, queue_ids, unique_keys, born_timestamp=born_timestamp,
                                        transaction_id=tx_id, producer_group=producer_group, sender=sender,
                                        prepared_ms=now, extra=cross or {})
            return self.store.append_group_encoded(halves, durable=False)

        return self._prepare(append_halves, topics, queue_ids, None, transaction_id, producer_group, sender,
                             cross_group_of(cross) if cross else None)

    def _prepare(self, append_halves: Callable[[str, int], Sequence], topics: Sequence[str],
                 queue_ids: Sequence[int], immunity_s: int | None, transaction_id: str | None,
                 producer_group: str, sender: str, cross: CrossGroup | None = None) -> PrepareResult:
        """Admit the prepare, append its halves (append_halves(tx id, now), not acknowledged), add
        them to the table, then acknowledge them (halves in the log are the transaction's, whatever
        the acknowledgement says: a COMMIT covers them)."""
        tx_id = check_transaction_id(transaction_id) if transaction_id is not None else _new_id()
        now = self._now_ms()
        tx = self._admit_prepare(tx_id, producer_group, now)
        applied = False
        try:
            if cross is not None:
                with tx.cond:
                    if tx.cross is not None and tx.cross != cross:
                        raise BadRequest(f"transaction {tx_id} is coordinated by {tx.cross.coordinator} over "
                                         f"{','.join(tx.cross.participants)}; these halves name {cross.coordinator} "
                                         f"over {','.join(cross.participants)}")
                    tx.cross = cross
            with collector_paused_for(len(topics)):
                immunity = immunity_ms(immunity_s, self.config.transaction_timeout_s, self.config.max_immunity_s)
                with self._gate.shared():
                    self._check_not_sealed(topics, queue_ids)
                    results = append_halves(tx_id, now)
                    self._apply_halves(tx, topics, queue_ids, results, sender, immunity, now)
                    applied = True
        finally:
            with tx.cond:
                tx.inflight -= 1
                tx.cond.notify_all()
            if not applied:
                self._forget_if_empty(tx)
        if len(results):  # (an empty batch writes nothing: the store answers [])
            self._acknowledge(results.end)
        return PrepareResult(tx_id, results)

    def end(self, transaction_id: str, resolution: Resolution, *, source: str = "client",
            producer_group: str | None = None, include_senders: Iterable[str] | None = None,
            wait_reserved: bool = True) -> EndResult:
        """Resolve a transaction: COMMIT makes its halves visible, ROLLBACK drops them.

        Exactly once: a repeat is acknowledged (newly_ended=False) and writes
        nothing; a contradiction raises TransactionConflict; an unknown id raises
        UnknownTransaction. `include_senders` restricts a COMMIT to those senders'
        halves, the others are rolled back by the same op record. With `wait_reserved`
        False, a COMMIT whose final records go to a queue that another large COMMIT is
        writing raises QueueReserved instead of waiting, and the transaction stays pending.
        """
        check_transaction_id(transaction_id)
        tx = self._lookup(transaction_id)
        if isinstance(tx, FinalRecord):
            return self._repeat_or_conflict(transaction_id, tx.state, resolution)
        cross = tx.cross
        if cross is None:
            return self._end(tx, resolution, source, include_senders, wait_reserved)
        if tx.state is TxState.DISCARDED and resolution is Resolution.ROLLBACK:
            return EndResult(TxState.DISCARDED, False)  # a discard recorded ROLLBACK at the coordinator first
        if self._authority().is_coordinator(cross):
            return self._end_as_coordinator(tx, cross, resolution, source, include_senders, wait_reserved)
        # no participant resolves a cross-group transaction but as its coordinator decided (first
        # decision wins), senders included: the decision's, whatever this caller names
        proposal = _senders_of(resolution, include_senders)
        decision = self._settle(tx, cross, resolution, proposal)
        decided = decision.resolution
        result = self._end(tx, decided, source, decision.senders, wait_reserved)
        if decided is not resolution:
            raise TransactionConflict(
                f"transaction {transaction_id} was decided {decided.name} by its coordinator group "
                f"{cross.coordinator}: {resolution.name} refused ({decided.name} applied here)")
        return result

    def _end_as_coordinator(self, tx: Transaction, cross: CrossGroup, resolution: Resolution, source: str,
                            include_senders: Iterable[str] | None, wait_reserved: bool) -> EndResult:
        """The coordinator group resolving its own halves: with no decision yet, the DECIDE op
        goes in the same store group as its COMMIT (or ROLLBACK), one write instead of two, so
        the decision and this group's part of it survive a crash together or not at all."""
        tx_id = tx.transaction_id
        with self._decide_lock(tx_id):
            known = self.decision(tx_id)
            if known is not None:
                decided, senders, decide_op, decision = known.resolution, known.senders, None, None
            else:
                decided, senders = resolution, _senders_of(resolution, include_senders)
                now = self._now_ms()
                decision = Decision(resolution, cross.participants, now, senders=senders)
                decide_op = build_op(OpRecord(tx_id, OpKind.DECIDE, senders, 0, now, decision=resolution.name,
                                              participants=cross.participants))
            # the decision is applied with the write, before its acknowledgement (see _end)
            result = self._end(tx, decided, source, senders, wait_reserved, decide_op, decision)
        if decided is not resolution:
            raise TransactionConflict(
                f"transaction {tx_id} was decided {decided.name} by its coordinator group "
                f"{cross.coordinator}: {resolution.name} refused ({decided.name} applied here)")
        return result

    def _end(self, tx: Transaction, resolution: Resolution, source: str, include_senders: Iterable[str] | None,
             wait_reserved: bool, decide_op: Message | None = None, decision: Decision | None = None) -> EndResult:
        """Write the resolution, apply it (and `decision`, written by `decide_op` in the same group)
        to the table, then acknowledge it: a failed acknowledgement raises with the table already
        matching the log."""
        transaction_id = tx.transaction_id
        with tx.exclusive(), collector_paused_for(len(tx.halves)):
            if tx.state.is_final:
                ended = None
            elif tx.state is TxState.DISCARDED:
                if resolution is not Resolution.ROLLBACK:
                    raise TransactionConflict(
                        f"transaction {transaction_id} was discarded after its check-backs; COMMIT refused "
                        "(an admin can resume it first)")
                if decision is None:
                    return EndResult(TxState.DISCARDED, False)
                ended = None  # nothing written: no decision either
            else:
                if not tx.halves:
                    raise UnknownTransaction(f"transaction {transaction_id} has no half messages")
                now = self._now_ms()
                if resolution is Resolution.COMMIT:
                    committed, end = self._commit(tx, include_senders, now, wait_reserved, decide_op, decision)
                    state = TxState.COMMITTED
                else:
                    end = self._append_op_and_finish(tx, OpKind.ROLLBACK, TxState.ROLLED_BACK, now, decide_op,
                                                     decision)
                    committed, state = [], TxState.ROLLED_BACK
                if source in CHECK_SOURCES:
                    self.metrics.count("checks_answered")
                ended = EndResult(state, True, committed), end
        if ended is None:  # ended before (answered outside the exclusive hold: it may wait for an acknowledgement)
            if decision is not None:
                raise TransactionConflict(f"transaction {transaction_id} ended on its coordinator group without a "
                                          f"recorded decision: it was not resolved as a cross-group transaction")
            return self._repeat_or_conflict(transaction_id, tx.state, resolution)
        result, end = ended
        self._acknowledge(end, transaction_id)
        return result

    def get(self, transaction_id: str) -> TransactionInfo:
        tx = self._lookup(transaction_id)
        if isinstance(tx, FinalRecord):
            self._settle_writes(transaction_id)  # an ended state is told once its write is acknowledged
            return TransactionInfo(transaction_id, tx.state)
        with tx.cond:
            return self._info(tx, self._now_ms())

    def _check_not_sealed(self, topics: Sequence[str], queue_ids: Sequence[int]) -> None:
        """A half may not go to a queue a move sealed: its COMMIT would land past the end the move fixed."""
        sealed = self.store.first_sealed(topics, queue_ids)
        if sealed is not None:
            topic, queue_id = sealed
            raise QueueSealed(f"queue {topic}:{queue_id} was sealed by a move to another group; no half was "
                              "stored: refresh the routes and send again")

    def holding(self, topic: str, queue_id: int) -> list[str]:
        """The pending transactions with halves for (topic, queue_id)."""
        with self._table_lock:
            candidates = [tx for tx in self._table.values() if tx.state is TxState.PENDING]
        out = []
        for tx in candidates:
            with tx.cond:
                if tx.state is TxState.PENDING and topic in tx.topics() and any(
                        r.real_topic == topic and r.real_queue_id == queue_id for r in tx.halves):
                    out.append(tx.transaction_id)
        return out

    def settle_queue(self, topic: str, queue_id: int, timeout_s: float) -> None:
        """Wait until no pending transaction holds halves for a queue that was just sealed (the
        seal is checked with the halves' append under the gate, so none is added after this
        starts); RequestTimeout names those still pending at the deadline."""
        with self._gate.exclusive():
            pass  # a prepare that passed the seal's check has its halves in the table now
        deadline = time.monotonic() + timeout_s
        while True:
            holding = self.holding(topic, queue_id)
            if not holding:
                return
            if time.monotonic() >= deadline:
                raise RequestTimeout(f"queue {topic}:{queue_id} still has {len(holding)} pending transaction(s) "
                                     f"after {timeout_s:g}s ({', '.join(holding[:5])}...): end or roll them back, "
                                     "or move again with a longer --wait")
            time.sleep(0.05)

    def pending(self, *, topic: str | None = None, limit: int = 1000) -> list[TransactionInfo]:
        return self.transactions(state=TxState.PENDING, topic=topic, limit=limit)

    def transactions(self, *, state: TxState = TxState.PENDING, topic: str | None = None,
                     limit: int = 1000) -> list[TransactionInfo]:
        """PENDING or DISCARDED transactions, oldest first (resolved ones are not listed)."""
        with self._table_lock:
            candidates = [tx for tx in self._table.values() if tx.state is state]
        if topic is not None:
            candidates = [tx for tx in candidates if topic in tx.topics()]
        now = self._now_ms()
        infos = []
        # the `limit` oldest without sorting them all: the console asks every refresh
        for tx in heapq.nsmallest(limit, candidates, key=lambda t: t.created_ms):
            with tx.cond:
                if tx.state is state:
                    infos.append(self._info(tx, now))
        return infos

    def pending_summary(self) -> tuple[dict[tuple[str, str], PendingCount], int]:
        """({(producer group, topic): PendingCount} of PENDING transactions, how many are DISCARDED):
        the console's view, read from the counts kept as transactions change, not per transaction."""
        return self._pending.summary(self._now_ms())

    def check_pending_index(self) -> None:
        """Assert the kept counts equal a walk over the table (tests call it; it visits every transaction)."""
        now = self._now_ms()
        with self._table_lock:
            table = dict(self._table)
        kept, walked = self._pending.summary(now), walk(table, now)
        assert kept == walked, f"pending index {kept} differs from the table's {walked}"

    def resume(self, transaction_id: str) -> None:
        """DISCARDED → PENDING again (an admin's decision), with its checks reset."""
        tx = self._lookup(transaction_id)
        if isinstance(tx, FinalRecord):
            raise TransactionAlreadyEnded(f"transaction {transaction_id} is {tx.state.value}: cannot resume",
                                          state=tx.state.value)
        with tx.exclusive():
            if tx.state is TxState.PENDING:
                return
            if tx.state.is_final:
                raise TransactionAlreadyEnded(
                    f"transaction {transaction_id} is {tx.state.value}: cannot resume", state=tx.state.value)
            now = self._now_ms()
            op = build_op(OpRecord(tx.transaction_id, OpKind.RESUME, None, len(tx.halves), now))
            with self._gate.shared():
                end = self.store.append([op], allow_system=True, durable=False).end
                with tx.cond:
                    tx.state, tx.checks, tx.last_check_ms, tx.resumed_ms = TxState.PENDING, 0, 0, now
                    self._pending.update(tx.transaction_id, checks=0, state=TxState.PENDING)
            self.metrics.halves_back_to_pending(tx.halves.topic_counts())
            self.metrics.count("resumes")
            self._schedule(tx, now + tx.immunity_ms)
        self._acknowledge(end)

    def discard(self, transaction_id: str, *, reason: str = "admin") -> bool:
        """Park a PENDING transaction: copy its halves to TRANS_CHECK_MAX_TIME_TOPIC, op DISCARD.

        Returns False when it was no longer pending (resolved meanwhile)."""
        tx = self._lookup(transaction_id)
        if isinstance(tx, FinalRecord):
            return False
        if tx.cross is not None and tx.state is TxState.PENDING:
            # ROLLBACK is recorded at the coordinator first: a COMMIT decided there meanwhile wins
            decided = self._settle(tx, tx.cross, Resolution.ROLLBACK, None)
            if decided.resolution is Resolution.COMMIT:
                self._end(tx, Resolution.COMMIT, "coordinator", decided.senders, True)
                return False
        with tx.exclusive():
            if tx.state is not TxState.PENDING or not tx.halves:
                return False
            now = self._now_ms()
            # RocketMQ's discard destination keeps a copy of each half for an admin
            copies = _copies_of(tx.halves, CHECK_MAX_TIME_TOPIC, 0, SYSFLAG_TRANSACTION_NOT_TYPE)
            op = build_op(OpRecord(tx.transaction_id, OpKind.DISCARD, None, len(tx.halves), now))
            with self._gate.shared():
                end = self.store.append_group_copies(copies, [op], durable=False).end
                with tx.cond:
                    tx.state = TxState.DISCARDED
                    self._pending.update(tx.transaction_id, state=TxState.DISCARDED)
            self.metrics.halves_left_pending(tx.halves.topic_counts())
            self.metrics.resolved("DISCARD", (now - tx.created_ms) / 1000)
            log.info("transaction %s discarded (%s) after %d checks", transaction_id, reason, tx.checks)
        self._acknowledge(end)
        return True

    # --- cross-group transactions (decision.py) -------------------------------------

    def decide(self, transaction_id: str, resolution: Resolution, participants: Sequence[str],
               senders: Iterable[str] | None = None) -> Decision:
        """As the coordinator group: record `resolution` for `transaction_id` (a COMMIT of `senders`'
        halves only, when given) unless a decision is recorded already, and return the decision in
        force (the first one wins). The DECIDE op is in the store (replicated under sync
        replication) before this returns."""
        check_transaction_id(transaction_id)
        with self._decide_lock(transaction_id):
            with self._table_lock:
                known = self._decisions.get(transaction_id)
            if known is None:
                now = self._now_ms()
                groups = tuple(sorted(set(participants)))
                chosen = _senders_of(resolution, senders)
                op = build_op(OpRecord(transaction_id, OpKind.DECIDE, chosen, 0, now, decision=resolution.name,
                                       participants=groups))
                with self._gate.shared():
                    end = self.store.append([op], allow_system=True, durable=False).end
                    decision = Decision(resolution, groups, now, senders=chosen)
                    self._record_decision(transaction_id, decision, end)
        if known is not None:
            self._settle_writes(transaction_id)  # the first decide's acknowledgement may have failed
            return known
        self._acknowledge(end, transaction_id)
        return dataclasses.replace(decision, newly_decided=True)

    def decision(self, transaction_id: str) -> Decision | None:
        """The decision this group holds as coordinator for `transaction_id` (None: none), once
        the write that recorded it is acknowledged (a participant applies what it is told)."""
        with self._table_lock:
            known = self._decisions.get(transaction_id)
        if known is not None:
            self._settle_writes(transaction_id)
        return known

    def _record_decision(self, transaction_id: str, decision: Decision, end: int) -> None:
        """A decision just written (ending at `end`, not yet acknowledged) enters the table."""
        with self._table_lock:
            self._unacked[transaction_id] = max(end, self._unacked.get(transaction_id, 0))
            self._decisions[transaction_id] = decision
        self.metrics.count("decisions")

    def coordinator_decision(self, tx: Transaction) -> Decision | None:
        """What the coordinator of a pending cross-group transaction decided (None: nothing yet);
        CoordinatorUnavailable when it cannot be asked."""
        assert tx.cross is not None, "only a cross-group transaction has a coordinator"
        return self._authority().lookup(tx.transaction_id, tx.cross)

    def _decide_lock(self, transaction_id: str) -> threading.Lock:
        """Serializes the decisions of one transaction id (first wins) without one lock for all."""
        return self._decide_locks[hash(transaction_id) % len(self._decide_locks)]

    def _settle(self, tx: Transaction, cross: CrossGroup, proposal: Resolution,
                senders: tuple[str, ...] | None) -> Decision:
        decided = self._authority().settle(tx.transaction_id, cross, proposal, senders)
        assert isinstance(decided, Decision), decided
        return decided

    def _authority(self) -> DecisionAuthority:
        if self.authority is None:
            raise CoordinatorUnavailable("this broker is not in a broker group: it cannot reach the coordinator "
                                         "of a cross-group transaction")
        return self.authority

    def lowest_pending_half(self) -> int | None:
        """The CommitLog offset of the first half of the oldest-written pending transaction (None:
        no pending halves): what a COMMIT may still copy, kept in the page cache (page_cache.py).
        A transaction's first half, not the minimum of all its halves: a hint, not a bound."""
        with self._table_lock:
            transactions = list(self._table.values())
        firsts = [tx.halves[0].physical_offset for tx in transactions if tx.halves and tx.state is TxState.PENDING]
        return min(firsts) if firsts else None

    def consistent_cut(self, topics: Iterable[str] | None = None) -> dict[tuple[str, int], int]:
        """Per (topic, queue), an end offset that never splits a committed transaction.

        COMMIT publishes a transaction's entries as one store group and the
        store's snapshot is taken under its dispatch lock, so the snapshot is
        such a cut; system topics are left out of an unfiltered cut.
        """
        cut = self.store.max_offsets_snapshot(list(topics) if topics is not None else None)
        if topics is None:
            cut = {k: v for k, v in cut.items() if k[0] not in SYSTEM_TOPICS}
        return cut

    def snapshot(self, *, wait: bool = True) -> Path | None:
        """Write a table snapshot now (bounds the next recovery's replay). Without `wait`,
        skip it (None) when in-flight mutations do not let it in within SNAPSHOT_WAIT_S."""
        with self._snapshot_lock:
            with self._gate.exclusive(None if wait else SNAPSHOT_WAIT_S) as held:
                if not held:
                    return None
                snap = TableSnapshot(
                    half_offset=self.store.max_offset(HALF_TOPIC, 0),
                    op_offset=self.store.max_offset(OP_HALF_TOPIC, 0),
                    written_ms=self._now_ms(),
                    rows=[encode_tx(tx) for tx in list(self._table.values()) if tx.halves],
                    finals=dict(self._finals), decisions=dict(self._decisions))
            self._prune_finals(snap)
            path = write_snapshot(self.state_dir, snap)
            self._last_snapshot_s = time.monotonic()
            return path

    def maybe_snapshot(self) -> None:
        """The periodic snapshot; skipped (tried again next round) while a long COMMIT runs."""
        if time.monotonic() - self._last_snapshot_s >= self.config.snapshot_interval_s:
            self.snapshot(wait=False)

    def close(self) -> None:
        """Write a final snapshot; call before store.close()."""
        self.snapshot()

    # --- check-back support (used by CheckbackService) ----------------------------

    def claim_due(self, now_ms: int, limit: int) -> list[Transaction]:
        """Pending transactions due for a check-back at `now_ms`, oldest due first, at most `limit`.

        A lazy heap: entries of transactions resolved or rescheduled since are
        dropped as they surface, so a round costs the due transactions, not the table."""
        claimed: list[Transaction] = []
        with self._table_lock:
            while self._due and len(claimed) < limit and self._due[0][0] <= now_ms:
                due_ms, _, tx_id = heapq.heappop(self._due)
                tx = self._table.get(tx_id)
                if tx is not None and tx.state is TxState.PENDING and tx.next_check_ms == due_ms:
                    tx.next_check_ms = -1  # claimed: no other round takes it
                    claimed.append(tx)
        return claimed

    def check_verdict(self, tx: Transaction, now_ms: int) -> str:
        """'check', 'discard:max-checks' or 'discard:orphan' for a claimed transaction."""
        with tx.cond:
            if now_ms - max(tx.created_ms, tx.resumed_ms) >= self.config.orphan_timeout_s * 1000:
                return "discard:orphan"
            if tx.checks >= self.config.max_checks:
                return "discard:max-checks"
            return "check"

    def record_check(self, tx: Transaction, delivered: bool, now_ms: int) -> None:
        """After a check-back attempt: a delivered one burns a check, an undelivered one does not, nor
        one already answered IN_PROGRESS (at or after `now_ms`, when its round began)."""
        with tx.cond:
            if delivered:
                tx.last_check_ms = now_ms
                if tx.in_progress_ms < now_ms:
                    tx.checks += 1
            pending = tx.state is TxState.PENDING
            if delivered and pending:
                self._pending.update(tx.transaction_id, checks=tx.checks)
        self.metrics.count("checks_sent" if delivered else "checks_undelivered")
        if pending:
            self._schedule(tx, now_ms + int(self.config.check_interval_s * 1000))

    def answer_in_progress(self, transaction_id: str, *, producer_group: str | None = None) -> TxState:
        """A live producer's check-back answer "still running, ask later" (a Spark micro-batch that
        has not finished): the checks delivered so far stop counting towards max_checks, while the
        transaction is younger than in_progress_max_age_s; past that it counts as UNKNOWN does.
        Nothing is ended or written; the transaction's state is returned."""
        check_transaction_id(transaction_id)
        tx = self._lookup(transaction_id)
        if isinstance(tx, FinalRecord):
            return tx.state
        now = self._now_ms()
        with tx.cond:
            if tx.state is not TxState.PENDING:
                return tx.state
            if producer_group and tx.producer_group and producer_group != tx.producer_group:
                raise TransactionConflict(f"transaction {transaction_id} belongs to producer group "
                                          f"{tx.producer_group!r}, not {producer_group!r}: its answer is not taken")
            young = now - tx.created_ms < self.config.in_progress_max_age_s * 1000
            if young:
                # the answer may come before record_check counts the check it answers: that one is
                # skipped there (its round began before now), the ones counted before are forgiven here
                tx.in_progress_ms = now
                if tx.checks:
                    tx.checks = 0
                    self._pending.update(tx.transaction_id, checks=0)
        self.metrics.count("checks_in_progress")
        return TxState.PENDING

    def release_claim(self, tx: Transaction, due_ms: int) -> None:
        """Put a claimed transaction back (e.g. its round was stopped)."""
        if tx.state is TxState.PENDING:
            self._schedule(tx, due_ms)

    def first_half(self, tx: Transaction) -> StoredMessage | Message:
        """The half shown to a producer in a check-back (RocketMQ sends one message)."""
        ref = tx.halves[0]
        return self.store.read_at(ref.physical_offset, ref.size)

    def info(self, tx: Transaction) -> TransactionInfo:
        with tx.cond:
            return self._info(tx, self._now_ms())

    def now_ms(self) -> int:
        return self._now_ms()

    # --- internals ----------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _acknowledge(self, end: int, transaction_id: str | None = None) -> None:
        """Wait until the write ending at `end`, already applied to the table, may be acknowledged
        (raises the store's typed error when it may not: the table keeps it, as the log does)."""
        if end > self._acked_through:
            self.store.acknowledge(end)
            with self._table_lock:
                self._acked_through = max(self._acked_through, end)
        if transaction_id is not None:
            with self._table_lock:
                if self._unacked.get(transaction_id, end + 1) <= end:
                    del self._unacked[transaction_id]

    def _settle_writes(self, transaction_id: str) -> None:
        """Before telling what the table holds of `transaction_id`: the write that put it there is
        acknowledged (a retry after a failed acknowledgement waits for it, and writes nothing)."""
        with self._table_lock:
            end = self._unacked.get(transaction_id)
        if end is not None:
            self._acknowledge(end, transaction_id)

    def _repeat_or_conflict(self, tx_id: str, state: TxState, resolution: Resolution) -> EndResult:
        """A resolution of a transaction that has ended: acknowledged (once its ending write is) and
        nothing written when it is the same, TransactionConflict when it is not."""
        self._settle_writes(tx_id)
        return _repeat_or_conflict(tx_id, state, resolution)

    def _lookup(self, tx_id: str) -> Transaction | FinalRecord:
        with self._table_lock:
            tx = self._table.get(tx_id) or self._finals.get(tx_id)
        if tx is None:
            raise UnknownTransaction(f"transaction {tx_id} is unknown (never prepared, or forgotten)")
        return tx

    def _admit_prepare(self, tx_id: str, producer_group: str, now: int) -> Transaction:
        """Find or create the transaction and count this prepare in flight, or refuse."""
        while True:
            with self._table_lock:
                final = self._finals.get(tx_id)
                if final is not None:
                    raise _already_ended(tx_id, final.state)
                tx = self._table.get(tx_id)
                if tx is None:
                    tx = self._table[tx_id] = Transaction(tx_id, producer_group=producer_group, created_ms=now)
            with tx.cond:
                while tx.ending:
                    tx.cond.wait()
                if tx.state is not TxState.PENDING:
                    raise _already_ended(tx_id, tx.state)
                with self._table_lock:
                    if self._table.get(tx_id) is not tx:
                        continue  # forgotten by a failed first prepare meanwhile: start over
                tx.inflight += 1
                return tx

    def _apply_halves(self, tx: Transaction, topics: Sequence[str], queue_ids: Sequence[int], results,
                      sender: str, immunity: int, now: int) -> None:
        columns = results.columns if isinstance(results, AppendResults) else None
        if columns is not None:  # the store's columns: no AppendResult built per half
            queue_offsets, phys, sizes = columns
        else:
            queue_offsets = [r.queue_offset for r in results]
            phys = [r.physical_offset for r in results]
            sizes = [r.size for r in results]
        n = len(topics)
        # one result per half (the physical offsets may end with the batch's end): a short column would misfile halves
        assert len(queue_offsets) == len(sizes) == n <= len(phys) and len(queue_ids) == n, (n, len(sizes))
        added = count_topics(topics)
        with tx.cond:
            first = not tx.halves
            tx.halves.add(phys[:n], sizes, queue_offsets, topics, queue_ids, sender)
            if first:
                tx.created_ms = now
            if first and n:  # (an empty prepare adds no halves: the transaction may still be forgotten)
                self._pending.put(tx.transaction_id, tx.producer_group, added, now, tx.checks, tx.state)
            elif n:
                self._pending.update(tx.transaction_id, topics=added)
            tx.immunity_ms = max(tx.immunity_ms, immunity)
        self.metrics.halves_added(added)
        if first:
            self._schedule(tx, now + tx.immunity_ms)

    def _forget_if_empty(self, tx: Transaction) -> None:
        with tx.cond:
            if tx.halves or tx.inflight or tx.ending or tx.state is not TxState.PENDING:
                return
            with self._table_lock:
                if self._table.get(tx.transaction_id) is tx:
                    del self._table[tx.transaction_id]

    def _commit(self, tx: Transaction, include_senders: Iterable[str] | None, now: int, wait_reserved: bool = True,
                decide_op: Message | None = None, decision: Decision | None = None) -> tuple[AppendResults, int]:
        """Publish the selected halves by reference (each as the copy it stands for: the engine's
        prepare time dropped; a half with a delivery time to the timer's queue: SCHEDULED) with the
        op record as one group, then mark the transaction committed. Returns the finals' results and
        the write's end, not acknowledged yet."""
        wanted = None if include_senders is None else frozenset(include_senders)
        selected = tx.halves if wanted is None else tx.halves.of_senders(wanted)
        finals = _copies_of(selected, None, None, SYSFLAG_TRANSACTION_COMMIT, SCHEDULED)
        if tx.cross is not None:  # real topics: a scheduled copy reaches its topic through the timer later
            self.cross_commits.committed(count_topics(finals.topics))
        op = build_op(OpRecord(tx.transaction_id, OpKind.COMMIT,
                               tuple(sorted(wanted)) if wanted is not None else None, len(tx.halves), now,
                               participants=tx.cross.participants if tx.cross is not None else ()))
        with self._gate.shared():
            ops = [op] if decide_op is None else [decide_op, op]  # a decision first: recovery meets it first
            # by reference: commit records whose slots publish the halves where they lie
            results = self.store.append_committed(finals, ops, wait_reserved=wait_reserved, durable=False)
            if decision is not None:
                self._record_decision(tx.transaction_id, decision, results.end)
            self._finish(tx, TxState.COMMITTED, now, results.end,
                         count_topics(finals.topics) if wanted is None else None)
        count = len(finals)
        self.metrics.resolved("COMMIT", (now - tx.created_ms) / 1000, count)
        return AppendResults(count, lambda: list(results[:count])), results.end  # the finals' results, not the op's

    def _append_op_and_finish(self, tx: Transaction, kind: OpKind, state: TxState, now: int,
                              decide_op: Message | None = None, decision: Decision | None = None) -> int:
        """Append the op record (after `decide_op`, in one group), mark the transaction ended;
        returns the write's end, not acknowledged yet."""
        op = build_op(OpRecord(tx.transaction_id, kind, None, len(tx.halves), now,
                               participants=tx.cross.participants if tx.cross is not None else ()))
        with self._gate.shared():
            if decide_op is None:
                end = self.store.append([op], allow_system=True, durable=False).end
            else:  # the decision and this group's ROLLBACK: one group, both or neither survive a crash
                end = self.store.append_group([decide_op, op], allow_system=True, durable=False).end
            if decision is not None:
                self._record_decision(tx.transaction_id, decision, end)
            self._finish(tx, state, now, end)
        self.metrics.resolved(kind.value, (now - tx.created_ms) / 1000)
        return end

    def _finish(self, tx: Transaction, state: TxState, now: int, end: int,
                topic_counts: dict[str, int] | None = None) -> None:
        """Move a just-resolved transaction (its op record ending at `end`, not acknowledged yet)
        to the compact finals map. `topic_counts`: its halves per real topic, when the caller has
        counted them already."""
        with tx.cond:
            tx.state = state
            self._pending.remove(tx.transaction_id)
        with self._table_lock:
            self._unacked[tx.transaction_id] = max(end, self._unacked.get(tx.transaction_id, 0))
            self._table.pop(tx.transaction_id, None)
            self._finals[tx.transaction_id] = FinalRecord(state, now)
        self.metrics.halves_left_pending(topic_counts if topic_counts is not None else tx.halves.topic_counts())

    def _schedule(self, tx: Transaction, due_ms: int) -> None:
        with self._table_lock:
            tx.next_check_ms = due_ms
            heapq.heappush(self._due, (due_ms, next(self._due_seq), tx.transaction_id))

    def _info(self, tx: Transaction, now: int) -> TransactionInfo:
        return TransactionInfo(
            transaction_id=tx.transaction_id, state=tx.state, producer_group=tx.producer_group,
            topics=tx.topics(), half_count=len(tx.halves), senders=tx.senders(), created_ms=tx.created_ms,
            age_s=max(0, now - tx.created_ms) / 1000, checks=tx.checks, last_check_ms=tx.last_check_ms,
            next_check_ms=max(0, tx.next_check_ms) if tx.state is TxState.PENDING else 0,
            coordinator=tx.cross.coordinator if tx.cross is not None else "",
            participants=tx.cross.participants if tx.cross is not None else ())

    def _prune_finals(self, snap: TableSnapshot) -> None:
        with self._table_lock:  # writes acknowledged since by a later write's acknowledgement
            if self._unacked:
                self._unacked = {k: end for k, end in self._unacked.items() if end > self._acked_through}
        horizon = snap.written_ms - int(self.config.resolved_retention_s * 1000)
        stale, old_decisions = forget_resolved_before(snap.finals, snap.decisions, horizon)
        if old_decisions:
            with self._table_lock:
                for k in old_decisions:
                    snap.decisions.pop(k, None)
                    if k in self._decisions and self._decisions[k].at_ms < horizon:
                        del self._decisions[k]
        if not stale:
            return
        with self._table_lock:
            for k in stale:
                snap.finals.pop(k, None)
                final = self._finals.get(k)
                if final is not None and final.resolved_ms < horizon:
                    del self._finals[k]

    def _recover(self, warm: RecoveredTable | None) -> None:
        started = time.monotonic()
        if warm is not None:  # a follower's standby table: only what it had not replayed yet
            rebuilt = warm
            rebuilt.halves_replayed = rebuilt.ops_replayed = 0  # this recovery's, not the follower's
            replay_tail(rebuilt, self.store, default_immunity_s=self.config.transaction_timeout_s,
                        max_immunity_s=self.config.max_immunity_s)
        else:
            rebuilt = recover_table(self.store, load_snapshots(self.state_dir),
                                    default_immunity_s=self.config.transaction_timeout_s,
                                    max_immunity_s=self.config.max_immunity_s)
        self._table, self._finals, self._decisions = rebuilt.table, rebuilt.finals, rebuilt.decisions
        self._pending.rebuild(self._table)
        interval_ms = int(self.config.check_interval_s * 1000)
        pending: dict[str, int] = {}
        for tx in self._table.values():
            if tx.state is TxState.PENDING and tx.halves:
                for h in tx.halves:
                    pending[h.real_topic] = pending.get(h.real_topic, 0) + 1
                due = tx.created_ms + tx.immunity_ms
                if tx.last_check_ms:
                    due = max(due, tx.last_check_ms + interval_ms)
                self._schedule(tx, due)
        self.metrics.halves_back_to_pending(pending)
        self.recovery_stats = {
            "from_snapshot": rebuilt.from_snapshot, "halves_replayed": rebuilt.halves_replayed,
            "ops_replayed": rebuilt.ops_replayed, "transactions": len(self._table),
            "finals": len(self._finals), "decisions": len(self._decisions), "seconds": time.monotonic() - started}
        if rebuilt.halves_replayed or rebuilt.ops_replayed or not rebuilt.from_snapshot:
            self.snapshot()  # a stale snapshot must never look valid after the store grows again
        else:
            self._last_snapshot_s = time.monotonic()


def _copies_of(halves: HalfRefs, topic: str | None, queue_id: int | None, transaction_type: int,
               reroute: Reroute | None = None) -> RecordCopies:
    """Copies of `halves` in the order they were stored (concurrent prepares add theirs in any
    order), to their real topic and queue when topic/queue_id are None (to the reroute's where
    a half carries its marker: the halves' own bytes say which are scheduled). A Spark micro-batch
    holds millions of halves: their columns are concatenated, and sorted only when they are not
    in log order already (HalfRefs.in_log_order: one comparison per prepare call)."""
    n = len(halves)
    phys, sizes, topics, queue_ids = halves.columns()
    if n > 1 and not halves.in_log_order():
        order = np.argsort(phys, kind="stable")
        phys, sizes, queue_ids = phys[order], sizes[order], queue_ids[order]
        topics = list(map(topics.__getitem__, order.tolist()))
    return RecordCopies(
        physical_offsets=phys, sizes=sizes,
        topics=topics if topic is None else [topic] * n,
        queue_ids=queue_ids if queue_id is None else [queue_id] * n,
        transaction_type=transaction_type, source_topic=HALF_TOPIC, source_queue_id=0,
        # the prepare time is the engine's bookkeeping, not the message's: a final record drops it
        drop_properties=(PROP_PREPARED_MS,) if transaction_type == SYSFLAG_TRANSACTION_COMMIT else (),
        reroute=reroute)


def _cross_of(messages: Sequence[Message]) -> CrossGroup | None:
    """The cross-group part of one prepare call: every message names the same coordinator, or none does."""
    found = {cross_group_of(m.properties) if m.properties else None for m in messages}
    if len(found) > 1:
        raise BadRequest("the messages of one prepare name different coordinator groups (or some name none)")
    return found.pop()


def _senders_of(resolution: Resolution, include_senders: Iterable[str] | None) -> tuple[str, ...] | None:
    """The senders a decision restricts its COMMIT to (a ROLLBACK drops every half)."""
    if resolution is not Resolution.COMMIT or include_senders is None:
        return None
    return tuple(sorted(set(include_senders)))


def _new_id() -> str:
    return uuid.uuid4().hex.upper()


def _already_ended(tx_id: str, state: TxState) -> TransactionAlreadyEnded:
    return TransactionAlreadyEnded(
        f"transaction {tx_id} is already {state.value}: no more half messages can be added", state=state.value)


def _repeat_or_conflict(tx_id: str, state: TxState, resolution: Resolution) -> EndResult:
    same = (state is TxState.COMMITTED) == (resolution is Resolution.COMMIT)
    if same:
        return EndResult(state, False)
    raise TransactionConflict(
        f"transaction {tx_id} is already {state.value}: {resolution.name} refused, nothing written")
