"""Method tables: each RPC of a service as (path, request class, response class, kind).

txmq serves and calls its gRPC services from these tables instead of
grpc_python_out stubs: the server registers one generic handler per service,
the client makes one callable per row. A table is derived from the service
descriptor in the generated module, so adding an RPC to a .proto (and
regenerating) adds its row. The path may name a service other than the proto's
own (the RocketMQ service is served as `apache.rocketmq.v2.MessagingService`):
gRPC routes on the path alone.
"""

from __future__ import annotations

from types import ModuleType
from typing import NamedTuple

UNARY_UNARY = "unary_unary"
UNARY_STREAM = "unary_stream"
STREAM_UNARY = "stream_unary"
STREAM_STREAM = "stream_stream"

_KINDS = {(False, False): UNARY_UNARY, (False, True): UNARY_STREAM,
          (True, False): STREAM_UNARY, (True, True): STREAM_STREAM}


class Method(NamedTuple):
    """One RPC: its full gRPC path, protobuf classes and streaming kind."""

    path: str
    request_class: type
    response_class: type
    kind: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[1]


def build_method_table(pb2: ModuleType, proto_service: str, served_as: str) -> tuple[Method, ...]:
    """The rows of `proto_service` (a service in `pb2`), with paths under `served_as`."""
    service = pb2.DESCRIPTOR.services_by_name[proto_service]
    # the descriptor names each message class; generated modules are only reachable by those names
    return tuple(
        Method(path=f"/{served_as}/{m.name}",
               request_class=getattr(pb2, m.input_type.name),
               response_class=getattr(pb2, m.output_type.name),
               kind=_KINDS[(m.client_streaming, m.server_streaming)])
        for m in service.methods
    )
