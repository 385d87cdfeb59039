"""`make bench`: every benchmark against its peers, several runs each, then the report.

    .venv/bin/python bench/run_all.py [--quick] [--only a,b] [--runs N] [--budget S] [--no-profile]
    .venv/bin/python bench/run_all.py --report-only   # REPORT.md and plots again from summary.json

Steps: install the peers that are missing (bench/peers.py: Debian's
rabbitmq-server and redis-server, pika and redis-py); run each benchmark script
as a subprocess (its own process group, killed on timeout) `runs` times; take
the last JSON line each run prints; aggregate every numeric figure as the median
of the runs with min and max (a ratio is aggregated from the per-run ratios, so
each one still compares figures measured in the same run); sample the first run
of each with py-spy (bench/profile_hot_paths.py parses it); write
bench/results/summary.json and let bench/report.py write bench/REPORT.md,
bench/plots/*.png and docs/benchmarks.md. Logs: bench/results/logs/.

A benchmark script that is missing, fails or times out is recorded as such (its
row in the report says so) and the run goes on. The benchmark scripts stop the
processes they start (brokers, RabbitMQ, Redis, Spark); after each one the
runner kills whatever is left in its process group.

Budget (2-core machine): every benchmark runs once (that run sampled by py-spy
for the hot-path table), then further rounds, cheapest benchmark first, while
the 18-minute budget allows, so `make bench` ends within 20 minutes, plus
PEERS_BUDGET_S for bench/vs_peers.py (Kafka and RocketMQ 5 at the issue's full
sizes, once); --quick runs each benchmark once (a few minutes, dominated by
Spark start-up).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
LOGS = RESULTS / "logs"
SUMMARY = RESULTS / "summary.json"
# `make bench` must end within 20 minutes on the 2-core machine: runs beyond the first
# stop here, leaving time for the report and for a slow first run of the last benchmark.
FULL_BUDGET_S = 18 * 60
PROFILE_RATE_HZ = 50
# A first run still going at budget + this margin is stopped (so `make bench` ends < 20 min).
HARD_MARGIN_S = 90
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script and how the runner drives it."""

    name: str
    full_args: tuple[str, ...] = ()
    quick_args: tuple[str, ...] = ("--quick",)
    full_runs: int = 3
    timeout_s: float = 600
    needs_peers: bool = False
    what: str = ""
    self_repeating: bool = False  # the script takes medians of its own repeats: run it once
    rerun_rank: int = 1  # reruns go to lower ranks first (then to the cheapest): peers before Spark
    # py-spy samples Python processes only and takes a share of the two cores: a run against JVM peers
    # it sampled would handicap txmq's side, and a script that runs once has no unsampled run to report
    sampled: bool = True

    @property
    def script(self) -> Path:
        return BENCH / f"{self.name}.py"


