"""A throwaway TLS certificate for tests (the openssl CLI)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def self_signed(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1 and localhost; the test is skipped without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    cert_file, key_file = Path(directory) / "cert.pem", Path(directory) / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=txmq-test",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key_file), "-out", str(cert_file)], check=True, capture_output=True)
    return cert_file, key_file
