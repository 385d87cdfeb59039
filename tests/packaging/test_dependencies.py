"""Dependencies say what they need: every import is declared, and a missing optional one is one clear line."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# an optional import -> (the extra that provides it, the only source paths that may import it)
OPTIONAL = {"pyspark": ("spark", ("connector/",)),
            "grpc_tools": ("test", ("broker_core/protocol/generate.py",)),
            "starlette": ("console", ("broker_core/console/",)),
            "jinja2": ("console", ("broker_core/console/",)),
            "uvicorn": ("console", ("broker_core/console/",))}


def _third_party_imports() -> dict[str, set[str]]:
    """{top-level module: source files importing it} over broker_core/ and connector/."""
    found: dict[str, set[str]] = {}
    for folder in ("broker_core", "connector"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "txmq":
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower() for r in requirements}


def test_every_import_of_the_package_is_a_declared_dependency_or_a_guarded_extra():
    providers = importlib.metadata.packages_distributions()
    required = _names(PYPROJECT["dependencies"])
    undeclared = []
    for module, files in sorted(_third_party_imports().items()):
        dists = {d.lower() for d in providers.get(module, [])}
        if module in OPTIONAL:
            extra, allowed = OPTIONAL[module]
            assert dists & _names(PYPROJECT["optional-dependencies"][extra]), f"{module} not in [{extra}]"
            stray = [f for f in files if not f.startswith(allowed)]
            assert not stray, f"{module} (optional, [{extra}]) is imported outside {allowed}: {stray}"
        elif not dists & required:
            undeclared.append(f"{module} ({sorted(dists) or 'no distribution'}, imported by {sorted(files)[0]})")
    assert not undeclared, f"imports that are no dependency of txmq: {undeclared}"


def _import_error_without_pyspark(stub: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", f"import sys; {stub}; import txmq.spark"], capture_output=True,
                          text=True, env=env, timeout=120)


def test_the_connector_without_pyspark_fails_with_one_line_naming_the_spark_extra():
    result = _import_error_without_pyspark("sys.modules['pyspark'] = None")  # None: "not installed" to import
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "Spark connector needs pyspark" in last and "pip install 'txmq[spark]'" in last, last


def test_the_connector_with_an_old_pyspark_names_the_version_it_found():
    result = _import_error_without_pyspark("import types; sys.modules['pyspark'] = "
                                           "types.SimpleNamespace(__version__='3.5.1')")
    last = result.stderr.strip().splitlines()[-1]
    assert "found 3.5.1" in last and "pip install 'txmq[spark]'" in last, last


def test_broker_groups_need_no_extra(tmp_path):
    # etcd3gw is a plain dependency: a replica never meets a missing module
    assert "etcd3gw" in _names(PYPROJECT["dependencies"])


def test_a_make_target_that_needs_etcd_says_how_to_get_it(tmp_path):
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    result = subprocess.run([make, "-s", "-C", str(ROOT), "etcd-required"], env={"PATH": str(tmp_path)},
                            capture_output=True, text=True, timeout=60)  # a PATH without etcd
    assert result.returncode != 0
    first = result.stderr.splitlines()[0]  # make's own "*** Error 2" line follows
    assert "apt-get install etcd-server" in first and "etcd-io/etcd/releases" in first, result.stderr
