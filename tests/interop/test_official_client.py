"""The official RocketMQ 5 Python client over TLS (the other families, for every client: test_official_clients.py)."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from tests.interop.conftest import run_client
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def test_producer_over_tls(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=txmq-test",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    with BrokerProcess(tmp_path / "store", flush="async",
                       extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]) as proc:
        sent = run_client(proc.endpoint, "--tls", "produce", "--topic", f"tls-{uuid.uuid4().hex[:8]}", "--count", "2",
                          env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)})
    assert sent.get("errors") == [] and len(sent["sent"]) == 2
