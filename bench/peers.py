"""The peers txmq is benchmarked against: private RabbitMQ and Redis instances.

    from bench.peers import ensure_peers_installed, RabbitMQ, Redis
    ensure_peers_installed()                 # apt-get + pip, only what is missing
    with RabbitMQ() as rmq, Redis() as rds:  # own data dirs, free ports
        ...rmq.port, rds.port...

Why private instances: the comparison must not depend on (or disturb) a system
service someone else configured, and `make bench` must stop every process it
started. Each instance lives in its own temporary directory on a free port;
RabbitMQ even gets its own epmd (Erlang's port mapper, which `erl` would
otherwise start as a daemon that outlives the run) so stop() leaves nothing
behind. Installing the Debian packages must not start their system services
either: apt-get runs with a policy-rc.d that refuses service starts.

Run as a script to install the peers: `.venv/bin/python bench/peers.py --install`
(`--check` reports what is present, `--smoke` starts and stops both).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Debian package -> the binary it provides; Python client module -> pip requirement.
APT_PACKAGES = {"rabbitmq-server": "rabbitmq-server", "redis-server": "redis-server"}
PIP_CLIENTS = {"pika": "pika>=1.3", "redis": "redis>=5"}
RABBITMQ_BINARIES = (Path("/usr/lib/rabbitmq/bin/rabbitmq-server"), Path("/usr/sbin/rabbitmq-server"))
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


class PeerUnavailable(RuntimeError):
    """A peer could not be installed or started (the report says so; the run goes on)."""


# ---- installation --------------------------------------------------------------------------


def _binary_present(package: str) -> bool:
    if package == "rabbitmq-server":
        return any(p.exists() for p in RABBITMQ_BINARIES) or shutil.which("rabbitmq-server") is not None
    return shutil.which(APT_PACKAGES[package]) is not None or Path("/usr/bin", package).exists()


def missing_packages() -> list[str]:
    return [pkg for pkg in APT_PACKAGES if not _binary_present(pkg)]


def _apt_knows(package: str) -> bool:
    """True when apt-cache has a candidate version (else the package lists need an update)."""
    out = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True)
    return out.returncode == 0 and "Candidate:" in out.stdout and "Candidate: (none)" not in out.stdout


@contextlib.contextmanager
def _services_not_started():
    """Keep apt's postinst scripts from starting system rabbitmq/redis services.

    Our own policy-rc.d (exit 101 = action forbidden) is put in place only when none
    exists, and removed afterwards."""
    created = False
    if not POLICY_RC_D.exists():
        POLICY_RC_D.write_text("#!/bin/sh\n# written by txmq bench/peers.py during apt-get install\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
        created = True
    try:
        yield
    finally:
        if created:
            POLICY_RC_D.unlink(missing_ok=True)


def install_packages(packages: list[str], log=print) -> None:
    """apt-get install the missing Debian packages (root only)."""
    if not packages:
        return
    if os.geteuid() != 0:
        raise PeerUnavailable(f"{', '.join(packages)} missing and not root: apt-get install {' '.join(packages)}")
    if not all(_apt_knows(p) for p in packages):
        log("peers: apt-get update")
        subprocess.run(["apt-get", "update", "-q"], check=False, stdout=subprocess.DEVNULL)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log(f"peers: apt-get install {' '.join(packages)}")
    with _services_not_started():
        done = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
                              env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise PeerUnavailable(f"apt-get install {' '.join(packages)} failed: {done.stderr.strip()[-400:]}")


def install_clients(log=print) -> None:
    """pip install the Python clients (pika, redis-py) into this interpreter's venv if missing."""
    missing = [req for mod, req in PIP_CLIENTS.items() if importlib.util.find_spec(mod) is None]
    if missing:
        log(f"peers: pip install {' '.join(missing)}")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=False)


