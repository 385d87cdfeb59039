"""Transaction ids, senders and states shared by the sink and the foreachBatch helper.

A micro-batch's transaction id is a pure function of (sink id, batch id,
generation), so a batch replayed after a restart finds the transaction of its
first run. The generation moves on only past a transaction that can never
commit (rolled back, or discarded after unanswered check-backs): at most one
generation of a batch ever commits, and a committed one stops the probe.

A sink batch across broker groups has one transaction per participant list its
tasks wrote with (a *part*; the list is in the id), since the list fixes the
coordinator: a queue move between two tasks gives the batch two parts, which the
driver commits under one batch decision (sink.py, BatchDecisions).
"""

from __future__ import annotations

import os
import re
import zlib
from typing import Sequence

from txmq.broker.errors import UnknownTransaction

from .client_seam import TransactionClient

COMMITTED = "COMMITTED"
PENDING = "PENDING"
ROLLED_BACK = "ROLLED_BACK"
DISCARDED = "DISCARDED"
DEAD_STATES = (ROLLED_BACK, DISCARDED)


def state_name(state: str) -> str:
    """A transaction state as the client reports it (TransactionInfo.state, TransactionAlreadyEnded.state),
    upper-case and without an enum's class prefix."""
    return state.upper().split(".")[-1]


_TX_ID = re.compile(r"(?P<sink>.+)-b(?P<batch>[0-9]+)-g(?P<gen>[0-9]+)(?:-p[0-9a-f]{8})?")


def transaction_id(sink_id: str, batch_id: int, generation: int, participants: Sequence[str] = ()) -> str:
    """With `participants` (a batch across broker groups), the id of the batch's part written with
    that list: tasks that read different lists write to different transactions."""
    base = f"{sink_id}-b{int(batch_id)}-g{int(generation)}"
    if not participants:
        return base
    return f"{base}-p{zlib.crc32(','.join(sorted(participants)).encode()):08x}"


def parse_transaction_id(tx_id: str) -> tuple[str, int, int] | None:
    """(sink id, batch id, generation) of an id made by `transaction_id`, else None."""
    match = _TX_ID.fullmatch(tx_id)
    if match is None:
        return None
    return match["sink"], int(match["batch"]), int(match["gen"])


def run_nonce() -> str:
    """Distinguishes this driver run's task attempts from a dead run's (same partition, same attempt)."""
    return os.urandom(4).hex()


def sender_name(partition: int, attempt: int, nonce: str) -> str:
    return f"p{partition}.a{attempt}.{nonce}"


def probe(client: TransactionClient, sink_id: str, batch_id: int, *, start_generation: int = 0,
          participants: tuple[str, ...] = ()) -> tuple[str, int, str | None]:
    """The batch's live transaction: (id, generation, state or None if not started yet).

    Skips generations that ended without committing. With `participants` (a batch across
    broker groups), the transaction is the batch's part written with that list, and a
    generation's state is its coordinator's decision.
    """
    gen = start_generation
    while True:
        tx = transaction_id(sink_id, batch_id, gen, participants)
        try:
            info = client.get_transaction(tx, participants=participants)
        except UnknownTransaction:
            return tx, gen, None
        state = state_name(info.state)
        if state not in DEAD_STATES:
            return tx, gen, state
        gen += 1
