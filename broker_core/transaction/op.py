"""Op records: the durable resolution of a transaction.

Every change of a transaction's state after its prepare is one record in
`RMQ_SYS_TRANS_OP_HALF_TOPIC` queue 0. RocketMQ writes one op per half with the
half's queue offset as body; txmq resolves a whole (multi-half) transaction at
once, so its op body names the transaction and the operation instead:

    {"tx": "<id>", "op": "COMMIT"|"ROLLBACK"|"DISCARD"|"RESUME",
     "senders": [..] | null, "halves": <count>, "ms": <engine time>}

`senders` is set on a COMMIT restricted with include_senders: only those
senders' halves were made visible, the rest were rolled back by the same record.

A coordinator group's decision for a cross-group transaction (decision.py) is an op
record too, DECIDE, with `"decision": "COMMIT"|"ROLLBACK"` and `"groups": [..]` (the
participants). It lives in the op queue so that recovery, snapshots and followers carry
it exactly as they carry the table, and it changes nothing in the table. A cross-group
transaction's COMMIT and ROLLBACK ops carry `"groups"` too, for a reader's cluster-wide cut.
Recovery replays these records in queue order to rebuild the table.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from txmq.broker.store.message import (
    OP_HALF_TOPIC,
    PROP_TAGS,
    PROP_TRANSACTION_ID,
    Message,
    StoredMessage,
)

OP_TAG = "d"  # RocketMQ's REMOVETAG on op records


class OpKind(enum.Enum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    DISCARD = "DISCARD"
    RESUME = "RESUME"
    DECIDE = "DECIDE"


@dataclass(frozen=True)
class OpRecord:
    transaction_id: str
    kind: OpKind
    senders: tuple[str, ...] | None
    half_count: int
    at_ms: int
    decision: str | None = None  # DECIDE only: "COMMIT" or "ROLLBACK"
    participants: tuple[str, ...] = ()  # cross-group: the participant groups (on DECIDE, COMMIT and ROLLBACK)


def build_op(op: OpRecord) -> Message:
    assert (op.kind is OpKind.DECIDE) == (op.decision in ("COMMIT", "ROLLBACK")), "a decision is a DECIDE's alone"
    body = {"tx": op.transaction_id, "op": op.kind.value,
            "senders": list(op.senders) if op.senders is not None else None,
            "halves": op.half_count, "ms": op.at_ms}
    if op.kind is OpKind.DECIDE:
        body["decision"] = op.decision
    if op.participants:  # a reader's cluster-wide cut finds a cross-group commit's other groups here
        body["groups"] = list(op.participants)
    return Message(
        topic=OP_HALF_TOPIC,
        body=json.dumps(body, separators=(",", ":")).encode(),
        queue_id=0,
        properties={PROP_TRANSACTION_ID: op.transaction_id, PROP_TAGS: OP_TAG},
        born_timestamp=op.at_ms,
    )


def parse_op(stored: StoredMessage | Message) -> OpRecord | None:
    """Decode an op record; None for a record that is not one of ours (skipped by recovery)."""
    try:
        body = json.loads(stored.body)
        senders = body.get("senders")
        kind = OpKind(body["op"])
        decision = str(body["decision"]) if kind is OpKind.DECIDE else None
        if kind is OpKind.DECIDE and decision not in ("COMMIT", "ROLLBACK"):
            return None
        return OpRecord(
            transaction_id=str(body["tx"]),
            kind=kind,
            senders=tuple(senders) if senders is not None else None,
            half_count=int(body.get("halves", 0)),
            at_ms=int(body.get("ms", 0)),
            decision=decision,
            participants=tuple(body.get("groups") or ()),
        )
    except (ValueError, KeyError, TypeError):
        return None
