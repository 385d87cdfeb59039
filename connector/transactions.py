"""Transaction ids, senders and states shared by the sink and the foreachBatch helper.

A micro-batch's transaction id is a pure function of (sink id, batch id,
generation), so a batch replayed after a restart finds the transaction of its
first run. The generation moves on only past a transaction that can never
commit (rolled back, or discarded after unanswered check-backs): at most one
generation of a batch ever commits, and a committed one stops the probe.
"""

from __future__ import annotations

import os

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


def transaction_id(sink_id: str, batch_id: int, generation: int) -> str:
    return f"{sink_id}-b{int(batch_id)}-g{int(generation)}"


def parse_transaction_id(tx_id: str) -> tuple[str, int, int] | None:
    """(sink id, batch id, generation) of an id made by `transaction_id`, else None."""
    try:
        head, gen = tx_id.rsplit("-g", 1)
        sink, batch = head.rsplit("-b", 1)
        return sink, int(batch), int(gen)
    except ValueError:
        return None


def run_nonce() -> str:
    """Distinguishes this driver run's task attempts from a dead run's (same partition, same attempt)."""
    return os.urandom(4).hex()


def sender_name(partition: int, attempt: int, nonce: str) -> str:
    return f"p{partition}.a{attempt}.{nonce}"


def probe(client: TransactionClient, sink_id: str, batch_id: int, *, start_generation: int = 0,
          participants: tuple[str, ...] = ()) -> tuple[str, int, str | None]:
    """The batch's live transaction: (id, generation, state or None if not started yet).

    Skips generations that ended without committing. With `participants` (a batch across
    broker groups), a generation's state is its coordinator's decision.
    """
    gen = start_generation
    while True:
        tx = transaction_id(sink_id, batch_id, gen)
        try:
            info = client.get_transaction(tx, participants=participants)
        except UnknownTransaction:
            return tx, gen, None
        state = state_name(info.state)
        if state not in DEAD_STATES:
            return tx, gen, state
        gen += 1
