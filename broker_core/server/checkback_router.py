"""Routes the engine's check-back requests to a live producer session.

The transaction engine decides *when* a transaction needs a check-back; this
router decides *who* gets it: only a producer that can know the answer, as
Apache's broker and proxy do. Sessions (RocketMQ Telemetry streams, native
check-back streams) register here with their producer group and topics, and a
transaction's producer group (the PGROUP of its halves) names who may be asked:
only live sessions of that very group are candidates.

RocketMQ 5 clients declare no producer group. On a broker without auth their
transactions and their sessions have the group "": as Apache's proxy registers
such a producer under each topic it publishes (and stamps its halves with the
topic as PGROUP), one of them is asked when it publishes a topic of the
transaction. With auth both carry the account's first producer group. A native
producer declares its group (TransactionProducer requires one), so it is never
asked about an official client's transaction, nor about another group's.

Among the candidates a check goes, in order, to:
1. a live session of a client that sent halves of this transaction,
2. a live session of the transaction's producer group (when it has one),
3. a live session that publishes to one of the transaction's topics.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

from txmq.broker.store.message import Message, StoredMessage
from txmq.broker.transaction.state import TransactionInfo


class CheckbackSession(Protocol):
    client_id: str  # "" when the client sent none: then only its group and topics route to it
    producer_group: str
    topics: set[str]

    @property
    def alive(self) -> bool: ...

    def push(self, tx: TransactionInfo, half: StoredMessage | Message) -> bool: ...


class CheckbackRouter:
    """Implements the engine's `CheckbackListener` over registered sessions."""

    MAX_REMEMBERED_SENDERS = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: list[CheckbackSession] = []
        # transaction id -> client ids that sent its halves (bounded, oldest forgotten first)
        self._senders: OrderedDict[str, set[str]] = OrderedDict()
        self._rotation = 0
        self.delivered = 0
        self.undeliverable = 0

    # --- registration -------------------------------------------------------

    def register(self, session: CheckbackSession) -> None:
        with self._lock:
            if session not in self._sessions:
                self._sessions.append(session)

    def unregister(self, session: CheckbackSession) -> None:
        with self._lock:
            if session in self._sessions:
                self._sessions.remove(session)

    def sessions(self) -> list[CheckbackSession]:
        with self._lock:
            return [s for s in self._sessions if s.alive]

    def note_half(self, transaction_id: str, client_id: str, topic: str) -> None:
        """Remember who sent a half (route 1) and teach that client's sessions the topic (route 3)."""
        if not client_id:
            return
        with self._lock:
            senders = self._senders.get(transaction_id)
            if senders is None:
                senders = self._senders[transaction_id] = set()
                while len(self._senders) > self.MAX_REMEMBERED_SENDERS:
                    self._senders.popitem(last=False)
            senders.add(client_id)
            for s in self._sessions:
                if s.client_id == client_id:
                    s.topics.add(topic)

    def forget(self, transaction_id: str) -> None:
        """The transaction ended: nobody needs to be asked about it any more."""
        with self._lock:
            self._senders.pop(transaction_id, None)

    # --- CheckbackListener ----------------------------------------------------

    def candidates(self, tx: TransactionInfo) -> list[CheckbackSession]:
        """Live sessions that may answer for `tx`, best first."""
        group = tx.producer_group
        topics = set(tx.topics)
        with self._lock:
            live = [s for s in self._sessions if s.alive]
            senders = self._senders.get(tx.transaction_id, set())
            self._rotation += 1
            rotation = self._rotation
        # producer groups isolate, the empty one too (RocketMQ 5 clients without auth)
        live = [s for s in live if (s.producer_group or "") == group]
        if live:  # spread checks over equivalent sessions
            k = rotation % len(live)
            live = live[k:] + live[:k]
        by_sender = [s for s in live if s.client_id in senders]
        by_group = [s for s in live if group and s.producer_group == group and s not in by_sender]
        by_topic = [s for s in live if s not in by_sender and s not in by_group and s.topics & topics]
        found = by_sender + by_group + by_topic
        assert all((s.producer_group or "") == group for s in found), "producer groups isolate"
        return found

    def request_check(self, tx: TransactionInfo, half: StoredMessage | Message) -> bool:
        """Push one check to the best live session; False when nobody could take it."""
        for session in self.candidates(tx):
            try:
                if session.push(tx, half):
                    self.delivered += 1
                    return True
            except Exception:  # a broken session must not stop the check-back round
                continue
        self.undeliverable += 1
        return False
