"""Typed errors of the broker core.

Every refusal the broker can give is one of these classes. They know nothing of
gRPC: `txmq.broker.protocol.status` maps each class to a RocketMQ status code in
one table, and the client library maps codes back to these classes, so a caller
on either side of the wire catches the same exception type.

Each error's message names the problem (which field, which value, which limit)
because the message is what a user sees in a failed Spark job or a CLI call.
"""

from __future__ import annotations


class TxmqError(Exception):
    """Base of every txmq error."""


# --- bad input -----------------------------------------------------------------


class BadRequest(TxmqError):
    """The request is malformed or a required field is missing."""


class IllegalTopic(BadRequest):
    """The topic name breaks RocketMQ's rules, or names a system topic."""


class IllegalConsumerGroup(BadRequest):
    """The consumer group name breaks RocketMQ's naming rules."""


class IllegalMessageTag(BadRequest):
    """The tag is empty, too long or contains a separator character."""


class IllegalMessageKey(BadRequest):
    """A message key is empty or contains a separator character."""


class IllegalPropertyKey(BadRequest):
    """A user property name is reserved or contains a separator character."""


class IllegalFilterExpression(BadRequest):
    """A tag (or SQL) filter expression cannot be parsed.

    `position` is the 0-based offset of the problem in the expression when known
    (SQL92 filters); the message names it too, since only the message crosses the wire.
    """

    def __init__(self, message: str, *, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class IllegalOffset(BadRequest):
    """A queue offset is negative or beyond the queue's end."""


class IllegalQueue(BadRequest):
    """A queue id does not exist for the topic."""


class IllegalInvisibleTime(BadRequest):
    """An invisible duration is out of the accepted range."""


class IllegalPollingTime(BadRequest):
    """A long-polling timeout is out of the accepted range."""


class IllegalDeliveryTime(BadRequest):
    """A delivery time / delay level was set where it is not allowed (e.g. transactional messages)."""


class InvalidRecallHandle(BadRequest):
    """A recall handle that no send of a timer message to this topic gave out."""


class IllegalMessageId(BadRequest):
    """A message id cannot be decoded."""


class InvalidReceiptHandle(BadRequest):
    """A receipt handle is malformed, expired or was superseded."""


class MessageBodyEmpty(BadRequest):
    """The message body is empty."""


class MessageBodyTooLarge(BadRequest):
    """The message body exceeds the configured maximum (default 4 MiB)."""


class MessagePropertiesTooLarge(BadRequest):
    """The encoded properties exceed the maximum (32 KiB, the short length field's range)."""


class MessageCorrupted(BadRequest):
    """A body digest does not match the body."""


class IllegalMessageGroup(BadRequest):
    """A FIFO message group is blank, too long or contains a control character."""


class PropertyConflictWithType(BadRequest):
    """Message properties conflict with its declared type (e.g. a message group on a NORMAL message)."""


class Unsupported(TxmqError):
    """The request asks for a feature this broker does not provide."""


class VersionUnsupported(Unsupported):
    """A peer speaks a wire version this side cannot serve (txmq.broker.versions)."""


# --- not found -----------------------------------------------------------------


class NotFound(TxmqError):
    """Base for lookups that found nothing."""


class TopicNotFound(NotFound):
    """The topic does not exist (and auto-creation is off)."""


class ConsumerGroupNotFound(NotFound):
    """The consumer group does not exist."""


class MessageNotFound(NotFound):
    """No message with that id or key."""


class OffsetNotFound(NotFound):
    """No committed offset for that group and queue."""


class DataDeleted(NotFound):
    """The requested queue offsets were deleted by retention.

    Distinct from other errors so a reader can choose to fail (Spark's
    failOnDataLoss=true) or to skip ahead to `min_offset`.
    """

    def __init__(self, message: str, *, min_offset: int) -> None:
        super().__init__(message)
        self.min_offset = min_offset


# --- transactions --------------------------------------------------------------


class TransactionError(TxmqError):
    """Base for refusals of the transaction engine."""


class UnknownTransaction(TransactionError):
    """No transaction with that id is known (never prepared, or forgotten by retention)."""


class InvalidTransactionId(TransactionError, BadRequest):
    """The transaction id is malformed (empty, too long, bad characters)."""


class TransactionConflict(TransactionError):
    """The requested resolution contradicts the transaction's final state.

    COMMIT after ROLLBACK or discard, ROLLBACK after COMMIT: refused, nothing written.
    """


class CoordinatorUnavailable(TransactionError):
    """The coordinator group of a cross-group transaction could not be reached (or has no leader):
    nothing was resolved on this participant, which stays pending. Retry; check-back retries too."""


class TransactionAlreadyEnded(TransactionError):
    """Halves were added to a transaction that is already committed, rolled back or discarded.

    The Spark sink relies on this: a replayed batch's halves are refused because
    its transaction committed the first time.
    """

    def __init__(self, message: str, *, state: str) -> None:
        super().__init__(message)
        self.state = state


# --- access --------------------------------------------------------------------


class Unauthorized(TxmqError):
    """Credentials are missing, unknown, stale or their signature is wrong."""


class Forbidden(TxmqError):
    """The credentials are valid but lack the permission for this resource."""


# --- server state --------------------------------------------------------------


class TooManyRequests(TxmqError):
    """The broker sheds load (a bounded queue is full)."""


class QueueReserved(TooManyRequests):
    """A write that may not wait found its queue reserved by a large COMMIT being written
    (a split group, see store/split_group.py); nothing was written. Retry shortly."""


class QueueSealed(TooManyRequests):
    """A new write to a queue that a move between groups sealed here (cluster/moves.py): nothing
    was written; the queue takes writes on its new group (refresh the routes and retry)."""


class CopyOutOfStep(IllegalOffset):
    """A history copy's batch did not start at its queue's written end (cluster/copier.py): nothing
    was written; the copier resumes from `written` (a batch is never appended twice)."""

    def __init__(self, message: str, *, written: int = 0) -> None:
        super().__init__(message)
        self.written = written


class QueueMoved(QueueSealed):
    """A write to, or a read of the end of, a queue whose move to another group is done
    (cluster/moves.py): `moved_to` names that group. Nothing was written; the caller's routes are
    stale: refresh them at once and ask the new group."""

    def __init__(self, message: str, *, moved_to: str = "") -> None:
        super().__init__(message)
        self.moved_to = moved_to


class RequestTimeout(TxmqError):
    """The operation did not complete within its deadline."""


class NotLeader(TxmqError):
    """A replica that does not lead its group (a follower, or a leader fenced by a lost lease)
    refused a write, or the acknowledgement of one it had written before it was fenced (then
    indeterminate, as a ReplicationTimeout); the message names the leader when one is known."""


class NotEnoughReplicas(TxmqError):
    """A write under `sync` replication was refused before it was stored: fewer followers are in
    sync than --min-insync asks for (Kafka's NotEnoughReplicas). Nothing was written; retry once
    a follower has caught up."""


class ReplicationTimeout(RequestTimeout):
    """A write under `sync` replication was stored by the leader but not confirmed by enough
    in-sync followers in time: it may or may not survive a failover (retry it)."""


class BrokerUnavailable(TxmqError):
    """The broker cannot be reached or is shutting down (client side)."""


class BrokerUnreachable(BrokerUnavailable):
    """No endpoint of the broker could be connected to: the call was never sent (client side),
    so a write may safely go elsewhere."""


class StoreError(TxmqError):
    """An I/O failure or an invariant violation inside the store: the broker is unhealthy."""


class StoreFormatUnsupported(StoreError):
    """A data directory holds a store format this release cannot read (txmq.broker.versions)."""
