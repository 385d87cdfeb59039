"""A write the broker may have stored is never sent twice by the client.

If a broker stores a prepare and dies before answering, re-sending it would
store the halves twice and a COMMIT would show duplicates. These tests use
real gRPC and Flight servers on loopback that accept a call, record it and then
drop it without answering — the one moment a real broker can't be killed at on
demand. Idempotent calls (a read, ending a transaction) are asked again instead.
"""

from __future__ import annotations

from concurrent import futures

import grpc
import pyarrow.flight as flight
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
    """A read (GetTransaction) is idempotent: re-sending it after a lost answer is safe and the client does."""
    view = pb.TransactionView(transaction_id="tx-1", state="PENDING")
    server = DroppingServer("GetTransaction", pb.GetTransactionResponse(status=pb.Status(code=20000),
                                                                        transaction=view))
    try:
        with NativeClient(f"127.0.0.1:{server.port}", timeout_s=5) as client:
            assert client.get_transaction("tx-1").state == "PENDING"
        assert server.calls == 2
    finally:
        server.close()


class DroppingDataPlane:
    """A control channel that names a Flight data plane whose first end-transaction action loses its
    answer (UNAVAILABLE) after recording it; later ones are answered COMMITTED."""

    def __init__(self) -> None:
        from txmq.broker.protocol.native_arrow import END_TRANSACTION_ACTION

        self.requests: list[pb.EndTransactionRequest] = []
        plane = self

        class Flight(flight.FlightServerBase):
            def do_action(self, context, action):
                assert action.type == END_TRANSACTION_ACTION
                plane.requests.append(pb.EndTransactionRequest.FromString(action.body.to_pybytes()))
                if len(plane.requests) == 1:
                    raise flight.FlightUnavailableError("connection lost after the request arrived")
                answer = pb.EndTransactionResponse(status=pb.Status(code=20000), state="COMMITTED", newly_ended=False)
                return [flight.Result(answer.SerializeToString())]

        self.flight = Flight("grpc://127.0.0.1:0")
        self.control = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        spec = NATIVE_METHODS_BY_NAME["DataPlane"]
        located = pb.DataPlaneResponse(status=pb.Status(code=20000), flight_host="127.0.0.1",
                                       flight_port=self.flight.port)
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context: located,
                                                      request_deserializer=spec.request_class.FromString,
                                                      response_serializer=spec.response_class.SerializeToString)
        self.control.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME,
                                                                                    {"DataPlane": handler}),))
        self.port = self.control.add_insecure_port("127.0.0.1:0")
        self.control.start()

    def close(self) -> None:
        self.control.stop(None)
        self.flight.shutdown()


def test_an_end_transaction_that_loses_its_answer_is_asked_again() -> None:
    """Ending a transaction is idempotent (a repeat is acknowledged, nothing written twice): the
    client asks again when the data plane's answer was lost, and returns the second answer."""
    plane = DroppingDataPlane()
    try:
        with NativeClient(f"127.0.0.1:{plane.port}", timeout_s=5) as client:
            summary = client.end_transaction("tx-1", "COMMIT")
        assert summary.state == "COMMITTED"
        assert [r.transaction_id for r in plane.requests] == ["tx-1", "tx-1"]
        assert {r.resolution for r in plane.requests} == {pb.COMMIT}
    finally:
        plane.close()
