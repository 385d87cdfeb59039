"""TransactionProducer: RocketMQ's transactional producer (listener model), over the native service.

1. the messages are stored as halves of a new transaction (invisible);
2. `listener.execute_local_transaction(message, arg)` runs the producer's local
   transaction and answers COMMIT, ROLLBACK or UNKNOWN (an exception = UNKNOWN);
3. COMMIT/ROLLBACK end the transaction at once; UNKNOWN leaves it to the
   broker, which later asks `listener.check_local_transaction(...)` through
   the check-back session this producer keeps open while it is started.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Protocol, Sequence

from txmq.broker.client._connection import client_for
from txmq.broker.client.checkback import CheckbackSession
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import (
    CheckRequest,
    LocalTransactionState,
    Message,
    ReceivedMessage,
    TransactionalMessage,
    TransactionSendResult,
)

log = logging.getLogger(__name__)


class TransactionListener(Protocol):
    def execute_local_transaction(self, message: Any, arg: Any) -> LocalTransactionState | str: ...

    def check_local_transaction(self, message_or_tx: ReceivedMessage | CheckRequest) -> LocalTransactionState | str: ...


class TransactionProducer:
    """Sends messages in transactions and answers the broker's check-backs while started."""

    def __init__(self, broker: NativeClient | str, producer_group: str, listener: TransactionListener, *,
                 topics: Sequence[str] = (), sender: str = "", **client_kwargs: Any) -> None:
        if not producer_group:
            raise ValueError("a TransactionProducer needs a producer group (check-backs are routed by it)")
        self.client, self._owned = client_for(broker, **client_kwargs)
        self.producer_group = producer_group
        self.listener = listener
        self.topics = list(topics)
        self.sender = sender or self.client.client_id
        self.session: CheckbackSession | None = None

    def start(self, *, wait_registered_s: float = 10.0) -> "TransactionProducer":
        """Open the check-back session (waits until the broker has registered it)."""
        if self.session is None:
            self.session = self.client.checkback_session(self.producer_group, self.topics, self._on_check)
            self.session.wait_registered(wait_registered_s)
        return self

    def shutdown(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
        if self._owned:
            self.client.close()

    def __enter__(self) -> "TransactionProducer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _on_check(self, request: CheckRequest) -> LocalTransactionState:
        subject = request.message if request.message is not None else request
        return LocalTransactionState.parse(self.listener.check_local_transaction(subject))

    def send_message_in_transaction(self, message: Message, arg: Any = None) -> TransactionSendResult:
        """One message in one transaction (RocketMQ's sendMessageInTransaction)."""
        return self._run([message], arg, single=True)

    def send_messages_in_transaction(self, messages: Iterable[Message], arg: Any = None) -> TransactionSendResult:
        """Many messages, one transaction: all become visible together or none does.

        The listener's execute_local_transaction receives the list of messages.
        """
        return self._run(list(messages), arg, single=False)

    def _run(self, messages: list[Message], arg: Any, *, single: bool) -> TransactionSendResult:
        if not messages:
            raise ValueError("no messages to send in a transaction")
        prepared = self.client.prepare("", messages, producer_group=self.producer_group, sender=self.sender)
        tx_id = prepared.transaction_id
        views = [TransactionalMessage(topic=m.topic, body=m.body, tag=m.tag, keys=m.keys, properties=m.properties,
                                      sharding_key=m.sharding_key, message_id=msg_id or m.message_id,
                                      transaction_id=tx_id)
                 for m, msg_id in zip(messages, prepared.message_ids or [None] * len(messages))]
        try:
            local = LocalTransactionState.parse(
                self.listener.execute_local_transaction(views[0] if single else views, arg))
        except Exception:
            log.exception("execute_local_transaction failed for %s: leaving it to check-back", tx_id)
            local = LocalTransactionState.UNKNOWN
        if local in (LocalTransactionState.UNKNOWN, LocalTransactionState.IN_PROGRESS):  # left to check-back
            return TransactionSendResult(tx_id, local, "PENDING", prepared.count)
        ended = self.client.end_transaction(tx_id, local.value, producer_group=self.producer_group)
        return TransactionSendResult(tx_id, local, ended.state, prepared.count)
