"""The benchmark runner's contracts: result lines, aggregation, failures kept, profiles parsed, reports written."""

from __future__ import annotations

import json
import sys

import pytest

from bench import profile_hot_paths, report, run_all


def test_last_json_line_takes_the_final_bench_object_and_skips_noise():
    out = 'starting\n{"bench": "x", "a": 1}\nnot json {\n{"other": 2}\n{"bench": "x", "a": 2}\ntrailer\n'
    assert run_all.last_json_line(out) == {"bench": "x", "a": 2}


def test_last_json_line_is_none_without_a_bench_object():
    assert run_all.last_json_line('{"no_bench": 1}\nplain text\n') is None


def test_aggregate_gives_median_min_max_per_numeric_leaf_and_ignores_booleans():
    runs = [{"bench": "b", "x": 1.0, "nested": {"y": 10}, "ok": True},
            {"bench": "b", "x": 3.0, "nested": {"y": 30}, "ok": False},
            {"bench": "b", "x": 2.0, "nested": {"y": 20}}]
    agg = run_all.aggregate(runs)
    assert agg["x"] == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert agg["nested.y"]["median"] == 20
    assert "ok" not in agg


def test_aggregate_leaves_out_the_stamp_results_io_puts_on_every_run():
    runs = [{"bench": "b", "x": 1.0, "commit": "abc", "host": {"cpus": 2, "load_avg": [1.0, 1.0, 1.0]},
             "peer_versions": {"kafka": "4.1.0"}}]
    assert set(run_all.aggregate(runs)) == {"x"}


def test_a_script_added_to_bench_counts_as_a_benchmark_only_when_it_reports_through_emit(tmp_path, monkeypatch):
    (tmp_path / "emits.py").write_text('"""Emits."""\nif __name__ == "__main__":\n    emit("emits", {})\n')
    (tmp_path / "table.py").write_text('"""A table."""\nresults = {}\n'
                                       'if __name__ == "__main__":\n    print(results)\n')
    monkeypatch.setattr(run_all, "BENCH", tmp_path)
    assert [b.name for b in run_all.discovered_benchmarks()] == ["emits"]


def test_run_script_reports_a_failing_benchmark_with_its_error(tmp_path):
    outcome = run_all.run_script([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"],
                                 30, tmp_path / "log.txt")
    assert not outcome.ok and "exit code 3" in outcome.error and "boom" in outcome.error


def test_run_script_kills_a_benchmark_past_its_timeout(tmp_path):
    outcome = run_all.run_script([sys.executable, "-c", "import time; time.sleep(60)"], 0.5, tmp_path / "log.txt")
    assert not outcome.ok and "timed out" in outcome.error and outcome.seconds < 10


def test_run_script_returns_the_result_line_of_a_good_run(tmp_path):
    code = 'import json; print("warming up"); print(json.dumps({"bench": "t", "v": 5, "ratios": {"r": 1.5}}))'
    outcome = run_all.run_script([sys.executable, "-c", code], 30, tmp_path / "log.txt")
    assert outcome.ok and outcome.result["ratios"] == {"r": 1.5}


RAW = (
    'process 10:"/x/python /w/bench/store.py --quick";main (store.py:5);'
    'MessageStore.append (broker_core/store/message_store.py:210);CommitLog.write_batch (broker_core/store/commitlog.py:80)'
    ' 7\n'
    'process 11:"/x/python -m txmq.broker.server\n--data-dir /tmp/a";serve (grpc/_server.py:1);'
    'handle (broker_core/server/native_service.py:40);encode (pyarrow/ipc.py:3) 5\n'
    'process 10:"/x/python /w/bench/store.py --quick";main (store.py:5) 2\n'
)
STARTUP = ('process 12:"/x/python -m txmq.broker.server";<module> (broker_core/server/broker.py:1);'
           '_find_and_load (<frozen importlib._bootstrap>:1) 4\n')


def test_profile_counts_self_time_in_the_innermost_txmq_frame_per_process():
    hot = profile_hot_paths.hot_functions(profile_hot_paths.parse_raw(RAW + STARTUP))
    assert hot["samples"] == 14
    first, second = hot["top_txmq"][:2]
    assert first["function"] == "CommitLog.write_batch (broker_core/store/commitlog.py)"
    assert first["self_samples"] == 7 and first["process"] == "bench driver"
    assert second["function"] == "handle (broker_core/server/native_service.py)" and second["process"] == "broker"
    assert hot["top_overall"][0]["function"] == "CommitLog.write_batch (broker_core/store/commitlog.py)"
    assert hot["by_process"] == {"bench driver": 9, "broker": 5}
    assert hot["top_broker"][0]["function"] == "handle (broker_core/server/native_service.py)"


def test_profile_counts_import_time_apart_from_the_work():
    hot = profile_hot_paths.hot_functions(profile_hot_paths.parse_raw(RAW + STARTUP))
    assert hot["startup_samples"] == 4
    assert all("<module>" not in row["function"] for row in hot["top_txmq"])


@pytest.fixture(scope="module")
def report_paths(tmp_path_factory):
    """One report written from a small summary (plots are the slow part: write them once)."""
    tmp_path = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report, "REPORT", tmp_path / "REPORT.md")
        mp.setattr(report.report_plots, "PLOTS", tmp_path / "plots")
        mp.setattr(report, "DOCS", tmp_path / "benchmarks.md")
        report.write_report(json.loads(json.dumps(_summary())))
    return tmp_path


