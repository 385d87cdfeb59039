"""Check-back: asking producers about transactions they left unresolved.

Each round takes the transactions that are due (older than their immunity, and
not checked within the interval) from the engine's due-heap, so a round costs
the due transactions, never the history of the half queue. Nothing is
re-appended to the store to track progress (RocketMQ re-puts each checked half,
which filled disks in #1519/#6655): check counts live in the table and its
snapshot. A round hands at most `max_checks_per_round` transactions to the
listener (a bounded queue); the rest stay due for the next round.

For each due transaction: older than the orphan timeout → discarded; checked
`max_checks` times → discarded; otherwise the listener is asked to deliver a
check to a live producer. A delivered check burns one of the transaction's
checks; an undelivered one does not (no producer was there to answer).

A cross-group transaction (decision.py) asks its coordinator group first: a decision
there is applied at once; with none, the producer is asked as above, and its answer
(an EndTransaction) is recorded at the coordinator before it is applied; a discard
records ROLLBACK there first. While the coordinator cannot be reached the transaction
stays pending and is tried again next interval: nothing is resolved without it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from txmq.broker.store.message import Message, StoredMessage

from txmq.broker.errors import CoordinatorUnavailable

from .config import TransactionConfig
from .engine import TransactionEngine
from .state import Transaction, TransactionInfo

log = logging.getLogger(__name__)


class CheckbackListener(Protocol):
    def request_check(self, tx: TransactionInfo, half: StoredMessage | Message) -> bool:
        """Deliver a check-back to a producer of the transaction; True if one got it."""


@dataclass(frozen=True)
class CheckRound:
    checked: int = 0  # delivered to a producer
    undelivered: int = 0
    discarded: int = 0
    decided: int = 0  # cross-group: resolved as their coordinator had decided
    coordinator_down: int = 0  # cross-group: left pending, the coordinator could not be asked
    more_due: bool = False  # the round stopped at max_checks_per_round
    seconds: float = 0.0


class CheckbackService:
    def __init__(self, engine: TransactionEngine, listener: CheckbackListener,
                 config: TransactionConfig | None = None) -> None:
        self.engine = engine
        self.listener = listener
        self.config = config or engine.config
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> CheckRound:
        started = time.monotonic()
        now = self.engine.now_ms()
        limit = self.config.max_checks_per_round
        claimed = self.engine.claim_due(now, limit)
        checked = undelivered = discarded = decided = coordinator_down = 0
        retry_ms = now + int(self.config.check_interval_s * 1000)
        for tx in claimed:
            try:
                if tx.cross is not None and self._apply_coordinator_decision(tx):
                    decided += 1
                    continue
                verdict = self.engine.check_verdict(tx, now)
                if verdict.startswith("discard"):
                    if self.engine.discard(tx.transaction_id, reason=verdict.split(":", 1)[1]):
                        discarded += 1
                    continue
                delivered = self._deliver(tx)
                self.engine.record_check(tx, delivered, now)
                checked += delivered
                undelivered += not delivered
            except CoordinatorUnavailable as exc:  # pending it stays: asked again next interval
                log.warning("check-back of cross-group transaction %s: %s", tx.transaction_id, exc)
                coordinator_down += 1
                self.engine.release_claim(tx, retry_ms)
            except Exception:  # e.g. the discard's store append failed: try again next interval
                log.exception("check-back of transaction %s failed", tx.transaction_id)
                self.engine.release_claim(tx, retry_ms)
        self.engine.maybe_snapshot()
        return CheckRound(checked, undelivered, discarded, decided, coordinator_down, len(claimed) >= limit,
                          time.monotonic() - started)

    def _apply_coordinator_decision(self, tx: Transaction) -> bool:
        """Resolve a pending cross-group transaction as its coordinator decided; False when it has
        not decided (the producer is asked then). CoordinatorUnavailable propagates."""
        decision = self.engine.coordinator_decision(tx)
        if decision is None:
            return False
        self.engine.end(tx.transaction_id, decision.resolution, source="coordinator",
                        include_senders=decision.senders)
        self.engine.metrics.count("coordinator_answers")
        return True

    def _deliver(self, tx) -> bool:
        try:
            return bool(self.listener.request_check(self.engine.info(tx), self.engine.first_half(tx)))
        except Exception:  # a listener failure must not stop check-back for everyone else
            log.exception("check-back listener failed for transaction %s", tx.transaction_id)
            return False

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="txmq-checkback", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.run_once().more_due
            except Exception:
                log.exception("check-back round failed")
                busy = False
            if not busy:
                self._stop.wait(self.config.check_interval_s)
