"""The method table of the RocketMQ 5 service, `apache.rocketmq.v2.MessagingService`.

txmq's message classes live in the proto package `txmq.rocketmq.v2` (so the
official client, which registers `apache.rocketmq.v2`, can share a process),
but the service is served and called under RocketMQ's own name: gRPC routes on
the method path, so a generic handler with these paths is wire-identical to
RocketMQ's.
"""

from __future__ import annotations

from txmq.broker.protocol import rocketmq_v2_pb2
from txmq.broker.protocol.method_table import (STREAM_STREAM, STREAM_UNARY, UNARY_STREAM, UNARY_UNARY, Method,
                                               build_method_table)

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"

RocketMQMethod = Method
ROCKETMQ_METHODS: tuple[Method, ...] = build_method_table(rocketmq_v2_pb2, "MessagingService", SERVICE_NAME)
ROCKETMQ_METHODS_BY_NAME: dict[str, Method] = {m.name: m for m in ROCKETMQ_METHODS}

__all__ = ["SERVICE_NAME", "ROCKETMQ_METHODS", "ROCKETMQ_METHODS_BY_NAME", "RocketMQMethod",
           "UNARY_UNARY", "UNARY_STREAM", "STREAM_UNARY", "STREAM_STREAM"]
