"""How every benchmark reports: one JSON line on stdout, the same line in bench/results/NAME.json."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def emit(name: str, result: dict, *, sort_keys: bool = False) -> str:
    """Print and store `result` for benchmark `name` (run_all.py and report.py read the file)."""
    line = json.dumps({"bench": name, **result}, sort_keys=sort_keys)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{name}.json").write_text(line + "\n")
    print(line)
    return line
