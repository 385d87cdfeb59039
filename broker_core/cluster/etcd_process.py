"""A single-member etcd as a child process, for the cluster demo, tests and benchmarks.

Debian's `etcd-server` package provides the binary (`make etcd` installs it). The
member listens on loopback ports chosen by the caller (or free ones), keeps its data
in a directory of its own, and is killed with its process group.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from txmq.broker.ports import free_port


class EtcdProcess:
    def __init__(self, data_dir: Path, *, client_port: int = 0, peer_port: int = 0) -> None:
        self.data_dir = Path(data_dir)
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self, timeout_s: float = 30.0) -> "EtcdProcess":
        binary = shutil.which("etcd")
        if binary is None:
            raise FileNotFoundError("etcd is not installed: run `make etcd` (apt-get install etcd-server)")
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [binary, "--name", "txmq", "--data-dir", str(self.data_dir),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"txmq={peer}", "--heartbeat-interval", "50", "--election-timeout", "500"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with code {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as resp:
                    if b'"true"' in resp.read():
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("etcd did not become healthy")

    def clear(self, prefix: str = "/txmq/") -> None:
        """Delete every key under `prefix`: a fresh cluster on this member (tests reuse one etcd)."""
        from .coordination import EtcdGroup

        etcd = EtcdGroup([("127.0.0.1", self.client_port)], "_", 1)
        for key, _, _ in etcd.range_prefix(prefix):
            etcd.delete(key)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> "EtcdProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
