"""Fixtures for store tests: small segments, queue files and index files so rolls happen with little data."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from txmq.broker.store import MessageStore
from tests.store._helpers import small_config


@pytest.fixture
def open_store(tmp_path: Path) -> Callable[..., MessageStore]:
    """open_store(**config overrides) -> a store on tmp_path/store, closed at the end of the test."""
    opened: list[MessageStore] = []

    def factory(**overrides) -> MessageStore:
        store = MessageStore(small_config(tmp_path / "store", **overrides))
        opened.append(store)
        return store

    yield factory
    for s in opened:
        s.close()
