"""Shared pytest fixtures: a real broker process on loopback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support importable
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from tests.support.broker_process import BrokerProcess  # noqa: E402


@pytest.fixture
def broker(tmp_path: Path):
    """A broker process (sync flush) on a free port, stopped cleanly at the end."""
    with BrokerProcess(tmp_path / "broker") as proc:
        yield proc


def _compiled_or_numpy(request, monkeypatch, module, threshold: str, available: bool) -> str:
    """Point `module`'s size threshold for its compiled path at 1 (the compiled path for any
    size) or past anything a test makes (the numpy path always), as request.param says."""
    if request.param == "compiled" and not available:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(module, threshold, 1 if request.param == "compiled" else 1 << 62)
    return request.param


@pytest.fixture(params=["compiled", "numpy"])
def decode_path(request, monkeypatch):
    """Which decode builds this process's pulls (store/pull_decode_kernel.py): the compiled one
    wherever it can, or the numpy one always. Use it as `usefixtures("decode_path")`."""
    from txmq.broker.store import pull_decode_kernel as pull_kernel

    return _compiled_or_numpy(request, monkeypatch, pull_kernel, "COMPILED_MIN_ROWS",
                              pull_kernel.compiled_available())


@pytest.fixture(params=["compiled", "numpy"])
def block_encoder(request, monkeypatch):
    """Which encoder writes this process's record blocks (store/record_block.py): the compiled
    loop for any block, or the numpy steps always. Use it as `usefixtures("block_encoder")`."""
    from txmq.broker.store import record_block

    return _compiled_or_numpy(request, monkeypatch, record_block, "COMPILED_MIN_RECORDS",
                              record_block._compiled() is not None)


@pytest.fixture(params=["compiled", "numpy"])
def source_scan(request, monkeypatch):
    """Which reader takes apart the sources of large copies (store/record_copy.py): the compiled
    scan, or numpy (what a process without numba does). Use it as `usefixtures("source_scan")`."""
    from txmq.broker.store import record_copy

    if request.param == "compiled" and record_copy._compiled_scan() is None:
        pytest.skip("numba is not installed")
    if request.param == "numpy":
        monkeypatch.setattr(record_copy, "_compiled_scan", lambda: None)
    return request.param
