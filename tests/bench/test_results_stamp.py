"""Every benchmark `make bench` runs writes its result through bench/results_io.emit, so every results
file carries the stamp (the commit, the peers' versions, the host's load)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from bench import run_all

BENCHMARKS = [b for b in run_all.all_benchmarks() if b.script.exists()]


def _code_strings(tree: ast.Module) -> list[str]:
    """String constants of the script's code (docstrings, which may name the results file, left out)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda b: b.name)
def test_a_benchmark_reports_through_results_io_emit(bench):
    tree = ast.parse(bench.script.read_text())
    assert any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "emit"
               for node in ast.walk(tree)), f"bench/{bench.name}.py does not call results_io.emit"


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda b: b.name)
def test_a_benchmark_builds_no_path_into_bench_results_of_its_own(bench):
    tree = ast.parse(bench.script.read_text())
    own = [s for s in _code_strings(tree) if s == "results" or "results/" in s]
    assert not own, f"bench/{bench.name}.py writes bench/results itself: {own}"


@pytest.mark.parametrize("bench", run_all.discovered_benchmarks(), ids=lambda b: b.name)
def test_a_benchmark_found_in_bench_takes_the_quick_flag_make_bench_gives_it(bench):
    assert bench.full_args == ("--quick",)
    result = subprocess.run([sys.executable, str(bench.script), "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "--quick" in result.stdout, \
        f"bench/{bench.name}.py has no --quick, which make bench runs it with: {result.stderr[-300:]}"