def ensure_peers_installed(log=print) -> dict[str, str]:
    """Install what is missing; returns {package: "ok" | reason it is unavailable}."""
    status = {pkg: "ok" for pkg in APT_PACKAGES}
    try:
        install_packages(missing_packages(), log)
    except PeerUnavailable as exc:
        log(f"peers: {exc}")
    for pkg in missing_packages():
        status[pkg] = "not installed"
    install_clients(log)
    return status


def peer_versions() -> dict[str, str]:
    """Installed Debian versions of the peers (for the report)."""
    versions = {}
    for pkg in APT_PACKAGES:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True)
        versions[pkg] = out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "not installed"
    return versions


# ---- running instances ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def _stop_group(proc: subprocess.Popen | None, timeout_s: float = 30) -> None:
    """SIGTERM the process group we started (start_new_session), SIGKILL if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@dataclass
class _Instance:
    """Shared life cycle: a temp dir, a port, start() / stop(), a context manager."""

    name = "peer"

    def __post_init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"txmq-bench-{self.name}-"))
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _stop_group(proc)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Redis(_Instance):
    """redis-server with AOF (appendfsync everysec, its default durability), no RDB snapshots."""

    appendfsync: str = "everysec"
    name = "redis"

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(binary).exists():
            raise PeerUnavailable("redis-server is not installed")
        proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--appendonly", "yes",
             "--appendfsync", self.appendfsync, "--save", "", "--daemonize", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        if not wait_for_port(self.port, 20, proc):
            self.stop()
            raise PeerUnavailable("redis-server did not open its port within 20 s")

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port)


@dataclass
class RabbitMQ(_Instance):
    """A RabbitMQ node with its own node name, mnesia/log dirs, AMQP port and epmd."""

    name = "rabbitmq"

    def start(self) -> None:
        binary = next((p for p in RABBITMQ_BINARIES if p.exists()), None)
        if binary is None:
            raise PeerUnavailable("rabbitmq-server is not installed")
        epmd = shutil.which("epmd") or "/usr/bin/epmd"
        epmd_port = free_port()
        self.procs.append(subprocess.Popen([epmd, "-port", str(epmd_port)], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, start_new_session=True))
        for sub in ("mnesia", "log"):
            (self.dir / sub).mkdir()
        (self.dir / "enabled_plugins").write_text("[].\n")
        env = dict(os.environ, HOME=str(self.dir), ERL_EPMD_PORT=str(epmd_port),
                   RABBITMQ_NODENAME=f"txmqbench{self.port}@localhost", RABBITMQ_NODE_PORT=str(self.port),
                   RABBITMQ_DIST_PORT=str(free_port()), RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
                   RABBITMQ_LOG_BASE=str(self.dir / "log"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
                   RABBITMQ_PID_FILE=str(self.dir / "pid"))
        proc = subprocess.Popen([str(binary)], cwd=self.dir, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        if not wait_for_port(self.port, 90, proc):
            self.stop()
            raise PeerUnavailable("rabbitmq-server did not open its AMQP port within 90 s")

    def connection(self):
        import pika

        return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))


def smoke() -> None:
    """Start both peers, do one write each, stop them."""
    with RabbitMQ() as rmq:
        conn = rmq.connection()
        ch = conn.channel()
        ch.queue_declare("smoke", durable=True)
        ch.tx_select()
        ch.basic_publish("", "smoke", b"x")
        ch.tx_commit()
        conn.close()
        print(f"rabbitmq ok on port {rmq.port}")
    with Redis() as rds:
        r = rds.client()
        pipe = r.pipeline(transaction=True)
        pipe.xadd("smoke", {"body": b"x"})
        pipe.execute()
        print(f"redis ok on port {rds.port}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--install", action="store_true", help="install missing peers (apt-get, pip)")
    ap.add_argument("--check", action="store_true", help="print installed versions")
    ap.add_argument("--smoke", action="store_true", help="start and stop both peers once")
    args = ap.parse_args(argv)
    if args.install:
        print(ensure_peers_installed())
    if args.check or not (args.install or args.smoke):
        print(peer_versions(), "missing:", missing_packages())
    if args.smoke:
        smoke()
    return 0


if __name__ == "__main__":
    sys.exit(main())
