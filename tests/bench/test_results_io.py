"""Every results file says what it measured: the commit, the peers' versions and the host's load."""

from __future__ import annotations

import json
import re

from bench import results_io


def test_a_results_file_carries_the_commit_the_peer_versions_and_the_load(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results_io, "RESULTS_DIR", tmp_path)
    results_io.emit("probe", {"ratio": 1.5})
    stored = json.loads((tmp_path / "probe.json").read_text())
    assert stored["ratio"] == 1.5 and stored["bench"] == "probe"
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", stored["commit"])
    assert {"kafka", "rocketmq"} <= set(stored["peer_versions"])  # pinned in bench/peers/pom.xml
    assert len(stored["host"]["load_avg"]) == 3
    assert json.loads(capsys.readouterr().out) == stored


def test_a_benchmarks_own_field_wins_over_the_stamp(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results_io, "RESULTS_DIR", tmp_path)
    results_io.emit("probe", {"host": "its own"})
    assert json.loads((tmp_path / "probe.json").read_text())["host"] == "its own"


def test_a_run_after_make_bench_rewrote_its_report_plots_and_docs_is_not_stamped_dirty():
    porcelain = "M bench/REPORT.md\n M bench/plots/scaling.png\n M docs/benchmarks.md\n M bench/results/tx.json\n"
    assert results_io.changed_code(porcelain) == []


def test_a_run_with_changed_code_is_stamped_dirty():
    porcelain = " M docs/benchmarks.md\n M broker_core/timer/service.py\nR  bench/a.py -> bench/b.py\n"
    assert results_io.changed_code(porcelain) == ["broker_core/timer/service.py", "bench/b.py"]


def test_the_stamp_of_a_checkout_whose_only_changes_are_results_is_clean(monkeypatch):
    monkeypatch.setattr(results_io, "_git", lambda *args: "a" * 40 if args[0] == "rev-parse"
                        else "M bench/results/timer.json\n M bench/results/tx.json")
    assert results_io.commit() == "a" * 40
