"""The method table of the RocketMQ 5 service, `apache.rocketmq.v2.MessagingService`.

txmq's message classes live in the proto package `txmq.rocketmq.v2` (so the
official client, which registers `apache.rocketmq.v2`, can share a process),
but the service is served and called under RocketMQ's own name: gRPC routes on
the method path, so a generic handler with these paths is wire-identical to
RocketMQ's. The table is derived from the service descriptor in
rocketmq_v2.proto; no grpc_python_out stubs exist.
"""

from __future__ import annotations

from typing import NamedTuple

from txmq.broker.protocol import rocketmq_v2_pb2

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"

UNARY_UNARY = "unary_unary"
UNARY_STREAM = "unary_stream"
STREAM_UNARY = "stream_unary"
STREAM_STREAM = "stream_stream"


class RocketMQMethod(NamedTuple):
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


def _build_table() -> tuple[RocketMQMethod, ...]:
    service = rocketmq_v2_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    return tuple(
        RocketMQMethod(
            path=f"/{SERVICE_NAME}/{m.name}",
            request_class=getattr(rocketmq_v2_pb2, m.input_type.name),
            response_class=getattr(rocketmq_v2_pb2, m.output_type.name),
            kind=_kind(m.client_streaming, m.server_streaming),
        )
        for m in service.methods
    )


ROCKETMQ_METHODS: tuple[RocketMQMethod, ...] = _build_table()
ROCKETMQ_METHODS_BY_NAME: dict[str, RocketMQMethod] = {m.name: m for m in ROCKETMQ_METHODS}
