"""Interop fixtures: the official rocketmq-python-client runs in its own venv and process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RMQ_PYTHON = ROOT / ".venv-rocketmq" / "bin" / "python"
CLIENT = Path(__file__).resolve().parent / "clients" / "rmq.py"


def official_client_available() -> bool:
    if not RMQ_PYTHON.exists():
        return False
    r = subprocess.run([str(RMQ_PYTHON), "-c", "import rocketmq"], capture_output=True)
    return r.returncode == 0


def pytest_collection_modifyitems(config, items):
    if official_client_available():
        return
    skip = pytest.mark.skip(reason="official client not installed: run `make interop-venv`")
    for item in items:
        if "interop" in item.keywords and str(item.fspath).startswith(str(Path(__file__).parent)):
            item.add_marker(skip)


def run_client(endpoint: str, *args: str, ak: str | None = None, sk: str | None = None,
               env: dict | None = None, timeout: float = 90) -> dict:
    """Run tests/interop/clients/rmq.py with the official client; return its RESULT json."""
    cmd = [str(RMQ_PYTHON), str(CLIENT), "--endpoint", endpoint]
    if ak is not None:
        cmd += ["--ak", ak, "--sk", sk or ""]
    full_env = dict(os.environ)
    full_env.pop("PYTHONPATH", None)
    full_env.update(env or {})
    r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout, env=full_env)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"client printed no result (rc={r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
