"""The method table of txmq's native service, `txmq.native.v1.TxmqService`."""

from __future__ import annotations

from txmq.broker.protocol import native_pb2
from txmq.broker.protocol.method_table import (STREAM_STREAM, STREAM_UNARY, UNARY_STREAM, UNARY_UNARY, Method,
                                               build_method_table)

SERVICE_NAME = "txmq.native.v1.TxmqService"

NativeMethod = Method
NATIVE_METHODS: tuple[Method, ...] = build_method_table(native_pb2, "TxmqService", SERVICE_NAME)
NATIVE_METHODS_BY_NAME: dict[str, Method] = {m.name: m for m in NATIVE_METHODS}

__all__ = ["SERVICE_NAME", "NATIVE_METHODS", "NATIVE_METHODS_BY_NAME", "NativeMethod",
           "UNARY_UNARY", "UNARY_STREAM", "STREAM_UNARY", "STREAM_STREAM"]
