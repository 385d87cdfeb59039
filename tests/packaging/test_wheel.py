"""txmq as a user installs it: the sdist and the wheel built from it, in a fresh venv outside the tree.

Every other test runs the editable install, which maps import names onto the source folders and so
cannot notice a package the wheel forgot. Here the wheel goes into a venv of its own, run from a
directory outside the source tree. Its heavy dependencies (pyspark, pyarrow, numba) are not
installed again: a .pth line puts the repo venv's site-packages on the new venv's path. A path
line in a .pth file is only appended to sys.path; the .pth files inside that folder (the editable
install's import hook, the autoregister folder) are not run, so the only txmq the new venv can
import is the installed wheel's, which each test checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
# source folder -> where its modules land in an installed txmq
INSTALLED_AS = {"broker_core": "txmq/broker", "connector": "txmq/spark",
                "connector/autoregister/pyspark_txmq": "pyspark_txmq"}


@dataclass
class Installed:
    venv: Path
    site: Path  # the venv's site-packages
    work: Path  # the directory its programs run in (outside the source tree)

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def txmq(self) -> str:
        return str(self.venv / "bin" / "txmq")

    def env(self) -> dict[str, str]:
        """The environment of a user of this venv: its Python for Spark too, no PYTHONPATH."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(PYSPARK_PYTHON=self.python, PYSPARK_DRIVER_PYTHON=self.python, PYTHONUNBUFFERED="1")
        return env

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=self.work, env=self.env(), capture_output=True, text=True, timeout=timeout)


def _run(*argv: str | Path, cwd: Path) -> None:
    result = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{argv} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    work = tmp_path_factory.mktemp("installed")
    assert ROOT not in work.parents, "the install must live outside the source tree"
    dist, venv = work / "dist", work / "venv"
    # `python -m build`: the sdist first, then the wheel from the unpacked sdist, each in an isolated
    # build env, as a release is made: a file the sdist forgets is missing from the wheel too
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT, cwd=work)
    (wheel,) = dist.glob("txmq-*.whl")
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work)
    _run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-deps",
         "--no-index", wheel, cwd=work)
    site = Path(subprocess.check_output([venv / "bin" / "python", "-c",
                                         "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True).strip())
    (site / "_txmq_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return Installed(venv=venv, site=site, work=work)


def test_the_wheel_holds_every_module_of_the_source_tree(installed):
    missing = []
    for folder, target in INSTALLED_AS.items():
        for source in (ROOT / folder).rglob("*.py"):
            relative = source.relative_to(ROOT / folder)
            if folder == "connector" and relative.parts[0] == "autoregister":
                continue  # installed as the top-level pyspark_txmq
            if not (installed.site / target / relative).is_file():
                missing.append(f"{folder}/{relative}")
    assert not missing, f"the wheel lacks {missing}"


def test_the_wheel_holds_the_consoles_templates_and_static_files(installed):
    folder = ROOT / "broker_core" / "console"
    data = [p for sub in ("templates", "static") for p in (folder / sub).iterdir() if p.is_file()]
    assert data, "the console has no templates or static files to check"
    missing = [str(p.relative_to(folder)) for p in data
               if not (installed.site / "txmq/broker/console" / p.relative_to(folder)).is_file()]
    assert not missing, f"the wheel lacks the console's {missing}"


def test_the_installed_venv_imports_txmq_from_the_wheel_only(installed):
    where = installed.run(installed.python, "-c", textwrap.dedent("""
        import pyspark_txmq, txmq.broker, txmq.spark
        for m in (txmq.broker, txmq.spark, pyspark_txmq):
            print(m.__file__)
    """))
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        assert Path(line).is_relative_to(installed.site), f"{line} is not the installed wheel's"


def test_the_installed_txmq_reports_the_version_its_metadata_holds(installed):
    version = installed.run(installed.python, "-c", "import importlib.metadata as m; print(m.version('txmq'))")
    shown = installed.run(installed.txmq, "--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"txmq {version.stdout.strip()}"
    source = {}
    exec((ROOT / "broker_core" / "__init__.py").read_text(), source)
    assert version.stdout.strip() == source["__version__"]


@pytest.fixture(scope="module")
def installed_broker(installed, tmp_path_factory):
    """A broker run by the installed `txmq broker start`."""
    with BrokerProcess(tmp_path_factory.mktemp("installed-broker"), flush="async", env=installed.env(),
                       program=[installed.txmq, "broker", "start"]) as proc:
        yield proc


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root (unshare --mount)")
def test_the_installed_broker_starts_from_a_read_only_install_for_a_user_without_a_home(installed, tmp_path):
    # numba caches compiled code beside the source or in ~/.cache; a service user may write neither
    read_only = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"', str(installed.site)]
    env = {**installed.env(), "HOME": "/proc/no-home", "TMPDIR": str(tmp_path)}
    env.pop("XDG_CACHE_HOME", None)
    env.pop("NUMBA_CACHE_DIR", None)
    with BrokerProcess(tmp_path / "data", env=env, program=[*read_only, installed.txmq, "broker", "start"]) as proc:
        assert proc.port > 0
    assert any(tmp_path.glob("txmq-numba-*")), "the compiled code was cached under the temp dir"


def test_the_installed_cli_runs_a_broker_that_stores_and_returns_a_message(installed, installed_broker):
    broker = ["--broker", installed_broker.endpoint]
    created = installed.run(installed.txmq, "topic", "create", "installed-cli", "--queues", "1", *broker)
    assert created.returncode == 0, created.stderr
    sent = installed.run(installed.txmq, "send", "installed-cli", "hello from the wheel", *broker)
    assert sent.returncode == 0, sent.stderr
    read = installed.run(installed.txmq, "tail", "installed-cli", "--from", "earliest", "--count", "1", *broker)
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip().endswith("hello from the wheel")


@pytest.mark.spark
def test_the_installed_connector_serves_a_batch_read_by_name(installed, installed_broker):
    broker = ["--broker", installed_broker.endpoint]
    assert installed.run(installed.txmq, "topic", "create", "installed-spark", "--queues", "2", *broker).returncode == 0
    sent = subprocess.run([installed.txmq, "send", "installed-spark", "--stdin", *broker], input="a\nb\nc\n",
                          cwd=installed.work, env=installed.env(), capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    # no spark.dataSource.register: the installed pyspark_txmq module makes format("txmq") resolve
    read = installed.run(installed.python, "-c", textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
                 .getOrCreate())
        rows = (spark.read.format("txmq").option("broker", "{installed_broker.endpoint}")
                .option("topic", "installed-spark").load().collect())
        print("BODIES", sorted(bytes(r.body).decode() for r in rows))
        spark.stop()
    """), timeout=240)
    assert read.returncode == 0, read.stderr[-3000:]
    assert "BODIES ['a', 'b', 'c']" in read.stdout
