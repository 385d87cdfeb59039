"""Interop fixtures: each official RocketMQ 5 client runs in its own process, driven by a small program.

Every driver takes the same command line and prints one `RESULT {json}` line:
- Python: tests/interop/clients/rmq.py under .venv-rocketmq (`make interop-venv`);
- Java: tests/interop/java, built once per session with Maven (rocketmq-client-java from Maven
  Central, cached in ~/.m2; the build output stays in tests/interop/java/target);
- Go: tests/interop/go, built once per session with `go build` (rocketmq-clients/golang/v5 from
  the Go module proxy, cached in Go's module cache; the binary in tests/interop/.cache);
- Node.js: tests/interop/node, rocketmq-client-nodejs installed with npm into its node_modules.

A client whose toolchain is missing, or whose dependencies cannot be downloaded, is skipped with
the reason; a driver that does not compile fails.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RMQ_PYTHON = ROOT / ".venv-rocketmq" / "bin" / "python"
CLIENT = HERE / "clients" / "rmq.py"
JAVA_DIR = HERE / "java"
GO_DIR = HERE / "go"
CACHE = HERE / ".cache"
NODE_DIR = HERE / "node"
GO_FALLBACKS = (Path("/usr/local/go/bin/go"),)  # where Go's own tarball installs it, often off PATH
LANGUAGES = ("python", "java", "go", "node")

# Words in a build's output that mean a download failed (no network, registry down), not our code.
_OFFLINE_SIGNS = ("ENOTFOUND", "ETIMEDOUT", "ECONNREFUSED", "EAI_AGAIN", "Could not resolve", "Could not transfer", "Unknown host", "UnknownHost", "dial tcp",
                  "no such host", "connection refused", "i/o timeout", "Network is unreachable",
                  "TLS handshake timeout", "403 Forbidden", "proxy.golang.org", "repo.maven.apache.org")


def official_client_available() -> bool:
    if not RMQ_PYTHON.exists():
        return False
    r = subprocess.run([str(RMQ_PYTHON), "-c", "import rocketmq"], capture_output=True)
    return r.returncode == 0


@dataclass
class Driver:
    """One language's driver program: how to start it, or why it cannot run."""

    language: str
    command: list[str] = field(default_factory=list)
    skip_reason: str | None = None
    cwd: Path = HERE

    def run(self, endpoint: str, *args: str, ak: str | None = None, sk: str | None = None,
            env: dict | None = None, timeout: float = 90) -> dict:
        if self.skip_reason:
            pytest.skip(self.skip_reason)
        full_env = dict(os.environ)
        full_env.pop("PYTHONPATH", None)
        full_env.update(env or {})
        if self.language == "python":
            # rmq.py takes the connection options before its command
            cmd = self.command + ["--endpoint", endpoint]
            if ak is not None:
                cmd += ["--ak", ak, "--sk", sk or ""]
            cmd += list(args)
        else:
            cmd = self.command + [args[0], "--endpoint", endpoint, *args[1:]]
            if ak is not None:
                cmd += ["--ak", ak, "--sk", sk or ""]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=self.cwd)
        for line in r.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise AssertionError(f"{self.language} client printed no result (rc={r.returncode}):\n"
                             f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def _build(cmd: list[str], cwd: Path, what: str, env: dict | None = None, timeout: float = 900,
           trial: bool = False) -> str | None:
    """Run a build; None when it worked, else the reason to skip (a failed download). A compile error
    fails the test, unless this is a `trial` whose failure only means trying another way."""
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return f"{what}: the build took over {timeout:.0f} s (downloading dependencies?)"
    if r.returncode == 0:
        return None
    out = r.stdout[-4000:] + r.stderr[-4000:]
    if trial or any(sign in out for sign in _OFFLINE_SIGNS):
        return f"{what}: dependencies could not be downloaded: {_first_error(out)}"
    pytest.fail(f"{what} failed to build:\n{out}")


def _first_error(output: str) -> str:
    """The line of a build's output that says what went wrong (its first error, else its last line)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in output.splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[0][:300]


def _python_driver() -> Driver:
    if not official_client_available():
        return Driver("python", skip_reason="official Python client not installed: run `make interop-venv`")
    return Driver("python", [str(RMQ_PYTHON), str(CLIENT)])


def _java_driver() -> Driver:
    mvn, java = shutil.which("mvn"), shutil.which("java")
    if not (mvn and java):
        return Driver("java", skip_reason="the Java client needs a JDK and Maven (java, mvn) on PATH")
    # offline first: once ~/.m2 holds the client, a build needs no network
    reason = _build([mvn, "-q", "-B", "-o", "package"], JAVA_DIR, "the Java client driver", trial=True)
    if reason is not None:
        reason = _build([mvn, "-q", "-B", "package"], JAVA_DIR, "the Java client driver")
    if reason is not None:
        return Driver("java", skip_reason=reason)
    target = JAVA_DIR / "target"
    classpath = f"{target / 'txmq-interop-java-1.jar'}{os.pathsep}{(target / 'classpath.txt').read_text().strip()}"
    return Driver("java", [java, "-Xss512k", "-XX:TieredStopAtLevel=1", "-cp", classpath, "txmq.interop.Interop"],
                  cwd=CACHE)


def _go_driver() -> Driver:
    go = shutil.which("go") or next((str(p) for p in GO_FALLBACKS if p.exists()), None)
    if go is None:
        return Driver("go", skip_reason="the Go client needs the Go toolchain (go) on PATH")
    binary = CACHE / "go-interop"
    reason = _build([go, "build", "-o", str(binary), "."], GO_DIR, "the Go client driver",
                    env={"GOFLAGS": "-mod=mod"})
    if reason is not None:
        return Driver("go", skip_reason=reason)
    return Driver("go", [str(binary)], cwd=CACHE)


def _node_driver() -> Driver:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not (node and npm):
        return Driver("node", skip_reason="the Node.js client needs node and npm on PATH")
    if not (NODE_DIR / "node_modules" / "rocketmq-client-nodejs" / "package.json").exists():
        reason = _build([npm, "ci", "--no-audit", "--no-fund"], NODE_DIR, "the Node.js client")
        if reason is not None:
            return Driver("node", skip_reason=reason)
    return Driver("node", [node, str(NODE_DIR / "interop.js")], cwd=CACHE)


_BUILDERS = {"python": _python_driver, "java": _java_driver, "go": _go_driver, "node": _node_driver}


@pytest.fixture(scope="session")
def drivers():
    """Drivers built on first use, once per session (a language no test asks for is never built)."""
    built: dict[str, Driver] = {}

    def get(language: str) -> Driver:
        if language not in built:
            CACHE.mkdir(exist_ok=True)  # the clients write their logs under the working directory
            # parallel test workers share the build directories: one builds at a time
            with open(CACHE / f".build-{language}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                built[language] = _BUILDERS[language]()
        return built[language]
    return get


@pytest.fixture(params=LANGUAGES)
def client(request, drivers) -> Driver:
    """Each official client in turn; a test using it runs once per language."""
    driver = drivers(request.param)
    if driver.skip_reason:
        pytest.skip(driver.skip_reason)
    return driver


def run_client(endpoint: str, *args: str, ak: str | None = None, sk: str | None = None,
               env: dict | None = None, timeout: float = 90) -> dict:
    """Run the Python client's driver (rmq.py); return its RESULT json."""
    return _python_driver().run(endpoint, *args, ak=ak, sk=sk, env=env, timeout=timeout)
