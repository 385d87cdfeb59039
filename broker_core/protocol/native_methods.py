"""The method table of txmq's native service, `txmq.native.v1.TxmqService`.

Server and client both build on this table instead of grpc_python_out stubs:
the server registers one generic handler from it, the client makes one
callable per row. It is derived from the service descriptor in native.proto, so
adding an RPC to the .proto (and regenerating) adds it here.
"""

from __future__ import annotations

from typing import NamedTuple

from txmq.broker.protocol import native_pb2

SERVICE_NAME = "txmq.native.v1.TxmqService"

UNARY_UNARY = "unary_unary"
UNARY_STREAM = "unary_stream"
STREAM_UNARY = "stream_unary"
STREAM_STREAM = "stream_stream"


class NativeMethod(NamedTuple):
    """One RPC: its full gRPC path, protobuf classes and streaming kind."""

    path: str
    request_class: type
    response_class: type
    kind: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[1]


def _kind(client_streaming: bool, server_streaming: bool) -> str:
    return {
        (False, False): UNARY_UNARY,
        (False, True): UNARY_STREAM,
        (True, False): STREAM_UNARY,
        (True, True): STREAM_STREAM,
    }[(client_streaming, server_streaming)]


def _build_table() -> tuple[NativeMethod, ...]:
    service = native_pb2.DESCRIPTOR.services_by_name["TxmqService"]
    rows = []
    for method in service.methods:
        rows.append(NativeMethod(
            path=f"/{SERVICE_NAME}/{method.name}",
            request_class=getattr(native_pb2, method.input_type.name),
            response_class=getattr(native_pb2, method.output_type.name),
            kind=_kind(method.client_streaming, method.server_streaming),
        ))
    return tuple(rows)


NATIVE_METHODS: tuple[NativeMethod, ...] = _build_table()
NATIVE_METHODS_BY_NAME: dict[str, NativeMethod] = {m.name: m for m in NATIVE_METHODS}
