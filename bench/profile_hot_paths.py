"""Where each benchmark spends its CPU: the three heaviest txmq functions per benchmark.

    .venv/bin/python bench/profile_hot_paths.py [--only store,tx,...] [--rate HZ]

Runs each benchmark's --quick variant under py-spy (`record --subprocesses
--nonblocking --format raw`), so the broker process, check-back sessions and
Spark's Python workers are sampled along with the driver; idle threads
(blocked in I/O or waits) are left out by py-spy. From the collapsed stacks it
counts, per function, the samples where it is the innermost frame (self time)
and where it is on the stack at all (inclusive time); samples taken while a
process imports its modules (start-up) are counted apart. The heaviest txmq
functions (broker_core/, connector/) by self time are where the next
optimisation goes; the heaviest functions of any code are listed too, because
a benchmark can be dominated by gRPC, Arrow or the peers' clients.

py-spy is pip-installed into the venv when missing; if it cannot run (no
ptrace), pyinstrument profiles the benchmark's main process instead.
Prints one JSON line and writes bench/results/profile_hot_paths.json.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.results_io import emit  # noqa: E402
RESULTS = ROOT / "bench" / "results" / "profile_hot_paths.json"
PROJECT_DIRS = ("broker_core/", "connector/")
# `name (file:line)` frames separated by ';', the sample count last.
FRAME = re.compile(r"(?:^|;)([^;]+?) \(([^;()]*?)(?::(\d+))?\)(?=;|$)")
RECORD_END = re.compile(r"^(.*) (\d+)$")
PROCESS = re.compile(r'^process (\d+):"(.*)$')


def py_spy() -> str | None:
    """The py-spy binary next to this interpreter, installed on demand."""
    candidate = Path(sys.executable).with_name("py-spy")
    if not candidate.exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=False)
    if candidate.exists():
        return str(candidate)
    return shutil.which("py-spy")


def pyspy_command(binary: str, cmd: list[str], raw_out: Path, rate: int = 100) -> list[str]:
    """Wrap `cmd` so py-spy samples it and all its descendants."""
    return [binary, "record", "--subprocesses", "--nonblocking", "--format", "raw", "--rate", str(rate),
            "--output", str(raw_out), "--", *cmd]


def process_label(cmdline: str) -> str:
    """A short name for a sampled process (from its command line)."""
    if "txmq.broker.server" in cmdline:
        return "broker"
    if "pyspark" in cmdline or "daemon" in cmdline:
        return "spark worker"
    if "multiprocessing" in cmdline or "spawn_main" in cmdline:
        return "client process"
    if "bench/" in cmdline and ".py" in cmdline:
        return "bench driver"
    return "helper"


def parse_raw(text: str) -> list[tuple[str, list[tuple[str, str]], int]]:
    """Collapsed stacks → [(process label, [(function, file), root first], samples)].

    A record may span lines (command lines can hold newlines); its frames and
    count are on its last line."""
    records = []
    label = "helper"
    for line in text.splitlines():
        head = PROCESS.match(line)
        if head:
            label = process_label(head.group(2))
        end = RECORD_END.match(line)
        if not end:
            continue
        body = end.group(1)
        if '";' in body:
            body = body.rsplit('";', 1)[1]
        frames = [(m.group(1).strip(), m.group(2)) for m in FRAME.finditer(";" + body)]
        if frames:
            if label == "helper" and (ROOT / "bench" / frames[0][1]).is_file():
                label = "bench driver"  # py-spy could not read the command line; the stack says it
            records.append((label, frames, int(end.group(2))))
        label = "helper"
    return records


def is_project(file: str) -> bool:
    return file.startswith(PROJECT_DIRS) or any(f"/{d}" in file for d in PROJECT_DIRS)


def hot_functions(records, top: int = 3) -> dict:
    """Self and inclusive sample counts per function; the `top` heaviest txmq and overall."""
    startup = sum(n for _, frames, n in records if _is_startup(frames))
    records = [rec for rec in records if not _is_startup(rec[1])]
    total = sum(n for _, _, n in records)
    self_all: Counter = Counter()
    self_project: Counter = Counter()
    inclusive: Counter = Counter()
    where: dict[str, Counter] = {}
    for label, frames, n in records:
        leaf = f"{frames[-1][0]} ({frames[-1][1]})"
        self_all[leaf] += n
        for fn, file in reversed(frames):  # innermost txmq frame: what txmq code is doing at that moment
            if is_project(file):
                key = f"{fn} ({file})"
                self_project[key] += n
                where.setdefault(key, Counter())[label] += n
                break
        for key in {f"{fn} ({file})" for fn, file in frames}:
            inclusive[key] += n

    def rows(counter: Counter) -> list[dict]:
        return [{"function": key, "self_samples": n, "self_pct": round(100 * n / max(total, 1), 1),
                 "inclusive_pct": round(100 * inclusive[key] / max(total, 1), 1),
                 "process": where.get(key, Counter({"": 0})).most_common(1)[0][0]}
                for key, n in counter.most_common(top)]

    processes: Counter = Counter()
    broker_self: Counter = Counter()
    for label, frames, n in records:
        processes[label] += n
        if label == "broker":
            for fn, file in reversed(frames):
                if is_project(file):
                    broker_self[f"{fn} ({file})"] += n
                    break
    return {"samples": total, "startup_samples": startup, "by_process": dict(processes),
            "top_txmq": rows(self_project), "top_broker": rows(broker_self), "top_overall": rows(self_all)}


def _is_startup(frames: list[tuple[str, str]]) -> bool:
    """Samples taken while importing modules (process start-up), not the benchmarked work."""
    return any(file.startswith(("<frozen importlib", "<frozen zipimport")) for _, file in frames)


def profile_with_pyspy(binary: str, bench: str, args: list[str], timeout_s: float, rate: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="txmq-profile-") as tmp:
        raw = Path(tmp) / "raw.txt"
        cmd = pyspy_command(binary, [sys.executable, str(ROOT / "bench" / f"{bench}.py"), *args], raw, rate)
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        if not raw.exists():
            raise RuntimeError(f"py-spy wrote nothing: {done.stderr.strip()[-300:]}")
        return {"tool": "py-spy", "exit_code": done.returncode, **hot_functions(parse_raw(raw.read_text()))}


def profile_with_pyinstrument(bench: str, args: list[str], timeout_s: float) -> dict:
    """Fallback: the benchmark's main process only (pyinstrument cannot follow subprocesses)."""
    with tempfile.TemporaryDirectory(prefix="txmq-profile-") as tmp:
        out = Path(tmp) / "profile.txt"
        cmd = [sys.executable, "-m", "pyinstrument", "--renderer", "text", "--show-all", "--outfile", str(out),
               str(ROOT / "bench" / f"{bench}.py"), *args]
        subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        text = out.read_text() if out.exists() else ""
        lines = [ln.strip() for ln in text.splitlines() if any(d in ln for d in PROJECT_DIRS)]
        return {"tool": "pyinstrument (main process only)", "top_txmq": [{"function": ln} for ln in lines[:3]],
                "top_overall": []}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated benchmarks (default: all present)")
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per benchmark")
    args = ap.parse_args(argv)
    if args.only:
        names = args.only.split(",")
    else:
        sys.path.insert(0, str(ROOT))
        from bench.run_all import all_benchmarks

        names = [b.name for b in all_benchmarks()]
    binary = py_spy()
    result: dict = {"bench": "profile_hot_paths", "rate_hz": args.rate, "benchmarks": {}}
    for name in names:
        if not (ROOT / "bench" / f"{name}.py").exists():
            result["benchmarks"][name] = {"status": "missing"}
            continue
        started = time.monotonic()
        bench_args = ["--quick"]
        measured = RESULTS.parent / f"{name}.json"  # the profiled run must not replace the measured figures
        saved = measured.read_bytes() if measured.exists() else None
        try:
            if binary:
                prof = profile_with_pyspy(binary, name, bench_args, args.timeout, args.rate)
            else:
                prof = profile_with_pyinstrument(name, bench_args, args.timeout)
            prof["status"] = "ok"
        except Exception as exc:  # noqa: BLE001 - one failing profile must not stop the others
            prof = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:400]}
        finally:
            if saved is not None:
                measured.write_bytes(saved)
        prof["seconds"] = round(time.monotonic() - started, 1)
        result["benchmarks"][name] = prof
        print(f"profile {name}: {prof.get('status')} in {prof['seconds']} s", file=sys.stderr, flush=True)
    result["ratios"] = {}
    emit("profile_hot_paths", result, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
