"""A Spark standalone cluster on lab hosts, its executors given txmq only by a packed environment.

What a user with a Spark estate does, step by step:
- build txmq's wheel and install it (non-editable, with `txmq[spark]`) into a fresh venv, pack that
  venv with venv-pack (`packed_environment`);
- the cluster's hosts have Spark installed (`spark_install`: jars and scripts, no Python packages)
  and a system `python3` without pyarrow or txmq;
- the driver host unpacks the same archive as `./environment` beside the job and submits it with
  `--archives <archive>#environment` and `PYSPARK_PYTHON=./environment/bin/python`.

Downloads and builds are cached under `.cache/spark-cluster/` (gitignored), keyed by the wheel's
content, so a second run only unpacks.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "spark-cluster"
MASTER_PORT = 7077
# Spark's jars are on every host already (its install): the archive carries Python packages only.
SYSTEM_PATH = "/usr/bin:/bin"  # a cluster host's PATH: its python3 has neither pyarrow nor txmq
PACK_EXCLUDE = "lib/python*/site-packages/pyspark/jars/*"


def _wheel_key(wheel: Path) -> str:
    """A hash of the wheel's members (names and bytes): zip timestamps do not change it."""
    h = hashlib.sha256()
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            h.update(name.encode())
            h.update(z.read(name))
    return h.hexdigest()[:16]


def packed_environment(log=print) -> tuple[Path, Path]:
    """(archive, venv): txmq's wheel installed with `[spark]` into a fresh venv, packed by venv-pack."""
    CACHE.mkdir(parents=True, exist_ok=True)
    build = CACHE / "wheel-build"
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(REPO / "build", ignore_errors=True)  # setuptools' staging copy: files deleted since linger there
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(build), str(REPO)],
                   check=True, capture_output=True, text=True)
    (wheel,) = build.glob("txmq-*.whl")
    key = _wheel_key(wheel)
    venv, archive = CACHE / f"env-{key}", CACHE / f"txmq_env-{key}.tar.gz"
    if archive.exists() and venv.exists():
        return archive, venv
    log(f"building the packed environment {archive.name} (a fresh venv from the wheel; a minute or two)")
    shutil.rmtree(venv, ignore_errors=True)
    for old in CACHE.glob("env-*"):
        shutil.rmtree(old, ignore_errors=True)
    for old in CACHE.glob("txmq_env-*.tar.gz"):
        old.unlink()
    # The hosts' own python3 (a packed venv links to its interpreter), and none of this process's
    # environment (PYTHONPATH, VIRTUAL_ENV): pip must see an empty venv.
    clean = {"PATH": SYSTEM_PATH, "HOME": os.environ.get("HOME", "/root")}
    subprocess.run([shutil.which("python3", path=SYSTEM_PATH), "-m", "venv", str(venv)], check=True, env=clean)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"{wheel}[spark]"], check=True, env=clean)
    # what the executors import: the connector (whole) and the module pyspark's lookup registers
    subprocess.run([str(venv / "bin" / "python"), "-c", "import txmq.spark.source, txmq.spark.sink, pyspark_txmq"],
                   check=True, env=clean)
    tmp = archive.with_suffix(".partial")
    subprocess.run([str(Path(sys.executable).parent / "venv-pack"), "-p", str(venv), "-o", str(tmp), "--format",
                    "tar.gz", "--exclude", PACK_EXCLUDE, "--compress-level", "1", "-q"], check=True)
    tmp.rename(archive)
    return archive, venv


def spark_install(venv: Path, dest: Path) -> Path:
    """A Spark install for the cluster's hosts: pyspark's jars and scripts, hard-linked (no Python)."""
    (pyspark,) = venv.glob("lib/python*/site-packages/pyspark")
    dest.mkdir(parents=True)
    for part in ("jars", "bin", "sbin"):
        shutil.copytree(pyspark / part, dest / part, copy_function=os.link)
    return dest


def unpack(archive: Path, dest: Path) -> Path:
    """`mkdir environment && tar -xzf archive -C environment`, as the docs say."""
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="tar")
    return dest


def host_env(host, spark_home: Path, **extra: str) -> dict[str, str]:
    """A clean environment for a cluster host: the system's PATH (python3 without pyarrow), Spark's install."""
    env = {"PATH": SYSTEM_PATH, "HOME": str(host.dir), "SPARK_HOME": str(spark_home),
           "SPARK_LOCAL_IP": host.addr, "LANG": "C.UTF-8", "SPARK_LOG_DIR": str(host.log_dir)}
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    env.update(extra)
    return env


@dataclass
class StandaloneCluster:
    """A master and one-core workers, each worker on a lab host of its own."""

    master_host: object
    workers: list
    spark_home: Path

    @property
    def url(self) -> str:
        return f"spark://{self.master_host.addr}:{MASTER_PORT}"

    def start(self, timeout_s: float = 120) -> None:
        cls = str(self.spark_home / "bin" / "spark-class")
        self.master_host.popen([cls, "org.apache.spark.deploy.master.Master", "--host", self.master_host.addr,
                                "--port", str(MASTER_PORT), "--webui-port", "8080"],
                               env=host_env(self.master_host, self.spark_home))
        for w in self.workers:
            work = w.disk / "spark-work"
            work.mkdir()
            w.popen([cls, "org.apache.spark.deploy.worker.Worker", "--host", w.addr, "--cores", "1",
                     "--memory", "2g", "--webui-port", "8081", "--work-dir", str(work), self.url],
                    env=host_env(w, self.spark_home))
        deadline = time.monotonic() + timeout_s
        while True:
            registered = sum("Successfully registered with master" in _logs(w) for w in self.workers)
            if registered == len(self.workers):
                return
            assert time.monotonic() < deadline, f"{registered}/{len(self.workers)} workers registered"
            time.sleep(1)

    def executor_pids(self, worker) -> list[int]:
        """The executor JVMs (CoarseGrainedExecutorBackend) running on `worker`."""
        found = []
        for pid in worker.pids():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"CoarseGrainedExecutorBackend" in cmd:
                found.append(pid)
        return found

    def kill_executor(self, worker) -> int:
        """kill -9 the executor JVM on `worker` (its Python workers lose their JVM and end too)."""
        (pid,) = self.executor_pids(worker)
        os.kill(pid, signal.SIGKILL)
        return pid


def _logs(host) -> str:
    return "".join(p.read_text(errors="replace") for p in host.log_dir.glob("*.log"))
