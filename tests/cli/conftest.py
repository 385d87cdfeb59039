"""The CLI is tested as users run it: `.venv/bin/txmq ...` subprocesses against a broker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess

TXMQ = str(Path(sys.executable).parent / "txmq")


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("cli") / "data", flush="async") as proc:
        yield proc


class Cli:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def run(self, *args: str, stdin: str | None = None, broker: bool = True, timeout: float = 60,
            env: dict | None = None) -> subprocess.CompletedProcess:
        cmd = [TXMQ, *args] + (["--broker", self.endpoint] if broker else [])
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, env=full_env)

    def json(self, *args: str, **kwargs):
        result = self.run(*args, "--json", **kwargs)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def cli(cli_broker) -> Cli:
    return Cli(cli_broker.endpoint)
