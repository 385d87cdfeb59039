"""Errors ⇄ the native service's `Status`, on top of the one table in status.py.

The code comes from `status.code_for` (so native and RocketMQ answers agree);
the native Status also names the error class and carries the fields some
errors need (`DataDeleted.min_offset`, `TransactionAlreadyEnded.state`, `QueueMoved.moved_to`), so the
client re-raises the exact class, not only one that shares its code.
"""

from __future__ import annotations

from txmq.broker import errors
from txmq.broker.protocol import native_pb2
from txmq.broker.protocol import status as status_table

OK_CODE = int(status_table.Code.OK)


def ok_status() -> native_pb2.Status:
    return native_pb2.Status(code=OK_CODE, message="OK")


def status_for(exc: BaseException) -> native_pb2.Status:
    """The native Status for an exception a handler caught."""
    result = native_pb2.Status(code=int(status_table.code_for(exc)), message=status_table.message_for(exc))
    if isinstance(exc, errors.TxmqError):
        result.error_class = type(exc).__name__
    if isinstance(exc, errors.DataDeleted):
        result.min_offset = exc.min_offset
    if isinstance(exc, errors.TransactionAlreadyEnded):
        result.state = exc.state
    if isinstance(exc, errors.QueueMoved):
        result.moved_to = exc.moved_to
    return result


def error_from(status: native_pb2.Status) -> Exception:
    """The exception a client raises for a non-OK native Status."""
    # the wire names the class: a lookup by name in errors.py, where every typed error lives
    cls = getattr(errors, status.error_class, None) if status.error_class else None
    if isinstance(cls, type) and issubclass(cls, errors.TxmqError):
        if cls is errors.DataDeleted or issubclass(cls, errors.DataDeleted):
            return cls(status.message, min_offset=status.min_offset)
        if cls is errors.TransactionAlreadyEnded or issubclass(cls, errors.TransactionAlreadyEnded):
            return cls(status.message, state=status.state)
        if issubclass(cls, errors.QueueMoved):
            return cls(status.message, moved_to=status.moved_to)
        try:
            return cls(status.message)
        except TypeError:
            pass
    return status_table.error_for(status.code, status.message)


def raise_for(status: native_pb2.Status) -> None:
    if status.code not in status_table.SUCCESS_CODES:
        raise error_from(status)
