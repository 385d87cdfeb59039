"""Lab tests need root and `ip netns`; without them they are skipped, saying why."""

from __future__ import annotations

import pytest

from lab import hosts


@pytest.fixture(scope="session")
def lab_available() -> None:
    reason = hosts.available()
    if reason is not None:
        pytest.skip(reason)
    hosts.cleanup_stale()


@pytest.fixture
def lab(lab_available, request):
    """A fresh lab named after the test, removed after it."""
    with hosts.Lab("t") as made:
        yield made
