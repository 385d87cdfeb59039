"""Rebuilding the transaction table after a restart.

The half and op queues are the truth: halves say which messages belong to which
transaction, op records say how each transaction ended. Recovery starts from the
newest usable snapshot (see snapshot.py) and replays the queues' tail: first the
halves (collecting them per transaction), then the op records in queue order
(COMMIT/ROLLBACK end a transaction, DISCARD parks it, RESUME re-opens it). Both
steps are idempotent, so a half or op already covered by the snapshot is harmless.
Cost: the tail since the snapshot, plus the table itself.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterator

from txmq.broker.errors import BadRequest, DataDeleted
from txmq.broker.store.message import HALF_TOPIC, OP_HALF_TOPIC, PROP_TRANSACTION_ID, StoredMessage

from .decision import Decision, cross_group_of
from .half import half_ref_from_stored, immunity_ms, prepared_ms, stored_immunity_s
from .op import OpKind, parse_op
from .snapshot import TableSnapshot
from .state import FinalRecord, Resolution, Transaction, TxState
from .store_seam import EngineStore

log = logging.getLogger(__name__)
_BATCH = 1024


@dataclass
class RecoveredTable:
    table: dict[str, Transaction] = field(default_factory=dict)
    finals: dict[str, FinalRecord] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)
    halves_replayed: int = 0
    ops_replayed: int = 0
    from_snapshot: bool = False
    half_offset: int = 0  # the half queue's offset replayed through (exclusive)
    op_offset: int = 0  # the op queue's, likewise
    replayed_end: int = 0  # the log offset past the last record replayed (a cut below it voids the table)


def recover_table(store: EngineStore, snapshots: list[TableSnapshot], *, default_immunity_s: float,
                  max_immunity_s: float) -> RecoveredTable:
    out = start_table(store, snapshots)
    replay_tail(out, store, default_immunity_s=default_immunity_s, max_immunity_s=max_immunity_s)
    return out


def start_table(store: EngineStore, snapshots: list[TableSnapshot]) -> RecoveredTable:
    """The newest snapshot the store's queues cover, or an empty table at their start."""
    half_end = store.max_offset(HALF_TOPIC, 0)
    op_end = store.max_offset(OP_HALF_TOPIC, 0)
    usable = next((s for s in snapshots if s.half_offset <= half_end and s.op_offset <= op_end), None)
    out = RecoveredTable()
    if usable is not None:
        out.from_snapshot = True
        out.table = {tx.transaction_id: tx for tx in usable.transactions}
        out.finals = dict(usable.finals)
        out.decisions = dict(usable.decisions)
        out.half_offset, out.op_offset = usable.half_offset, usable.op_offset
    else:
        if snapshots:
            log.warning("transaction snapshots are ahead of the store (async tail lost): full replay")
        out.half_offset, out.op_offset = store.min_offset(HALF_TOPIC, 0), store.min_offset(OP_HALF_TOPIC, 0)
    return out


def replay_tail(out: RecoveredTable, store: EngineStore, *, default_immunity_s: float, max_immunity_s: float,
                batch_lock: Callable[[], ContextManager[object]] | None = None, batch: int = _BATCH) -> None:
    """Replay the halves, then the ops, past `out`'s offsets to the queues' ends now, advancing
    them. `batch_lock`: held around each read of `batch` records (a follower's, against a cut of
    its log while it reads)."""
    half_end = store.max_offset(HALF_TOPIC, 0)
    op_end = store.max_offset(OP_HALF_TOPIC, 0)
    known: dict[str, set[int]] = {}  # per transaction touched by the replay: its halves' offsets
    for half in _scan(store, HALF_TOPIC, out.half_offset, half_end, batch_lock, batch):
        out.halves_replayed += 1
        out.replayed_end = max(out.replayed_end, half.physical_offset + half.size)
        _apply_half(out, known, half, default_immunity_s, max_immunity_s)
    out.half_offset = max(out.half_offset, half_end)
    for stored in _scan(store, OP_HALF_TOPIC, out.op_offset, op_end, batch_lock, batch):
        out.ops_replayed += 1
        out.replayed_end = max(out.replayed_end, stored.physical_offset + stored.size)
        _apply_op(out, stored)
    out.op_offset = max(out.op_offset, op_end)


