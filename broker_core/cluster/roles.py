"""Client calls to a replica, routed by its role: served (the leader), forwarded to the
leader (a follower), or refused as unavailable (while an election or a promotion runs).

A follower forwards each RocketMQ or native call as raw bytes with its metadata, so a
client given any replica's endpoint, the official RocketMQ clients included, works
with the group whichever replica leads (RocketMQ 5's proxy forwards the same way).
Bulk data moves over the leader's Flight service, which clients find with the
forwarded DataPlane call.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

import grpc

from txmq.broker.protocol.method_table import STREAM_STREAM, STREAM_UNARY, UNARY_STREAM, UNARY_UNARY, Method
from txmq.broker.protocol.coordinator_methods import COORDINATOR_METHODS
from txmq.broker.protocol.native_methods import NATIVE_METHODS
from txmq.broker.protocol.rocketmq_methods import ROCKETMQ_METHODS

log = logging.getLogger(__name__)

CLIENT_METHODS: tuple[Method, ...] = tuple(ROCKETMQ_METHODS) + tuple(NATIVE_METHODS) + tuple(COORDINATOR_METHODS)
_HOP_HEADERS = ("user-agent", "grpc-", ":")


def _forwarded_metadata(context: grpc.ServicerContext) -> list[tuple[str, str | bytes]]:
    return [(k, v) for k, v in context.invocation_metadata() if not k.startswith(_HOP_HEADERS)]


def _deadline(context: grpc.ServicerContext) -> float | None:
    """The forwarded call's timeout: what the client's deadline leaves, or none when it set none
    (gRPC then reports a meaningless remainder that would end a long-lived stream at once)."""
    left = context.time_remaining()
    return left if left is not None and 0 < left < 10 ** 6 else None


def _abort_from(context: grpc.ServicerContext, exc: grpc.RpcError, endpoint: str):
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNAVAILABLE
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    context.abort(code, f"{details} (forwarded to the group's leader {endpoint})")


def _forwarding_handler(channel: grpc.Channel, method: Method, endpoint: str) -> grpc.RpcMethodHandler:
    """A handler passing a call's bytes to the same method on `channel` and the answer back."""
    path = method.path
    if method.kind == UNARY_UNARY:
        call = channel.unary_unary(path)

        def unary(request: bytes, context):
            try:
                return call(request, metadata=_forwarded_metadata(context), timeout=_deadline(context))
            except grpc.RpcError as exc:
                _abort_from(context, exc, endpoint)
        return grpc.unary_unary_rpc_method_handler(unary)
    if method.kind == UNARY_STREAM:
        call = channel.unary_stream(path)

        def server_stream(request: bytes, context):
            try:
                yield from call(request, metadata=_forwarded_metadata(context), timeout=_deadline(context))
            except grpc.RpcError as exc:
                _abort_from(context, exc, endpoint)
        return grpc.unary_stream_rpc_method_handler(server_stream)
    if method.kind == STREAM_STREAM:
        call = channel.stream_stream(path)

        def bidi(requests: Iterable[bytes], context):
            upstream = call(requests, metadata=_forwarded_metadata(context))
            context.add_callback(upstream.cancel)  # the client went away: end the leg to the leader
            try:
                yield from upstream
            except grpc.RpcError as exc:
                _abort_from(context, exc, endpoint)
        return grpc.stream_stream_rpc_method_handler(bidi)
    assert method.kind == STREAM_UNARY
    call = channel.stream_unary(path)

    def client_stream(requests: Iterable[bytes], context):
        try:
            return call(requests, metadata=_forwarded_metadata(context), timeout=_deadline(context))
        except grpc.RpcError as exc:
            _abort_from(context, exc, endpoint)
    return grpc.stream_unary_rpc_method_handler(client_stream)


def _unavailable_handler(method: Method, reason: str) -> grpc.RpcMethodHandler:
    def refuse(request, context):
        context.abort(grpc.StatusCode.UNAVAILABLE, reason)

    if method.kind == UNARY_UNARY:
        return grpc.unary_unary_rpc_method_handler(refuse)
    if method.kind == UNARY_STREAM:
        return grpc.unary_stream_rpc_method_handler(refuse)
    if method.kind == STREAM_STREAM:
        return grpc.stream_stream_rpc_method_handler(refuse)
    return grpc.stream_unary_rpc_method_handler(refuse)


class RoleRouter(grpc.GenericRpcHandler):
    """The client services of a replica's gRPC server, swapped whole when its role changes."""

    def __init__(self, channel_to: Callable[[str], grpc.Channel]) -> None:
        """`channel_to(endpoint)`: a channel to a peer replica (TLS when the replicas serve it)."""
        self._by_path: dict[str, grpc.RpcMethodHandler] = {}
        self._channel: grpc.Channel | None = None
        self._channel_to = channel_to
        self.role = "starting"
        self.unavailable("the replica is starting")

    def service(self, handler_call_details):
        return self._by_path.get(handler_call_details.method)

    def serve(self, services: dict[str, dict[str, grpc.RpcMethodHandler]]) -> None:
        """This replica leads: its own services answer."""
        self._by_path = {f"/{service}/{name}": h for service, handlers in services.items()
                         for name, h in handlers.items()}
        self.role = "leader"
        self._close_channel()

    def forward_to(self, endpoint: str) -> None:
        """This replica follows `endpoint`: every client call goes there."""
        self._close_channel()
        self._channel = self._channel_to(endpoint)
        self._by_path = {m.path: _forwarding_handler(self._channel, m, endpoint) for m in CLIENT_METHODS}
        self.role = "follower"

    def unavailable(self, reason: str) -> None:
        self._by_path = {m.path: _unavailable_handler(m, reason) for m in CLIENT_METHODS}
        self.role = "unavailable"
        self._close_channel()

    def _close_channel(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            channel.close()
