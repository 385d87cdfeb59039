"""The native wire's version check: a native call from a client whose version this broker cannot
serve is refused (FAILED_PRECONDITION) with both versions named, before any handler runs.

The client sends its version and the oldest it serves in headers (txmq.broker.versions); a client
of a release before versions sends none and speaks version 1.
"""

from __future__ import annotations

import grpc

from txmq.broker import versions
from txmq.broker.protocol.native_methods import SERVICE_NAME
from txmq.broker.protocol.refusing import refusing_handler

_PREFIX = f"/{SERVICE_NAME}/"


def client_headers() -> list[tuple[str, str]]:
    """What a native client sends on every call."""
    return [(versions.NATIVE_WIRE_HEADER, str(versions.NATIVE.version)),
            (versions.NATIVE_WIRE_OLDEST_HEADER, str(versions.NATIVE.oldest))]


def refusal(metadata) -> str | None:
    """Why a native call with these headers is refused, or None."""
    found = {key: value for key, value in metadata or () if key.startswith("x-txmq-native-")}
    try:
        peer = versions.Speaks.from_wire(int(found.get(versions.NATIVE_WIRE_HEADER, 0)),
                                         int(found.get(versions.NATIVE_WIRE_OLDEST_HEADER, 0)))
    except ValueError:
        return f"the {versions.NATIVE_WIRE_HEADER} header is not a number: {found}"
    if versions.compatible(versions.NATIVE, peer):
        return None
    return (f"this client speaks native wire {peer}; this broker speaks {versions.NATIVE}: "
            f"use a txmq client of a release next to the broker's")


class NativeVersionInterceptor(grpc.ServerInterceptor):
    def intercept_service(self, continuation, handler_call_details):
        if not handler_call_details.method.startswith(_PREFIX):
            return continuation(handler_call_details)
        message = refusal(handler_call_details.invocation_metadata)
        if message is None:
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        return refusing_handler(handler, grpc.StatusCode.FAILED_PRECONDITION, message)
