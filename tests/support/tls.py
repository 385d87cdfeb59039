"""A throwaway TLS certificate for tests: the broker's own generator (the openssl CLI)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from txmq.broker.server.listen_port import generated_certificate


def self_signed(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1 and localhost; the test is skipped without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    return generated_certificate(Path(directory), [])
