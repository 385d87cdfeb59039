"""The examples and the README quickstart, run the way a new user runs them (real processes, real Spark)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def run_example(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY)
    return subprocess.run([PY, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)


def quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_readme_quickstart_is_two_make_commands_that_exist() -> None:
    commands = quickstart_commands()
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    for command in commands:
        assert re.search(rf"^{command.split()[1]}:", makefile, re.M), f"Makefile has no target for {command!r}"


def test_ci_runs_the_readme_test_command_first() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in quickstart_commands()
    assert re.search(r"^make ci$", ci, re.M)
    recipe = re.search(r"^ci:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe and recipe.group(1).lstrip().startswith("$(MAKE) test;"), "make ci starts with make test"


def test_demo_ends_with_exactly_once_verified(tmp_path: Path) -> None:
    result = run_example(["examples/orders_points/run_demo.py", "--orders", "60", "--work-dir", str(tmp_path)],
                         timeout_s=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "exactly-once verified:               yes" in result.stdout
    resolved = re.search(r"orders resolved by check-back:\s+(\d+)", result.stdout)
    assert resolved and int(resolved.group(1)) > 0, "the demo must exercise check-back"


def test_arrow_tools_read_only_the_committed_messages_of_a_topic() -> None:
    result = run_example(["examples/arrow_tools/read_topic.py"], timeout_s=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "8 committed messages in 'orders'" in result.stdout
    assert "DuckDB: [('paid', 6), ('refund', 2)]" in result.stdout


@pytest.mark.slow
def test_outbox_pipeline_survives_driver_kills(tmp_path: Path) -> None:
    result = run_example(["examples/outbox_pipeline/run.py", "--payments", "1500", "--kills", "2",
                          "--work-dir", str(tmp_path)], timeout_s=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "nothing lost, nothing duplicated: yes" in result.stdout


@pytest.mark.slow
def test_backfill_reads_slices_and_stops_after_available_now() -> None:
    result = run_example(["examples/backfill/backfill.py", "--embedded"], timeout_s=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2. time window — clicks stored since" in result.stdout
    assert re.search(r"3\. AvailableNow — \d+ micro-batches of at most 250 rows, 1000 rows in parquet", result.stdout)


@pytest.mark.slow
def test_fresh_clone_runs_the_demo(tmp_path: Path) -> None:
    """`make demo` on a clean checkout: creates its own venv and passes."""
    clone = tmp_path / "txmq"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYSPARK"))}
    result = subprocess.run(["make", "demo", "DEMO_ARGS=--orders 40"], cwd=clone, env=env, capture_output=True,
                            text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "exactly-once verified:               yes" in result.stdout


@pytest.mark.slow  # 2 min; tests/spark/test_spark_cluster.py runs the same pipeline over two groups by default
def test_the_cluster_demo_runs_orders_to_points_over_three_groups_through_a_leader_kill(tmp_path: Path) -> None:
    import shutil

    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (make etcd)")
    done = run_example(["examples/cluster/run_demo.py", "--orders", "80", "--work-dir", str(tmp_path)],
                       timeout_s=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "exactly-once verified:               yes" in done.stdout
    assert re.search(r"kill -9 of group g3's leader", done.stdout)
    assert re.search(r"group g3: \S+ leads epoch [2-9]", done.stdout), "the group never elected another leader"