def _summary() -> dict:
    runs = [{"bench": "broker", "figures": {"a_tx100": {"txmq": {"messages_per_s": v, "p50_ms": 5.0, "p99_ms": 9.0},
                                                        "rabbitmq": {"messages_per_s": v / 3, "p50_ms": 20.0,
                                                                     "p99_ms": 70.0}}},
             "ratios": {"a_tx100_msgs_vs_rabbitmq": 3.0 + i}} for i, v in enumerate((9000.0, 12000.0, 10000.0))]
    return {"started_utc": "now", "quick": False, "machine": {"cores": 2, "memory_gib": 8},
            "versions": {"python": "3.11"},
            "benchmarks": {
                "broker": {"status": "ok", "runs": runs, "seconds": [1, 1, 1], "figures": run_all.aggregate(runs),
                           "script": "bench/broker.py"},
                "spark_sink": {"status": "missing", "error": "script not present", "runs": [],
                               "script": "bench/spark_sink.py"}}}


def test_report_shows_ratio_medians_with_range_and_keeps_missing_benchmarks(report_paths):
    text = (report_paths / "REPORT.md").read_text()
    assert "| broker | `a_tx100_msgs_vs_rabbitmq` | vs peer | 4 [3–5] | ↑ |  | 3 |" in text
    assert "| spark_sink | — | — | **missing**: script not present | | | 0 |" in text
    assert "2 cores" in text and "8 GiB" in text


def test_report_writes_every_plot_as_png_even_without_data(report_paths):
    pngs = sorted(p.name for p in (report_paths / "plots").glob("*.png"))
    assert pngs == ["latency_percentiles.png", "recovery_vs_log_size.png", "scaling.png", "spark_rows.png",
                    "throughput_vs_batch.png"]
    assert all((report_paths / "plots" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)


def test_docs_page_carries_the_key_ratio_table(report_paths):
    docs = (report_paths / "benchmarks.md").read_text()
    assert docs.startswith("# Benchmarks") and "a_tx100_msgs_vs_rabbitmq" in docs



def test_a_new_report_keeps_the_notes_below_the_marker_and_replaces_the_table(tmp_path, monkeypatch):
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n| old table |\n\n{report.NOTES_MARKER}\n\n### Session notes\n\nhand-written\n")
    monkeypatch.setattr(report, "DOCS", docs)
    report.write_docs(report.Results(json.loads(json.dumps(_summary()))), _summary())
    text = docs.read_text()
    assert "| old table |" not in text and "a_tx100_msgs_vs_rabbitmq" in text
    assert text.endswith(f"{report.NOTES_MARKER}\n\n### Session notes\n\nhand-written\n")


def test_the_comparisons_against_jvm_peers_run_unsampled_and_the_others_sampled(monkeypatch, tmp_path):
    sampled_with: dict[str, str | None] = {}

    def fake_run_once(state, *, profiler=None, **_):
        sampled_with[state.bench.name] = profiler
        state.outcomes.append(run_all.RunOutcome(True, 1.0))

    monkeypatch.setattr(run_all, "run_once", fake_run_once)
    chosen = [b for b in run_all.BENCHMARKS if b.name in ("tx", "vs_peers", "replication_cost")]
    run_all.run_plan(chosen, quick=False, max_runs=1, budget_s=None, started=0.0, env={}, log=lambda _: None,
                     profiler="py-spy", on_progress=lambda _: None)
    assert sampled_with == {"tx": "py-spy", "vs_peers": None, "replication_cost": None}
