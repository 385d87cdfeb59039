"""A gRPC handler that refuses a call with one status, shaped like the handler it stands in for
(server interceptors use it: auth, the native wire's version check)."""

from __future__ import annotations

import grpc


def refusing_handler(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    def deny(request, context):
        context.abort(code, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(lambda it, ctx: deny(None, ctx))
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(lambda it, ctx: deny(None, ctx))
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)
