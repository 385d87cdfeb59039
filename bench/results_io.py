"""How every benchmark reports: one JSON line on stdout, the same line in bench/results/NAME.json,
stamped with what it measured (the commit) and against what (the peers' versions, the host's load)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO = RESULTS_DIR.parent.parent


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


# what `make bench` itself writes, and prose: changes there do not change what a benchmark measures
NOT_MEASURED = ("bench/results/", "bench/REPORT.md", "bench/plots/", "docs/", "README.md")


def commit() -> str:
    """HEAD, with "-dirty" when tracked code differs from it (NOT_MEASURED aside)."""
    head = _git("rev-parse", "HEAD") or "unknown"
    return head + ("-dirty" if changed_code(_git("status", "--porcelain", "--untracked-files=no")) else "")


def changed_code(porcelain: str) -> list[str]:
    """The paths of `git status --porcelain` output outside NOT_MEASURED."""
    # split, not sliced: _git strips the output, and with it the first line's leading blank
    paths = [line.split(maxsplit=1)[1].split(" -> ")[-1] for line in porcelain.splitlines() if line.strip()]
    return [path for path in paths if not path.startswith(NOT_MEASURED)]


def peer_versions() -> dict[str, str]:
    """The peers a run may use: the pinned Maven Central releases, the Debian packages, pyspark."""
    versions: dict[str, str] = {}
    try:
        from bench.peers_jvm import pom_versions
        versions.update(pom_versions())
    except Exception:  # the bench package's pom is absent in a trimmed checkout
        pass
    try:
        from bench.peers import peer_versions as debian
        versions.update(debian())
    except Exception:  # dpkg absent: not Debian
        pass
    try:
        versions["pyspark"] = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        pass
    return versions


# The fields emit() stamps on every result: what was measured and where, not figures to aggregate.
STAMP_FIELDS = ("commit", "measured_at", "host", "peer_versions")


def provenance() -> dict:
    stamp = {"commit": commit(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "host": {"cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()],
                      "python": platform.python_version()},
             "peer_versions": peer_versions()}
    assert tuple(stamp) == STAMP_FIELDS
    return stamp


def emit(name: str, result: dict, *, sort_keys: bool = False) -> str:
    """Print and store `result` for benchmark `name` (run_all.py and report.py read the file)."""
    line = json.dumps({"bench": name, **provenance(), **result}, sort_keys=sort_keys)  # a bench's own fields win
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{name}.json").write_text(line + "\n")
    print(line)
    return line
