"""A write the broker may have stored is never sent twice by the client.

If a broker stores a prepare and dies before answering, re-sending it would
store the halves twice and a COMMIT would show duplicates. These tests use a
real gRPC server on loopback that accepts a call, records it and then drops
the connection without answering — the one moment a real broker can't be
killed at on demand.
"""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from txmq.broker import errors
from txmq.broker.client import Message, NativeClient
from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.protocol.native_methods import NATIVE_METHODS_BY_NAME, SERVICE_NAME


class DroppingServer:
    """Records each call of `method`; the first one's answer is lost (UNAVAILABLE), later ones succeed."""

    def __init__(self, method: str, response) -> None:
        self.calls = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        spec = NATIVE_METHODS_BY_NAME[method]

        def handle(request, context):
            self.calls += 1
            if self.calls == 1:
                context.abort(grpc.StatusCode.UNAVAILABLE, "connection lost after the request arrived")
            return response

        handler = grpc.unary_unary_rpc_method_handler(handle, request_deserializer=spec.request_class.FromString,
                                                      response_serializer=spec.response_class.SerializeToString)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME,
                                                                                   {method: handler}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def close(self) -> None:
        self.server.stop(None)


@pytest.fixture
def dropping_prepare():
    server = DroppingServer("PrepareMessages", pb.PrepareResponse())
    yield server
    server.close()


def test_prepare_that_loses_its_answer_is_not_sent_again(dropping_prepare: DroppingServer) -> None:
    with NativeClient(f"127.0.0.1:{dropping_prepare.port}", timeout_s=5) as client:
        with pytest.raises(errors.BrokerUnavailable):
            client.prepare("tx-1", [Message("orders", b"x")], producer_group="g", sender="s")
    assert dropping_prepare.calls == 1


def test_send_that_loses_its_answer_is_not_sent_again() -> None:
    server = DroppingServer("SendMessages", pb.SendResponse())
    try:
        with NativeClient(f"127.0.0.1:{server.port}", timeout_s=5) as client:
            with pytest.raises(errors.BrokerUnavailable):
                client.send([Message("orders", b"x")])
        assert server.calls == 1
    finally:
        server.close()


def test_idempotent_call_is_retried_after_losing_its_answer() -> None:
    """EndTransaction is idempotent: re-sending it after a lost answer is safe and the client does."""
    server = DroppingServer("EndTransaction", pb.EndTransactionResponse(status=pb.Status(code=20000),
                                                                        state="COMMITTED"))
    try:
        with NativeClient(f"127.0.0.1:{server.port}", timeout_s=5) as client:
            client.end_transaction("tx-1", "COMMIT")
        assert server.calls == 2
    finally:
        server.close()
