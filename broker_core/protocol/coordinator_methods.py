"""The method table of the cross-group transaction coordinator, `txmq.coordinator.v1.TransactionCoordinator`."""

from __future__ import annotations

from txmq.broker.protocol import coordinator_pb2
from txmq.broker.protocol.method_table import Method, build_method_table

SERVICE_NAME = "txmq.coordinator.v1.TransactionCoordinator"

COORDINATOR_METHODS: tuple[Method, ...] = build_method_table(coordinator_pb2, "TransactionCoordinator", SERVICE_NAME)

__all__ = ["SERVICE_NAME", "COORDINATOR_METHODS"]