# Order: cheap and independent first, Spark last (it is the slowest to start).
# `make bench` has 20 minutes on 2 cores, so the scripts whose own full sizes take
# minutes per run (store: 4 GiB logs, tx, broker, Spark: 1-2M rows) run at their
# --quick sizes, several times; run a script directly for its full-size figures.
QUICK = ("--quick",)
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("store", full_args=QUICK, full_runs=3, timeout_s=600,
              what="storage engine vs raw file loops; recovery time vs log size"),
    Benchmark("tx", full_args=QUICK, full_runs=3, timeout_s=600,
              what="transaction engine vs plain append; check-back with 100k pending"),
    Benchmark("grpc_server_models", full_runs=3, timeout_s=300,
              what="thread-pool vs asyncio gRPC server (per-call floor)"),
    Benchmark("rocketmq_send", full_runs=3, timeout_s=300,
              what="RocketMQ 5 SendMessage / transaction vs a bare gRPC call"),
    Benchmark("broker", full_args=QUICK, full_runs=3, needs_peers=True, timeout_s=900,
              what="txmq vs RabbitMQ vs Redis, over the wire"),
    Benchmark("commit_stall", full_args=QUICK, full_runs=2, timeout_s=300,
              what="sends to another topic while a large COMMIT is written: latency vs the COMMIT's duration"),
    Benchmark("page_cache", full_args=QUICK, full_runs=2, timeout_s=300,
              what="CommitLog writes with and without the page-cache window (CPU per message)"),
    Benchmark("flight_pull", full_runs=2, timeout_s=600,
              what="the broker's Flight DoGet vs a Flight server streaming the same batches from memory"),
    Benchmark("scaling", full_runs=1, self_repeating=True, timeout_s=1200,
              what="producers, queues, batch size, check-back scan vs pending (full: up to 1M)"),
    Benchmark("spark_source", full_args=(*QUICK, "--repeat", "2"), full_runs=2, timeout_s=900, rerun_rank=2,
              what="Spark source rows/s vs its ceilings"),
    Benchmark("spark_sink", full_args=(*QUICK, "--repeat", "2"), full_runs=2, timeout_s=900, rerun_rank=2,
              what="Spark sink rows/s vs its ceilings"),
    # Issue #26's figures are defined at 2M read / 1M written rows, so this one runs at full size, once
    # (it takes the best of its own rounds), with its own share of the budget (PEERS_BUDGET_S).
    Benchmark("vs_peers", full_args=(), full_runs=1, self_repeating=True, timeout_s=2400, rerun_rank=3, sampled=False,
              what="txmq vs Kafka 4 (KRaft) and Apache RocketMQ 5: Spark read/write, transactions, latency"),
    Benchmark("replication_cost", full_args=(), full_runs=1, self_repeating=True, timeout_s=900, rerun_rank=3,
              sampled=False,
              what="a txmq group of 3 (sync) / one broker beside Kafka 3 brokers RF=3 acks=all / RF=1"),
)
# What bench/vs_peers.py adds to a full run (peers' start-up, 2M-row loads into both brokers, Spark).
PEERS_BUDGET_S = 15 * 60


# bench/*.py that are not benchmarks (the runner's own modules and shared helpers).
NOT_BENCHMARKS = {"run_all", "report", "peers", "profile_hot_paths", "spark_common", "__init__", "peers_jvm",
                  "vs_peers_rmq_client"}


def discovered_benchmarks() -> list[Benchmark]:
    """Benchmark scripts added to bench/ after this list was written: run at --quick size, twice.

    A script counts when it has a `__main__` block and reports through bench/results_io.emit (which
    writes bench/results/<name>.json); the scripts that only print a table are left to be run by hand."""
    known = {b.name for b in BENCHMARKS} | NOT_BENCHMARKS
    found = []
    for path in sorted(BENCH.glob("*.py")):
        if path.stem in known or path.stem.startswith("_"):
            continue
        text = path.read_text(errors="replace")
        if "__main__" not in text or not reports_through_emit(text):
            continue
        try:
            doc = (ast.get_docstring(ast.parse(text)) or "").splitlines()
        except SyntaxError:
            doc = []
        found.append(Benchmark(path.stem, full_args=QUICK, full_runs=2, timeout_s=600,
                               what=(doc[0].rstrip(".") if doc else "(found in bench/)")))
    return found


def reports_through_emit(source: str) -> bool:
    """The script's source calls bench/results_io.emit (directly or as spark_common re-exports it)."""
    tree = ast.parse(source)
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "emit"
               for node in ast.walk(tree))


def all_benchmarks() -> list[Benchmark]:
    """The known benchmarks with newly found ones before the slow scaling and Spark runs."""
    known = list(BENCHMARKS)
    cut = next(i for i, b in enumerate(known) if b.name == "scaling")
    return known[:cut] + discovered_benchmarks() + known[cut:]


# ---- running one script ------------------------------------------------------------------------


@dataclass
class RunOutcome:
    ok: bool
    seconds: float
    result: dict | None = None
    error: str = ""


