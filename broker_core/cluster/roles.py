"""Client calls to a replica, routed by its role: served (the leader), forwarded to the
leader (a follower), or refused as unavailable (while an election or a promotion runs).

A follower forwards each RocketMQ or native call as raw bytes with its metadata, so a
client given any replica's endpoint, the official RocketMQ clients included, works
with the group whichever replica leads (RocketMQ 5's proxy forwards the same way).
Bulk data moves over the leader's Flight service, which clients find with the
forwarded DataPlane call.

A RocketMQ Telemetry stream (where an official client receives check-backs) is relayed,
not passed through once: when the leader changes, the relay opens it again at the new
leader (this replica itself, over loopback, once it leads) and repeats the client's
latest Settings, so the new leader registers the client's session at once. The official
clients open a Telemetry stream when they first use an endpoint list and open it again
only when a settings sync fails (every 5 min in the Python client): a stream ended by a
failover would leave their transactions unchecked that long.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, Iterable, Iterator

import grpc
from google.protobuf.message import DecodeError

from txmq.broker.protocol.method_table import STREAM_STREAM, STREAM_UNARY, UNARY_STREAM, UNARY_UNARY, Method
from txmq.broker.protocol.coordinator_methods import COORDINATOR_METHODS
from txmq.broker.protocol.native_methods import NATIVE_METHODS
from txmq.broker.protocol import rocketmq_v2_pb2
from txmq.broker.protocol.refusing import refusing, unprocessed
from txmq.broker.protocol.rocketmq_methods import ROCKETMQ_METHODS, SERVICE_NAME as ROCKETMQ_SERVICE

log = logging.getLogger(__name__)

CLIENT_METHODS: tuple[Method, ...] = tuple(ROCKETMQ_METHODS) + tuple(NATIVE_METHODS) + tuple(COORDINATOR_METHODS)
_HOP_HEADERS = ("user-agent", "grpc-", ":")
TELEMETRY_PATH = f"/{ROCKETMQ_SERVICE}/Telemetry"
RELAY_REBIND_S = 30.0  # how long a relayed Telemetry stream waits for a leader before it ends
# what ends a leg to the leader without ending the relay: the leader went away or changed
_LEG_LOST = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED,
             grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)


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


def _is_settings(command: bytes) -> bool:
    try:
        return rocketmq_v2_pb2.TelemetryCommand.FromString(command).WhichOneof("command") == "settings"
    except DecodeError:  # not ours to judge: the leader answers it
        return False


class _TelemetryRelay:
    """One client's Telemetry stream, relayed to whichever replica leads (see the module doc)."""

    def __init__(self, upstream: Callable[[], grpc.Channel | None], requests: Iterable[bytes], context) -> None:
        self._upstream = upstream
        self._context = context
        self._metadata = _forwarded_metadata(context)
        self._lock = threading.Lock()
        self._settings: bytes | None = None  # the client's latest Settings, repeated to a new leader
        self._leg: queue.SimpleQueue | None = None  # the requests of the leg to the leader now
        self._client_done = False
        self._reader = threading.Thread(target=self._read, args=(requests,), name="txmq-telemetry-relay",
                                        daemon=True)
        self._reader.start()

    def _read(self, requests: Iterable[bytes]) -> None:
        try:
            for command in requests:
                with self._lock:
                    if _is_settings(command):
                        self._settings = command
                    if self._leg is not None:
                        self._leg.put(command)
        except Exception:  # the client went away
            pass
        finally:
            with self._lock:
                self._client_done = True
                if self._leg is not None:
                    self._leg.put(None)

    def responses(self) -> Iterator[bytes]:
        waiting_since = time.monotonic()
        while self._context.is_active():
            channel = self._upstream()
            if channel is None:  # an election: wait for the next leader
                if time.monotonic() - waiting_since > RELAY_REBIND_S:
                    self._context.abort(grpc.StatusCode.UNAVAILABLE, "the group has no leader")
                time.sleep(0.1)
                continue
            leg: queue.SimpleQueue = queue.SimpleQueue()
            with self._lock:
                if self._client_done:
                    return
                if self._settings is not None:
                    leg.put(self._settings)
                self._leg = leg
            call = channel.stream_stream(TELEMETRY_PATH)(iter(leg.get, None), metadata=self._metadata)
            self._context.add_callback(call.cancel)
            try:
                yield from call
                if self._client_done:
                    return  # the client ended its stream and the leader answered everything
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNAVAILABLE
                if code not in _LEG_LOST:
                    self._context.abort(code, exc.details() if isinstance(exc, grpc.Call) else str(exc))
            except ValueError:  # the channel was closed under the call (a role change)
                pass
            finally:
                with self._lock:
                    self._leg = None
                leg.put(None)
            log.info("a relayed Telemetry stream lost its leader: opening it at the next one")
            waiting_since = time.monotonic()
            time.sleep(0.05)


def _telemetry_relay_handler(upstream: Callable[[], grpc.Channel | None]) -> grpc.RpcMethodHandler:
    def relay(requests: Iterable[bytes], context):
        yield from _TelemetryRelay(upstream, requests, context).responses()
    return grpc.stream_stream_rpc_method_handler(relay)


def _unavailable_handler(method: Method, reason: str) -> grpc.RpcMethodHandler:
    """A refusal before the call is handled: the client may send it to another replica."""
    return refusing(method.kind in (STREAM_STREAM, STREAM_UNARY), method.kind in (STREAM_STREAM, UNARY_STREAM),
                    grpc.StatusCode.UNAVAILABLE, unprocessed(reason))


class RoleRouter(grpc.GenericRpcHandler):
    """The client services of a replica's gRPC server, swapped whole when its role changes."""

    def __init__(self, channel_to: Callable[[str], grpc.Channel]) -> None:
        """`channel_to(endpoint)`: a channel to a peer replica (TLS when the replicas serve it)."""
        self._by_path: dict[str, grpc.RpcMethodHandler] = {}
        self._channel: grpc.Channel | None = None
        self._channel_to = channel_to
        self._relay = _telemetry_relay_handler(lambda: self._channel)
        self.role = "starting"
        self.unavailable("the replica is starting")

    def service(self, handler_call_details):
        return self._by_path.get(handler_call_details.method)

    def serve(self, services: dict[str, dict[str, grpc.RpcMethodHandler]], itself: str | None = None) -> None:
        """This replica leads: its own services answer. Telemetry streams relayed while it
        followed go on, to `itself` over loopback (new ones are served here directly)."""
        self._by_path = {f"/{service}/{name}": h for service, handlers in services.items()
                         for name, h in handlers.items()}
        self.role = "leader"
        self._close_channel()
        if itself is not None:
            self._channel = self._channel_to(itself)

    def forward_to(self, endpoint: str) -> None:
        """This replica follows `endpoint`: every client call goes there."""
        self._close_channel()
        self._channel = self._channel_to(endpoint)
        self._by_path = {m.path: _forwarding_handler(self._channel, m, endpoint) for m in CLIENT_METHODS}
        self._by_path[TELEMETRY_PATH] = self._relay
        self.role = "follower"

    def unavailable(self, reason: str) -> None:
        self._by_path = {m.path: _unavailable_handler(m, reason) for m in CLIENT_METHODS}
        self.role = "unavailable"
        self._close_channel()

    def _close_channel(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            channel.close()