def forget_resolved_before(finals: dict[str, FinalRecord], decisions: dict[str, Decision],
                           horizon_ms: int) -> tuple[list[str], list[str]]:
    """The finals and decisions resolved before `horizon_ms` (--resolved-retention ago): a table
    keeps them no longer."""
    return ([k for k, f in finals.items() if f.resolved_ms < horizon_ms],
            [k for k, d in decisions.items() if d.at_ms < horizon_ms])


def _scan(store: EngineStore, topic: str, start: int, end: int,
          batch_lock: Callable[[], ContextManager[object]] | None = None, batch: int = _BATCH
          ) -> Iterator[StoredMessage]:
    offset = start
    while offset < end:
        try:
            with batch_lock() if batch_lock is not None else nullcontext():
                read = store.read_queue(topic, 0, offset, min(batch, end - offset))
        except DataDeleted as gone:
            offset = gone.min_offset
            continue
        yield from read.messages
        if read.next_offset <= offset:
            break
        offset = read.next_offset


def _apply_half(out: RecoveredTable, known: dict[str, set[int]], half: StoredMessage,
                default_immunity_s: float, max_immunity_s: float) -> None:
    tx_id = half.properties.get(PROP_TRANSACTION_ID)
    if not tx_id or tx_id in out.finals:
        return
    tx = out.table.get(tx_id)
    if tx is None:
        created = prepared_ms(half)
        tx = out.table[tx_id] = Transaction(transaction_id=tx_id, producer_group=half.properties.get("PGROUP", ""),
                                            created_ms=created if created is not None else half.store_timestamp)
    seen = known.get(tx_id)
    if seen is None:
        seen = known[tx_id] = {h.physical_offset for h in tx.halves}
    if half.physical_offset in seen:
        return
    seen.add(half.physical_offset)
    tx.halves.append(half_ref_from_stored(half))
    if tx.cross is None:
        try:
            tx.cross = cross_group_of(half.properties)
        except BadRequest:  # the engine refused such halves: not written by it
            log.warning("half at %d names a malformed coordinator", half.physical_offset)
    created = prepared_ms(half)
    if created is not None:
        tx.created_ms = min(tx.created_ms, created)
    tx.immunity_ms = max(tx.immunity_ms, immunity_ms(stored_immunity_s(half), default_immunity_s, max_immunity_s))


def _apply_op(out: RecoveredTable, stored: StoredMessage) -> None:
    op = parse_op(stored)
    if op is None:
        log.warning("skipping unreadable op record at %d", stored.physical_offset)
        return
    if op.kind is OpKind.DECIDE:  # a coordinator's decision: the first one recorded wins
        assert op.decision is not None
        out.decisions.setdefault(op.transaction_id, Decision(Resolution[op.decision], op.participants, op.at_ms,
                                                                  senders=op.senders))
        return
    if op.transaction_id in out.finals:
        return
    if op.kind in (OpKind.COMMIT, OpKind.ROLLBACK):
        state = TxState.COMMITTED if op.kind is OpKind.COMMIT else TxState.ROLLED_BACK
        out.table.pop(op.transaction_id, None)
        out.finals[op.transaction_id] = FinalRecord(state, op.at_ms)
        return
    tx = out.table.get(op.transaction_id)
    if tx is None:
        return
    if op.kind is OpKind.DISCARD:
        tx.state = TxState.DISCARDED
    else:  # RESUME
        tx.state, tx.checks, tx.last_check_ms, tx.resumed_ms = TxState.PENDING, 0, 0, op.at_ms
