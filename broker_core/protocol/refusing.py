"""A gRPC handler that refuses a call with one status, shaped like the handler it stands in for
(server interceptors use it: auth, the native wire's version check; a replica between roles)."""

from __future__ import annotations

import grpc

# Ends the details of an UNAVAILABLE given before anything of the call was handled (a replica
# between roles, or one that cannot reach its leader): a client may send even a write that is not
# idempotent to another replica, as when no connection could be made at all.
UNPROCESSED_MARK = "[not processed]"


def unprocessed(reason: str) -> str:
    return f"{reason} {UNPROCESSED_MARK}"


def was_unprocessed(details: str | None) -> bool:
    return UNPROCESSED_MARK in (details or "")


def refusing(request_streaming: bool, response_streaming: bool, code: grpc.StatusCode,
             message: str) -> grpc.RpcMethodHandler:
    def deny(request, context):
        context.abort(code, message)

    if request_streaming and response_streaming:
        return grpc.stream_stream_rpc_method_handler(lambda it, ctx: deny(None, ctx))
    if request_streaming:
        return grpc.stream_unary_rpc_method_handler(lambda it, ctx: deny(None, ctx))
    if response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)


def refusing_handler(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    return refusing(handler.request_streaming, handler.response_streaming, code, message)