def last_json_line(text: str) -> dict | None:
    """The last stdout line that is a JSON object with a "bench" key (the contract of every bench)."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and "bench" in value:
                return value
    return None


def run_script(cmd: list[str], timeout_s: float, log_path: Path, env: dict[str, str] | None = None) -> RunOutcome:
    """Run a benchmark in its own process group; kill the whole group on timeout and afterwards."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
                                start_new_session=True, env=env)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, _ = proc.communicate()
            timed_out = True
        finally:
            _kill_group(proc.pid)  # stragglers the script left in its group
        log.write("\n---- stdout ----\n" + (out or ""))
    seconds = time.monotonic() - started
    if timed_out:
        return RunOutcome(False, seconds, error=f"timed out after {timeout_s:.0f} s")
    result = last_json_line(out or "")
    if proc.returncode != 0:
        return RunOutcome(False, seconds, result, error=f"exit code {proc.returncode}: {_tail(log_path)}")
    if result is None:
        return RunOutcome(False, seconds, error="printed no JSON result line")
    return RunOutcome(True, seconds, result)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, lines: int = 3) -> str:
    text = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip() and not ln.startswith("----")]
    return " | ".join(text[-lines:])[-400:]


# ---- aggregation -----------------------------------------------------------------------------


def flatten(value, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested result as dotted keys (booleans and lists of runs left out)."""
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for key, sub in value.items():
            out.update(flatten(sub, f"{prefix}{key}."))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix[:-1]] = float(value)
    return out


def aggregate(results: list[dict]) -> dict[str, dict]:
    """Per figure: median, min, max over the runs that reported it (results_io's stamp is no figure)."""
    from bench.results_io import STAMP_FIELDS

    per_key: dict[str, list[float]] = {}
    for result in results:
        figures = {k: v for k, v in result.items() if k not in STAMP_FIELDS}
        for key, value in flatten(figures).items():
            per_key.setdefault(key, []).append(value)
    return {key: {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}
            for key, v in sorted(per_key.items())}


# ---- machine and versions ------------------------------------------------------------------


def machine() -> dict:
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kib / (1 << 20), 1), "cpu": cpu,
            "kernel": platform.release(), "platform": platform.platform()}


