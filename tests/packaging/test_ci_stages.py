"""CI runs every test the default suite leaves out for time: `make ci` is `make test`, then `make test-faults`."""

from __future__ import annotations

import itertools
import re
import shlex
import tomllib
from pathlib import Path

from _pytest.mark.expression import Expression

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text()
# every marker the two stages' expressions name, and one they do not
MARKERS = ("faults", "torture", "slow", "lab", "spark", "interop", "other")


def _variables() -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_]+) [:?]?= ?(.*)$", MAKEFILE, re.M))


def _recipe(target: str) -> list[str]:
    """The recipe lines of `target`, with the Makefile's own variables expanded."""
    found = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert found, f"the Makefile has no target {target!r} with a recipe"
    variables = _variables()
    lines = [line.strip() for line in found.group(1).splitlines()]
    return [re.sub(r"\$\(([A-Z_]+)\)", lambda m: variables.get(m.group(1), m.group(0)), line) for line in lines]


def _pytest_argv(target: str) -> list[str]:
    runs = [shlex.split(line) for line in _recipe(target) if "-m pytest" in line]
    assert len(runs) == 1, f"{target} runs pytest once: {runs}"
    return runs[0]


def _marker_expression(argv: list[str]) -> str:
    return argv[argv.index("-m", argv.index("pytest")) + 1]


def _default_expression() -> str:
    addopts = shlex.split(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"])
    return addopts[addopts.index("-m") + 1]


def _selects(expression: str, marks: set[str]) -> bool:
    return Expression.compile(expression).evaluate(lambda name, **_: name in marks)


def _files_marked_faults() -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                  if re.search(r"pytest\.mark\.faults\b", path.read_text()))


def test_ci_runs_the_default_suite_then_the_faults_stage():
    steps = [shlex.split(line)[:2] for part in _recipe("ci") for line in re.split(r";|&&", part)]
    assert [step[1] for step in steps if step and step[0] == "$(MAKE)"] == ["test", "test-faults"]


def test_the_faults_stage_runs_exactly_the_faults_marked_tests_the_default_suite_would_run_without_the_marker():
    default, faults = _default_expression(), _marker_expression(_pytest_argv("test-faults"))
    for n in range(len(MARKERS) + 1):
        for marks in map(set, itertools.combinations(MARKERS, n)):
            assert not (_selects(default, marks) and _selects(faults, marks)), f"both stages run a test marked {marks}"
            would_run = _selects(default, marks - {"faults"})
            assert _selects(faults, marks) == ("faults" in marks and would_run), f"a test marked {marks}"


def test_the_faults_stage_collects_the_whole_tests_tree_so_no_marked_file_escapes_it():
    argv = _pytest_argv("test-faults")
    assert not [arg for arg in argv if arg.startswith(("tests", "./tests"))], argv
    assert _files_marked_faults(), "no test file is marked faults: the stage would run nothing"


def test_every_file_marked_faults_is_ordered_by_the_heaviest_files_list():
    listed = [line.strip() for line in (ROOT / "tests" / "heaviest_files.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert [name for name in listed if not (ROOT / name).is_file()] == []
    assert [name for name in _files_marked_faults() if name not in listed] == []


def test_the_readme_says_ci_runs_make_ci():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert re.search(r"CI \(`\.ci/run`\) runs `make ci`", readme)
