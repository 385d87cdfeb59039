"""One table maps every typed error to a RocketMQ code, and back for the client."""

from __future__ import annotations

import inspect

import pytest

from txmq.broker import errors
from txmq.broker.protocol import rocketmq_v2_pb2 as pb
from txmq.broker.protocol import status

ALL_ERRORS = [c for _, c in inspect.getmembers(errors, inspect.isclass)
              if issubclass(c, errors.TxmqError) and c is not errors.TxmqError]


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
def test_every_error_class_has_a_specific_code(cls):
    exc = cls.__new__(cls)
    Exception.__init__(exc, "why")
    code = status.code_for(exc)
    assert code != pb.CODE_UNSPECIFIED
    assert pb.Code.Name(code)


def test_specific_codes():
    assert status.code_for(errors.IllegalTopic("x")) == pb.ILLEGAL_TOPIC
    assert status.code_for(errors.UnknownTransaction("x")) == pb.INVALID_TRANSACTION_ID
    assert status.code_for(errors.TransactionConflict("x")) == pb.PRECONDITION_FAILED
    assert status.code_for(errors.InvalidReceiptHandle("x")) == pb.INVALID_RECEIPT_HANDLE
    assert status.code_for(errors.MessageBodyTooLarge("x")) == pb.MESSAGE_BODY_TOO_LARGE
    assert status.code_for(errors.Unauthorized("x")) == pb.UNAUTHORIZED
    assert status.code_for(errors.Forbidden("x")) == pb.FORBIDDEN


def test_unknown_exception_becomes_internal_error_with_its_message():
    s = status.status_for(KeyError("boom"))
    assert s.code == pb.INTERNAL_ERROR
    assert "KeyError" in s.message and "boom" in s.message


def test_client_side_maps_codes_back_to_error_classes():
    assert isinstance(status.error_for(pb.ILLEGAL_TOPIC, "m"), errors.IllegalTopic)
    assert isinstance(status.error_for(pb.UNAUTHORIZED, "m"), errors.Unauthorized)
    assert isinstance(status.error_for(pb.PRECONDITION_FAILED, "m"), errors.TransactionConflict)
    assert type(status.error_for(12345, "m")) is errors.TxmqError
    status.raise_for(status.ok())
    with pytest.raises(errors.TopicNotFound):
        status.raise_for(status.status(pb.TOPIC_NOT_FOUND, "gone"))
