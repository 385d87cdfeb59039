"""The broker process harness for tests: txmq's own EmbeddedBroker (kill() is SIGKILL, a crash)."""

from txmq.broker.embedded import EmbeddedBroker as BrokerProcess

__all__ = ["BrokerProcess"]