def versions() -> dict:
    from importlib import metadata

    from bench.peers import peer_versions

    out = {"python": platform.python_version()}
    for dist in ("grpcio", "protobuf", "pyarrow", "pyspark", "pika", "redis", "matplotlib", "py-spy",
                 "pyinstrument"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    peers = peer_versions()
    out["rabbitmq"] = peers.get("rabbitmq-server", "not installed")
    out["redis-server"] = peers.get("redis-server", "not installed")
    from bench.peers_jvm import pom_versions

    for name, version in pom_versions().items():  # the JVM peers of bench/vs_peers.py, as the pom pins them
        out[f"apache-{name}"] = version
    try:
        out["confluent-kafka"] = metadata.version("confluent-kafka")
    except metadata.PackageNotFoundError:
        out["confluent-kafka"] = "not installed"
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        out["java"] = (java.stderr or java.stdout).splitlines()[0] if (java.stderr or java.stdout) else "?"
    except (OSError, subprocess.SubprocessError):
        out["java"] = "not installed"
    return out


# ---- main -------------------------------------------------------------------------------------


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class BenchState:
    """The runs of one benchmark so far, turned into its summary entry at the end."""

    def __init__(self, bench: Benchmark, args: list[str]) -> None:
        self.bench = bench
        self.args = args
        self.outcomes: list[RunOutcome] = []
        self.profile: dict | None = None

    @property
    def hopeless(self) -> bool:
        """A first run that failed outright (no result at all) will fail again: no reruns."""
        return bool(self.outcomes) and not self.outcomes[0].ok and self.outcomes[0].result is None

    def mean_seconds(self) -> float:
        return statistics.mean(o.seconds for o in self.outcomes) if self.outcomes else 0.0

    def entry(self) -> dict:
        b = self.bench
        entry: dict = {"name": b.name, "what": b.what, "script": f"bench/{b.name}.py", "args": self.args,
                       "self_repeating": b.self_repeating}
        if not self.outcomes:
            if not b.script.exists():
                return {**entry, "status": "missing", "error": "script not present", "runs": []}
            return {**entry, "status": "not run yet", "runs": []}
        good = [o.result for o in self.outcomes if o.ok and o.result]
        entry["runs"] = good
        entry["seconds"] = [round(o.seconds, 1) for o in self.outcomes]
        entry["errors"] = [o.error for o in self.outcomes if not o.ok]
        if self.profile is not None:
            entry["profile"] = self.profile
        if not good:
            entry["status"] = "failed"
            entry["error"] = entry["errors"][0] if entry["errors"] else "no result"
            return entry
        entry["status"] = "ok" if len(good) == len(self.outcomes) else "partial"
        entry["figures"] = aggregate(good)
        return entry


def run_once(state: BenchState, *, env: dict[str, str], log, profiler: str | None = None,
             timeout_s: float | None = None) -> None:
    """One run of a benchmark; with `profiler` (py-spy) the run is sampled too."""
    bench, i = state.bench, len(state.outcomes) + 1
    cmd = [sys.executable, str(bench.script), *state.args]
    raw = LOGS / f"{bench.name}.pyspy.txt"
    if profiler:
        from bench.profile_hot_paths import pyspy_command

        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.unlink(missing_ok=True)
        cmd = pyspy_command(profiler, cmd, raw, rate=PROFILE_RATE_HZ)
    log(f"[{bench.name}] run {i}: bench/{bench.name}.py {' '.join(state.args)}{' (profiled)' if profiler else ''}")
    outcome = run_script(cmd, min(bench.timeout_s, timeout_s or bench.timeout_s), LOGS / f"{bench.name}.run{i}.log",
                         env)
    log(f"[{bench.name}] run {i}: {'ok' if outcome.ok else 'FAILED: ' + outcome.error} ({outcome.seconds:.0f} s)")
    state.outcomes.append(outcome)
    if profiler:
        state.profile = _profile_of(raw)


def run_plan(chosen: list[Benchmark], *, quick: bool, max_runs: int | None, budget_s: float | None,
             started: float, env: dict[str, str], log, profiler: str | None, on_progress) -> dict[str, BenchState]:
    """Every benchmark once (profiled), then further rounds while the time budget allows.

    Rounds interleave the benchmarks, so a burst of load from elsewhere on the machine
    spreads over all of them instead of skewing one benchmark's every run."""
    states = {b.name: BenchState(b, list(b.quick_args if quick else b.full_args)) for b in chosen}
    hard_deadline = None if budget_s is None else budget_s + HARD_MARGIN_S
    for state in states.values():
        if not state.bench.script.exists():
            log(f"[{state.bench.name}] missing: bench/{state.bench.name}.py")
            continue
        left = None if hard_deadline is None else hard_deadline - (time.monotonic() - started)
        if left is not None and left < 30:
            log(f"[{state.bench.name}] not run: the time budget is spent")
            state.outcomes.append(RunOutcome(False, 0.0, error="not run: the time budget was spent"))
            continue
        run_once(state, env=env, log=log, profiler=profiler if state.bench.sampled else None, timeout_s=left)
        on_progress(states)
    wanted = {name: (max_runs or (1 if quick or s.bench.self_repeating else s.bench.full_runs))
              for name, s in states.items()}
    out_of_time: set[str] = set()
    for round_no in range(2, max(wanted.values(), default=1) + 1):
        # by rank, then cheapest first: the budget then buys the most repeated figures
        for name, state in sorted(states.items(), key=lambda kv: (kv[1].bench.rerun_rank, kv[1].mean_seconds())):
            if not state.outcomes or state.hopeless or wanted[name] < round_no or name in out_of_time:
                continue
            elapsed = time.monotonic() - started
            if budget_s is not None and elapsed + state.mean_seconds() * 1.1 > budget_s:
                log(f"[{name}] no run {round_no}: {elapsed:.0f} s + ~{state.mean_seconds():.0f} s "
                    f"would pass the {budget_s:.0f} s budget")
                out_of_time.add(name)
                continue
            run_once(state, env=env, log=log)
            on_progress(states)
    return states


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="development run: --quick scripts, one run each")
    ap.add_argument("--only", help="comma-separated benchmark names (default: all)")
    ap.add_argument("--runs", type=int, help="most runs per benchmark (default: its full_runs; 1 with --quick)")
    ap.add_argument("--budget", type=float, help=f"seconds for all runs (default {FULL_BUDGET_S:.0f}; "
                                                 "none with --quick): later rounds are skipped past it")
    ap.add_argument("--no-profile", action="store_true", help="do not sample the first runs with py-spy")
    ap.add_argument("--report-only", action="store_true", help="rewrite REPORT.md and plots from summary.json")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)

    from bench import report

    if args.report_only:
        summary = json.loads(SUMMARY.read_text())
        reparse_profiles(summary)
        _write_summary(summary)
        report.write_report(summary)
        return 0

    started = time.monotonic()
    chosen = [b for b in all_benchmarks() if not args.only or b.name in args.only.split(",")]
    env = bench_env()
    summary: dict = {"started_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "quick": args.quick,
                     "machine": machine(), "benchmarks": {}}
    if any(b.needs_peers for b in chosen):
        from bench.peers import ensure_peers_installed

        summary["peers"] = ensure_peers_installed(log)
    summary["versions"] = versions()
    from bench.results_io import commit
    summary["commit"] = commit()
    profiler = None
    if not args.no_profile:
        from bench.profile_hot_paths import py_spy

        profiler = py_spy()
        if profiler is None:
            log("py-spy unavailable: no profile (bench/profile_hot_paths.py can fall back to pyinstrument)")

    def progress(states: dict[str, BenchState]) -> None:
        summary["benchmarks"] = {name: st.entry() for name, st in states.items()}
        _write_summary(summary)

    default_budget = FULL_BUDGET_S + (PEERS_BUDGET_S if any(b.name == "vs_peers" for b in chosen) else 0)
    budget = args.budget if args.budget is not None else (None if args.quick else default_budget)
    summary["budget_s"] = budget
    states = run_plan(chosen, quick=args.quick, max_runs=args.runs, budget_s=budget, started=started, env=env,
                      log=log, profiler=profiler, on_progress=progress)
    progress(states)
    if profiler:
        summary["profile"] = {"status": "ok", "tool": "py-spy", "rate_hz": PROFILE_RATE_HZ,
                              "note": "sampled during the first measured run of each benchmark",
                              "benchmarks": {name: e.get("profile", {"status": e.get("status", "missing")}
                                                         if states[name].bench.sampled else
                                                         {"status": "not sampled (against JVM peers)"})
                                             for name, e in summary["benchmarks"].items()}}
    summary["total_seconds"] = round(time.monotonic() - started, 1)
    _write_summary(summary)
    report.write_report(summary)
    log(f"done in {summary['total_seconds']:.0f} s: bench/REPORT.md, bench/plots/, bench/results/summary.json")
    return 0


def _profile_of(raw: Path) -> dict:
    from bench.profile_hot_paths import hot_functions, parse_raw

    if not raw.exists():
        return {"status": "failed", "error": "py-spy wrote no samples"}
    # The raw stacks stay in bench/results/logs/ (not committed) for a closer look or a flame graph.
    return {"status": "ok", "tool": "py-spy", **hot_functions(parse_raw(raw.read_text(errors="replace")))}


def reparse_profiles(summary: dict) -> None:
    """Hot functions again from the raw py-spy stacks kept in bench/results/logs/ (after a parser change)."""
    for name, entry in summary.get("profile", {}).get("benchmarks", {}).items():
        raw = LOGS / f"{name}.pyspy.txt"
        if raw.exists():
            entry.update(_profile_of(raw))


def _write_summary(summary: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.exit(main())
