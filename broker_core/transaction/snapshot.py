"""A compact, crash-safe snapshot of the transaction table.

Why: without it, recovery would replay the whole history of the half and op
queues. A snapshot records the table (pending and discarded transactions with
their half references, plus the ids of committed/rolled-back ones) together
with the half/op queue offsets it covers; recovery loads it and replays only
the queues' tail. The trade-off: the resolved-id map costs memory and snapshot
time proportional to the transactions resolved within `resolved_retention_s`,
and a repeat of an id older than that gets UnknownTransaction.

The two newest snapshots are kept. In async flush mode a crash can lose a store
tail that a snapshot already covers; recovery then falls back to the older
snapshot (or to a full replay) — a snapshot is used only if both queues still
reach the offsets it covers (a crash truncates a suffix of the log, so that
proves every record it covers survived).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from txmq.broker.store.durable import write_bytes_atomically

from .decision import CrossGroup, Decision
from .state import FinalRecord, HalfRef, HalfRefs, Resolution, Transaction, TxState

_PREFIX = "txtable-"
_SUFFIX = ".json"
_KEEP = 2
_STATE_CODES = {TxState.PENDING: "P", TxState.DISCARDED: "D", TxState.COMMITTED: "C", TxState.ROLLED_BACK: "R"}
_CODE_STATES = {v: k for k, v in _STATE_CODES.items()}


@dataclass
class TableSnapshot:
    half_offset: int  # half-queue offset covered (exclusive)
    op_offset: int  # op-queue offset covered (exclusive)
    written_ms: int
    transactions: list[Transaction] = field(default_factory=list)  # as loaded
    rows: list[list] = field(default_factory=list)  # as captured for writing (encode_tx)
    finals: dict[str, FinalRecord] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)  # held as a cross-group coordinator
    seq: int = 0


def encode_tx(tx: Transaction) -> list:
    """A transaction as a plain row, captured while the table is held, so it must be cheap: its
    halves are captured as the chunks they are (HalfRefs.captured: nothing per half), and only
    the writer, outside the lock, turns them into arrays in HalfRef's field order. A Spark
    micro-batch of a million halves is captured in microseconds; building a list per half took
    0.75 s, during which every prepare and EndTransaction waited."""
    row = [tx.transaction_id, _STATE_CODES[tx.state], tx.producer_group, tx.created_ms, tx.immunity_ms,
           tx.checks, tx.last_check_ms, tx.resumed_ms, tx.halves.captured()]
    if tx.cross is not None:  # two more columns, only on cross-group transactions
        row += [tx.cross.coordinator, list(tx.cross.participants)]
    return row


def _decode_tx(row: list) -> Transaction:
    tx_id, code, group, created, immunity, checks, last_check, resumed, halves, *cross = row
    return Transaction(
        cross=CrossGroup(cross[0], tuple(cross[1])) if cross else None,
        transaction_id=tx_id, producer_group=group, state=_CODE_STATES[code], created_ms=created,
        immunity_ms=immunity, checks=checks, last_check_ms=last_check, resumed_ms=resumed,
        halves=HalfRefs(HalfRef(p, s, q, t, qid, snd) for p, s, q, t, qid, snd in halves))


def _halves_as_rows(obj: object) -> list:
    """The JSON encoder's hook for what encode_tx captured: a transaction's halves as rows."""
    if isinstance(obj, HalfRefs):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not part of a snapshot")


def write_snapshot(state_dir: Path, snap: TableSnapshot) -> Path:
    """Write atomically (temp file, fsync, rename, fsync dir) and prune older snapshots."""
    state_dir.mkdir(parents=True, exist_ok=True)
    snap.seq = _newest_seq(state_dir) + 1
    doc = {
        "version": 1, "seq": snap.seq, "half_offset": snap.half_offset, "op_offset": snap.op_offset,
        "written_ms": snap.written_ms,
        "transactions": snap.rows,
        "finals": {k: [_STATE_CODES[f.state], f.resolved_ms] for k, f in snap.finals.items()},
        "decisions": {k: [d.resolution.name, d.at_ms, list(d.participants),
                          list(d.senders) if d.senders is not None else None] for k, d in snap.decisions.items()},
    }
    path = state_dir / f"{_PREFIX}{snap.seq:012d}{_SUFFIX}"
    text = json.dumps(doc, separators=(",", ":"), default=_halves_as_rows)  # the C encoder (not json.dump's)
    write_bytes_atomically(path, text.encode("utf-8"))
    for old in _snapshot_paths(state_dir)[:-_KEEP]:
        old.unlink(missing_ok=True)
    return path


def load_snapshots(state_dir: Path) -> list[TableSnapshot]:
    """Readable snapshots, newest first (a corrupt file is skipped, never trusted)."""
    found = []
    for path in reversed(_snapshot_paths(state_dir)):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            found.append(TableSnapshot(
                half_offset=doc["half_offset"], op_offset=doc["op_offset"], written_ms=doc["written_ms"],
                transactions=[_decode_tx(row) for row in doc["transactions"]],
                finals={k: FinalRecord(_CODE_STATES[c], ms) for k, (c, ms) in doc["finals"].items()},
                decisions={k: Decision(Resolution[r], tuple(groups), ms,
                                       senders=tuple(rest[0]) if rest and rest[0] is not None else None)
                           for k, (r, ms, groups, *rest) in doc.get("decisions", {}).items()},
                seq=doc["seq"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def _snapshot_paths(state_dir: Path) -> list[Path]:
    if not state_dir.is_dir():
        return []
    return sorted(p for p in state_dir.iterdir() if p.name.startswith(_PREFIX) and p.name.endswith(_SUFFIX))


def _newest_seq(state_dir: Path) -> int:
    paths = _snapshot_paths(state_dir)
    return int(paths[-1].name[len(_PREFIX):-len(_SUFFIX)]) if paths else 0




def drop_snapshots(state_dir: Path) -> int:
    """Delete every snapshot (a replica's log was cut back: the queue offsets they cover may hold
    other records now, and recovery must replay the queues instead). Returns how many went."""
    paths = _snapshot_paths(state_dir)
    for path in paths:
        path.unlink(missing_ok=True)
    return len(paths)
