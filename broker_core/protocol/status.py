"""The one table between txmq's typed errors and RocketMQ status codes.

Server side: `status_for(exc)` turns any exception into a `Status` (code +
a message that names the problem). Errors are matched by their class and then
their base classes, so a new subclass inherits its parent's code; anything that
is not a `TxmqError` is a bug or an environment failure and becomes
INTERNAL_ERROR with its message — a handler never lets an exception escape as a
bare gRPC failure the official clients cannot read.

Client side: `error_for(code, message)` turns a non-OK status back into the
same error class, so callers on both sides of the wire catch the same type.
"""

from __future__ import annotations

from txmq.broker import errors as e
from txmq.broker.protocol import rocketmq_v2_pb2 as pb

Code = pb.Code

# error class -> RocketMQ code. The order matters only for the reverse table:
# the first class listed for a code is what the client raises for it.
ERROR_CODES: tuple[tuple[type[Exception], int], ...] = (
    (e.IllegalTopic, Code.ILLEGAL_TOPIC),
    (e.IllegalConsumerGroup, Code.ILLEGAL_CONSUMER_GROUP),
    (e.IllegalMessageTag, Code.ILLEGAL_MESSAGE_TAG),
    (e.IllegalMessageKey, Code.ILLEGAL_MESSAGE_KEY),
    (e.IllegalPropertyKey, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (e.IllegalFilterExpression, Code.ILLEGAL_FILTER_EXPRESSION),
    (e.IllegalOffset, Code.ILLEGAL_OFFSET),
    (e.IllegalQueue, Code.BAD_REQUEST),
    (e.IllegalInvisibleTime, Code.ILLEGAL_INVISIBLE_TIME),
    (e.IllegalPollingTime, Code.ILLEGAL_POLLING_TIME),
    (e.IllegalDeliveryTime, Code.ILLEGAL_DELIVERY_TIME),
    (e.IllegalMessageId, Code.ILLEGAL_MESSAGE_ID),
    (e.InvalidReceiptHandle, Code.INVALID_RECEIPT_HANDLE),
    (e.InvalidRecallHandle, Code.BAD_REQUEST),
    (e.MessageBodyEmpty, Code.MESSAGE_BODY_EMPTY),
    (e.MessageBodyTooLarge, Code.MESSAGE_BODY_TOO_LARGE),
    (e.MessagePropertiesTooLarge, Code.MESSAGE_PROPERTIES_TOO_LARGE),
    (e.MessageCorrupted, Code.MESSAGE_CORRUPTED),
    (e.IllegalMessageGroup, Code.ILLEGAL_MESSAGE_GROUP),
    (e.PropertyConflictWithType, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (e.InvalidTransactionId, Code.INVALID_TRANSACTION_ID),
    (e.BadRequest, Code.BAD_REQUEST),
    (e.VersionUnsupported, Code.VERSION_UNSUPPORTED),
    (e.Unsupported, Code.UNSUPPORTED),
    (e.TopicNotFound, Code.TOPIC_NOT_FOUND),
    (e.ConsumerGroupNotFound, Code.CONSUMER_GROUP_NOT_FOUND),
    (e.MessageNotFound, Code.MESSAGE_NOT_FOUND),
    (e.OffsetNotFound, Code.OFFSET_NOT_FOUND),
    (e.DataDeleted, Code.ILLEGAL_OFFSET),
    (e.NotFound, Code.NOT_FOUND),
    # An unknown transaction id is a bad id from the client's point of view:
    # RocketMQ answers INVALID_TRANSACTION_ID for it.
    (e.UnknownTransaction, Code.INVALID_TRANSACTION_ID),
    (e.TransactionConflict, Code.PRECONDITION_FAILED),
    (e.TransactionAlreadyEnded, Code.PRECONDITION_FAILED),
    (e.TransactionError, Code.PRECONDITION_FAILED),
    (e.Unauthorized, Code.UNAUTHORIZED),
    (e.Forbidden, Code.FORBIDDEN),
    # QueueSealed/QueueMoved inherit it: the official clients refresh routes on a timer only (every 30 s), never
    # on a code, and on this one their producer retries the next queue after a back-off without isolating the broker
    (e.TooManyRequests, Code.TOO_MANY_REQUESTS),
    (e.ReplicationTimeout, Code.SLAVE_PERSISTENCE_TIMEOUT),
    (e.RequestTimeout, Code.REQUEST_TIMEOUT),
    (e.NotLeader, Code.HA_NOT_AVAILABLE),
    (e.NotEnoughReplicas, Code.HA_NOT_AVAILABLE),  # RocketMQ's SLAVE_NOT_AVAILABLE put status
    (e.CoordinatorUnavailable, Code.HA_NOT_AVAILABLE),  # after NotLeader: a bare code reads as NotLeader
    (e.BrokerUnavailable, Code.INTERNAL_ERROR),
    (e.StoreError, Code.INTERNAL_ERROR),
)

_CODE_BY_CLASS: dict[type[Exception], int] = {cls: code for cls, code in ERROR_CODES}
_CLASS_BY_CODE: dict[int, type[Exception]] = {}
for _cls, _code in ERROR_CODES:
    _CLASS_BY_CODE.setdefault(_code, _cls)
# Codes txmq never sends but a client may meet from another broker.
_CLASS_BY_CODE.setdefault(Code.NOT_FOUND, e.NotFound)
_CLASS_BY_CODE.setdefault(Code.PAYLOAD_TOO_LARGE, e.MessageBodyTooLarge)
_CLASS_BY_CODE.setdefault(Code.NOT_IMPLEMENTED, e.Unsupported)

SUCCESS_CODES = frozenset({Code.OK, Code.MULTIPLE_RESULTS})


def code_for(exc: BaseException) -> int:
    """The RocketMQ code of an exception: its class, else its nearest listed base, else INTERNAL_ERROR."""
    for cls in type(exc).__mro__:
        code = _CODE_BY_CLASS.get(cls)
        if code is not None:
            return code
    return Code.INTERNAL_ERROR


def message_for(exc: BaseException) -> str:
    """The status message: the error's own text, prefixed by its class when the text is empty or foreign."""
    text = str(exc)
    if isinstance(exc, e.TxmqError):
        return text or type(exc).__name__
    return f"internal error: {type(exc).__name__}: {text}" if text else f"internal error: {type(exc).__name__}"


def ok(message: str = "OK") -> pb.Status:
    return pb.Status(code=Code.OK, message=message)


def status(code: int, message: str) -> pb.Status:
    return pb.Status(code=code, message=message)


def status_for(exc: BaseException) -> pb.Status:
    """The Status a handler returns for an exception it caught."""
    return pb.Status(code=code_for(exc), message=message_for(exc))


def error_for(code: int, message: str) -> Exception:
    """The txmq error a client raises for a non-success status (TxmqError for unknown codes)."""
    cls = _CLASS_BY_CODE.get(code, e.TxmqError)
    if cls is e.DataDeleted:
        return e.IllegalOffset(message)
    if cls is e.TransactionAlreadyEnded:
        return e.TransactionConflict(message)
    return cls(message)


def raise_for(status_msg: pb.Status) -> None:
    """Raise the matching txmq error unless the status is a success."""
    if status_msg.code not in SUCCESS_CODES:
        raise error_for(status_msg.code, status_msg.message)
