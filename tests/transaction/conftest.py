"""Fixtures for the transaction engine's tests: a controllable clock, stores, engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from txmq.broker.store.message import Message
from txmq.broker.transaction import TransactionConfig, TransactionEngine

from .memory_store import MemoryStore


class FakeClock:
    """Seconds since the epoch, moved only by the test."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def msg(topic: str = "orders", body: bytes = b"x", queue_id: int = 0, **props: str) -> Message:
    return Message(topic=topic, body=body, queue_id=queue_id, properties=dict(props))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def memory_store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "data")


@pytest.fixture
def engine(memory_store: MemoryStore, clock: FakeClock) -> TransactionEngine:
    return TransactionEngine(memory_store, TransactionConfig(), clock=clock)
