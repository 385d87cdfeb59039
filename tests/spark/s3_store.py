"""A real S3-compatible server for the checkpoint-on-S3 tests: gofakes3 (tests/spark/s3server), built
once by `make s3-server` into .cache/, run as a process on a loopback port, state in memory."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

REPO = Path(__file__).resolve().parents[2]
BINARY = REPO / ".cache" / "s3-server" / "s3server"
ACCESS_KEY, SECRET_KEY = "txmq-test", "txmq-test-secret"  # gofakes3 accepts any signed request

# gofakes3 does not take the AWS SDKs' default streaming upload checksums (aws-chunked with a trailer):
# checksums only where S3 requires them, in this process and the drivers it starts.
os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")


def build_server() -> Path:
    """The cached server binary (built on first use); skips the test when Go is missing."""
    if shutil.which("go") is None:
        pytest.skip("the Go toolchain (go) is not on PATH: it builds the S3 test server (make s3-server)")
    subprocess.run(["make", "-s", "s3-server"], cwd=REPO, check=True, timeout=600)
    return BINARY


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3a_conf(endpoint: str, jars: Path | None) -> dict[str, str]:
    """Spark settings for s3a:// on an S3-compatible server (path-style, plain HTTP), with Hadoop's
    S3A jars from `make s3a-jars` when given."""
    conf = {"spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
            "spark.hadoop.fs.s3a.secret.key": SECRET_KEY,
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false"}
    if jars is not None:
        conf["spark.jars"] = ",".join(str(p) for p in sorted(jars.glob("*.jar")))
    return conf


S3A_JARS = REPO / ".cache" / "s3a-jars"


def fetch_s3a_jars() -> Path:
    """Hadoop's S3A jars (make s3a-jars, Maven Central, cached); skips the test when mvn is missing."""
    if shutil.which("mvn") is None and not (S3A_JARS / ".fetched-3.5.0").exists():
        pytest.skip("mvn is not on PATH: it fetches hadoop-aws and the AWS SDK bundle (make s3a-jars)")
    subprocess.run(["make", "-s", "s3a-jars"], cwd=REPO, check=True, timeout=1800)
    return S3A_JARS


class S3Server:
    """The server process; `endpoint` is http://127.0.0.1:<port>, `bucket` exists when entered."""

    def __init__(self, binary: Path, bucket: str = "checkpoints") -> None:
        self.binary, self.bucket = binary, bucket
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def filesystem(self) -> pafs.S3FileSystem:
        return pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme="http", region="us-east-1",
                                 access_key=ACCESS_KEY, secret_key=SECRET_KEY)

    def hadoop_conf(self) -> dict[str, str]:
        """The S3A settings Spark (and the helpers, through the session) use for this server."""
        return s3a_conf(self.endpoint, None)

    def __enter__(self) -> "S3Server":
        self.proc = subprocess.Popen([str(self.binary), "-listen", f"127.0.0.1:{self.port}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the S3 test server did not start (exit {self.proc.poll()})")
                time.sleep(0.05)
        pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme="http", region="us-east-1",
                          access_key=ACCESS_KEY, secret_key=SECRET_KEY, allow_bucket_creation=True).create_dir(self.bucket)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
