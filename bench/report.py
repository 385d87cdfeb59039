"""Write bench/REPORT.md, bench/plots/*.png and docs/benchmarks.md from bench/results/summary.json.

    .venv/bin/python bench/report.py            # from the last `make bench` / `make bench-quick`

The summary (bench/run_all.py) holds, per benchmark, every run's JSON line and
each numeric figure's median, min and max over the runs. This module only
reads it: the tables show medians with [min–max], the plots draw medians with
min–max error bars. A benchmark that was missing or failed keeps its row,
saying so. Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # report_plots, also when imported as bench.report

import report_plots  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
REPORT = BENCH / "REPORT.md"
DOCS = ROOT / "docs" / "benchmarks.md"
SUMMARY = BENCH / "results" / "summary.json"

# Report order (summary.json is written with sorted keys): storage up to Spark, as run_all runs them.
ORDER = ("store", "tx", "grpc_server_models", "rocketmq_send", "broker", "pull_columnar", "flight_pull", "scaling",
         "spark_source", "spark_sink", "vs_peers")
PEER_WORDS = ("rabbitmq", "redis", "kafka", "vs_rocketmq")
LIMIT_WORDS = ("raw", "bare", "ceiling", "limit", "pread", "fsync_loop", "ideal", "pyarrow", "spark",
               "vs_plain", "target", "direct", "file", "memory", "parquet")
SCALING_WORDS = ("_vs_1", "vs_smallest", "aio_vs_sync", "per_tx_")
# Ratios worth a line in docs/benchmarks.md (prefix match on "bench:ratio").
KEY_RATIOS = ("broker:a_tx100_msgs_vs", "broker:b_tx1_p1_tps_vs", "broker:b_tx1_p8_tps_vs", "store:append_vs_raw_loop",
              "store:read_vs_raw", "store:recovery_largest", "tx:tx_cost_vs_plain_append", "rocketmq_send:send_vs",
              "rocketmq_send:transaction_vs", "spark_source:", "spark_sink:", "scaling:producers_8_vs_1",
              "scaling:pull_4q", "scaling:checkback_per_tx", "pull_columnar:", "flight_pull:", "vs_peers:")


@dataclass(frozen=True)
class Stat:
    median: float
    min: float
    max: float
    n: int

    def text(self, digits: int = 3) -> str:
        fmt = _fmt(self.median, digits)
        if self.n > 1 and (self.min != self.max):
            return f"{fmt} [{_fmt(self.min, digits)}–{_fmt(self.max, digits)}]"
        return fmt


def _fmt(value: float, digits: int = 3) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


class Results:
    """Read access to the summary: figures as Stats, whatever the bench's own nesting."""

    def __init__(self, summary: dict) -> None:
        self.summary = summary
        benches = summary.get("benchmarks", {})
        rank = {name: i for i, name in enumerate(ORDER)}
        self.benches: dict = {k: benches[k] for k in sorted(benches, key=lambda k: (rank.get(k, len(rank)), k))}

    def status(self, bench: str) -> str:
        return self.benches.get(bench, {}).get("status", "not run")

    def figures(self, bench: str) -> dict:
        return self.benches.get(bench, {}).get("figures", {})

    def get(self, bench: str, key: str) -> Stat | None:
        """A figure by dotted key; a self-repeating bench's {median,min,max} figures are unpacked."""
        figs = self.figures(bench)
        if f"{key}.median" in figs:
            return Stat(figs[f"{key}.median"]["median"], figs.get(f"{key}.min", figs[f"{key}.median"])["min"],
                        figs.get(f"{key}.max", figs[f"{key}.median"])["max"],
                        int(len(self._runs_list(bench, key)) or figs[f"{key}.median"]["n"]))
        if key in figs:
            f = figs[key]
            return Stat(f["median"], f["min"], f["max"], f["n"])
        return None

    def _runs_list(self, bench: str, key: str) -> list:
        runs = self.benches.get(bench, {}).get("runs", [])
        node = runs[-1] if runs else {}
        for part in key.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return node.get("runs", []) if isinstance(node, dict) else []

    def keys(self, bench: str, prefix: str = "") -> list[str]:
        out = []
        for key in self.figures(bench):
            for suffix in (".median", ".min", ".max", ".runs"):
                if key.endswith(suffix) and f"{key[: -len(suffix)]}.median" in self.figures(bench):
                    key = key[: -len(suffix)]
            if key.startswith(prefix) and key not in out:
                out.append(key)
        return out

    def ratios(self, bench: str) -> dict[str, Stat]:
        return {k[len("ratios."):]: s for k in self.keys(bench, "ratios.") if (s := self.get(bench, k))}

    def runs(self, bench: str) -> int:
        return len(self.benches.get(bench, {}).get("runs", []))


# ---- tables -----------------------------------------------------------------------------------


def ratio_kind(name: str) -> str:
    low = name.lower()
    if any(w in low for w in PEER_WORDS):
        return "vs peer"
    if any(w in low for w in SCALING_WORDS):
        return "scaling"
    if any(w in low for w in LIMIT_WORDS):
        return "vs limit"
    return "other"


def ratio_targets(r: Results, bench: str) -> dict[str, str]:
    """Targets a benchmark states for its ratios: a "target" dict, or "<ratio>_target" entries."""
    runs = r.benches.get(bench, {}).get("runs", [])
    last = runs[-1] if runs else {}
    out = {}
    if isinstance(last.get("target"), dict):
        out.update({k: f"≥ {v}" for k, v in last["target"].items()})
    for k, v in (last.get("ratios") or {}).items():
        if k.endswith("_target"):
            out[k[: -len("_target")]] = f"≥ {v}"
    return out


def better(name: str) -> str:
    """↑ when a larger ratio is better for txmq (throughput), ↓ when smaller is (cost, time)."""
    low = name.lower()
    if low.endswith(("_vs_kafka", "_vs_rocketmq")):  # bench/vs_peers.py: > 1 is txmq ahead, latencies too
        return "↑"
    return "↓" if any(w in low for w in ("cost", "per_tx", "recovery", "latency", "p99", "p50", "_s_")) else "↑"


def ratio_rows(r: Results, key_only: bool = False) -> list[str]:
    rows = ["| benchmark | ratio | compares | median [min–max] | better | target | runs |",
            "|---|---|---|---|---|---|---|"]
    for bench, entry in r.benches.items():
        ratios = r.ratios(bench)
        if entry.get("status") in ("missing", "failed") and not key_only:
            rows.append(f"| {bench} | — | — | **{entry.get('status')}**: {_cell(entry.get('error', ''))} | | | 0 |")
            continue
        goals = ratio_targets(r, bench)
        for name, stat in ratios.items():
            if name.endswith("_target"):
                continue
            if key_only and not any(f"{bench}:{name}".startswith(k) for k in KEY_RATIOS):
                continue
            runs = str(r.runs(bench))
            if entry.get("self_repeating") and entry.get("runs"):
                runs += f" (of medians of {entry['runs'][-1].get('repeats', '?')})"
            rows.append(f"| {bench} | `{name}` | {ratio_kind(name)} | {stat.text()} | {better(name)} "
                        f"| {goals.get(name, '')} | {runs} |")
    return rows


def peers_section(r: Results) -> list[str]:
    """The JVM peers' versions and settings and the issue's goals, as the last vs_peers run recorded them."""
    runs = r.benches.get("vs_peers", {}).get("runs", [])
    if not runs:
        return [f"Not run ({r.status('vs_peers')})."]
    last = runs[-1]
    out = ["| goal | txmq / peer, this run | goal | met |", "|---|---|---|---|"]
    for name, g in (last.get("goals") or {}).items():
        measured = "—" if g.get("measured") is None else g["measured"]
        out.append(f"| `{name}` | {measured} | ≥ {g.get('goal')} | {'yes' if g.get('met') else '**no**'} |")
    out.append(replication_goal_row(r))
    out += official_client_cpu(last.get("rocketmq") or {})
    out += ["", "Where each missed goal's time goes (per process) and what would close it: "
            "[docs/benchmarks.md](../docs/benchmarks.md), \"Issue #42's goals on the final code\"."]
    peers = last.get("peers", {})
    out += ["", f"Java: {peers.get('java', '?')}; pyspark of the Spark comparisons: "
            f"{(last.get('spark') or {}).get('pyspark', '—')}.", ""]
    for name in ("txmq", "kafka", "rocketmq"):
        conf = peers.get(name) or {}
        flat = {k: v for k, v in conf.items() if not isinstance(v, dict)}
        out.append(f"- **{name}**: " + "; ".join(f"{k}: {v}" for k, v in flat.items()))
        for k, v in conf.items():
            if isinstance(v, dict):
                out.append(f"  - {k}: " + ", ".join(f"`{kk}={vv}`" for kk, vv in v.items()))
    if last.get("errors"):
        out += ["", "Errors: " + "; ".join(f"{k}: {_cell(v)}" for k, v in last["errors"].items())]
    return out


def official_client_cpu(rocketmq: dict) -> list[str]:
    """Per official-client load (`rocketmq.<mode>_p<threads>`): each side's calls/s and the CPU one
    call took in the client process and in the broker's processes (vs_peers_rmq_client.py)."""
    rows = []
    for load, sides in rocketmq.items():
        if not isinstance(sides, dict) or not all(isinstance(sides.get(s), dict) and "per_s" in sides[s]
                                                  for s in ("txmq", "rocketmq")):
            continue
        cells = [f"{sides[s]['per_s']} / {sides[s].get('client_cpu_ms_per_call', '—')} / "
                 f"{sides[s].get('broker_cpu_ms_per_call', '—')}" for s in ("txmq", "rocketmq")]
        rows.append(f"| `{load}` | {cells[0]} | {cells[1]} |")
    if not rows:
        return []
    return ["", "The official client's loads, per side: calls/s / the client's CPU per call (ms) / the broker's "
            "processes' CPU per call (ms), same client, same host:", "",
            "| load | txmq | Apache RocketMQ |", "|---|---|---|", *rows]


def replication_goal_row(r: Results) -> str:
    """The goal row of the price of replication (bench/replication_cost.py): a txmq group of three over
    one broker, against Kafka RF=3 over RF=1, measured in the same run; met when txmq's ratio is at least Kafka's."""
    runs = r.benches.get("replication_cost", {}).get("runs", [])
    ratios = (runs[-1].get("ratios") or {}) if runs else {}
    over = ratios.get("txmq_over_kafka")
    if over is None:
        return f"| `replication_txmq_over_kafka` | — ({r.status('replication_cost')}) | ≥ 1.0 | **no** |"
    txmq, kafka = (ratios.get(k, {}).get("median") for k in ("txmq_group_vs_single", "kafka_rf3_vs_rf1"))
    return (f"| `replication_txmq_over_kafka` (group / single {txmq}, Kafka RF=3 / RF=1 {kafka}) | {over} "
            f"| ≥ 1.0 | {'yes' if over >= 1.0 else '**no**'} |")


def _cell(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")[:200]


def targets(r: Results) -> list[str]:
    out = []
    for bench, entry in r.benches.items():
        for run in entry.get("runs", [])[-1:]:
            for key in ("targets_met", "target_met"):
                if key in run:
                    met = run[key]
                    if isinstance(met, dict):
                        out += [f"- {bench}: `{k}` {'met' if v else '**not met**'}" for k, v in met.items()]
                    else:
                        out.append(f"- {bench}: target {'met' if met else '**not met**'}")
    return out


def figure_tables(r: Results) -> list[str]:
    out = []
    for bench, entry in r.benches.items():
        keys = [k for k in r.keys(bench) if not k.startswith("ratios.") and not k.endswith(".n")]
        if not keys:
            continue
        out += [f"<details><summary>{bench}: all figures ({len(keys)})</summary>", "",
                "| figure | median [min–max] |", "|---|---|"]
        out += [f"| `{k}` | {s.text(4)} |" for k in keys if (s := r.get(bench, k))]
        out += ["", "</details>", ""]
    return out


def profile_section(summary: dict) -> list[str]:
    prof = summary.get("profile") or {}
    benches = prof.get("benchmarks") or {}
    if not benches:
        return [f"Profiling was not run ({prof.get('status', 'skipped')}: {prof.get('error', '')})."]
    out = [f"Sampled with {_tool(benches)} ({prof.get('rate_hz', 100)} Hz, `--subprocesses --nonblocking`) "
           f"during the first measured run of each benchmark: broker, client and Spark worker processes "
           f"included; threads py-spy sees as idle and module imports (start-up) excluded (idle detection is "
           f"heuristic: some waits, e.g. `Condition.wait`, still show in the last column). *Self* = samples where the function "
           f"is the innermost txmq frame (txmq code running, or calling into C or a library, at that moment), "
           f"as % of the run's active samples; *inclusive* = on the stack at all. The broker-process column is "
           f"the server side of the wire benchmarks, where the next optimisation goes; the last column shows "
           f"when gRPC, Arrow, a peer's client or Spark itself dominates. Raw stacks: "
           f"`bench/results/logs/<name>.pyspy.txt` (not committed).",
           "", "| benchmark | # | heaviest txmq functions, all processes (self %, inclusive %, process) "
           "| heaviest txmq functions in the broker process | heaviest of any code |",
           "|---|---|---|---|---|"]
    rank = {name: i for i, name in enumerate(ORDER)}
    for bench, p in sorted(benches.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])):
        if p.get("status") != "ok":
            out.append(f"| {bench} | | **{p.get('status')}** {_cell(p.get('error', ''))} | |")
            continue
        tops, brk, overall = p.get("top_txmq", []), p.get("top_broker", []), p.get("top_overall", [])
        for i in range(max(len(tops), len(brk), len(overall), 1)):
            t = tops[i] if i < len(tops) else None
            b = brk[i] if i < len(brk) else None
            o = overall[i] if i < len(overall) else None
            tcell = (f"`{t['function']}` {t.get('self_pct', '?')}% / {t.get('inclusive_pct', '?')}% "
                     f"({t.get('process', '')})") if t else ""
            bcell = f"`{b['function']}` {b.get('self_pct', '?')}% / {b.get('inclusive_pct', '?')}%" if b else ""
            ocell = f"`{o['function']}` {o.get('self_pct', '?')}%" if o else ""
            name = bench if i else f"{bench} ({p.get('samples', 0):,} samples)"
            out.append(f"| {name} | {i + 1} | {tcell} | {bcell} | {ocell} |")
    return out


def _tool(benches: dict) -> str:
    tools = {p.get("tool") for p in benches.values() if p.get("tool")}
    return ", ".join(sorted(tools)) or "py-spy"


# ---- analysis (growth) ----------------------------------------------------------------------


def growth_section(r: Results) -> list[str]:
    """Where cost grows faster than the work, with the figures of this run and the reason in the code."""
    out = []
    cb = sorted({int(k.split(".")[1]) for k in r.keys("scaling", "checkback.")})
    if cb:
        per = {s: r.get("scaling", f"checkback.{s}.per_tx_us") for s in cb}
        scan = {s: r.get("scaling", f"checkback.{s}.scan_s") for s in cb}
        snap = {s: r.get("scaling", f"checkback.{s}.snapshot_s") for s in cb}
        rebuild = {s: r.get("scaling", f"checkback.{s}.table_rebuild_s") for s in cb}
        idle = {s: r.get("scaling", f"checkback.{s}.idle_round_ms") for s in cb}
        small, large = cb[0], cb[-1]
        if all(per.values()) and all(scan.values()):
            growth = per[large].median / per[small].median
            line = "; ".join(f"{s:,}: {scan[s].median:.2f} s, {per[s].median:.1f} µs/tx" for s in cb)
            verdict = ("the scan grows faster than the work" if growth > 1.2 else
                       "the scan grows in proportion to the work" if growth > 0.8 else
                       "the scan grows no faster than the work (fixed per-round costs amortise)")
            why = CHECKBACK_FLAT
            if growth > 1.2:
                why = CHECKBACK_GROWS
                if rebuild.get(small) and rebuild.get(large):
                    g_rebuild = (rebuild[large].median / large) / (rebuild[small].median / small)
                    if g_rebuild > 1.2:
                        why = CHECKBACK_GROWS_TABLE.format(g=g_rebuild)
            out.append(f"- **Check-back scan** ({line}): the per-transaction cost ×{growth:.2f} from {small:,} "
                       f"to {large:,} pending — {verdict}. " + CHECKBACK_WHY + why)
        if all(snap.values()):
            worst = snap[large].median
            est = ""
            if scan.get(large) and scan[large].median > 10:
                n_snaps = int(scan[large].median // 10)
                est = (f" A {large:,}-transaction scan lasts {scan[large].median:.0f} s, so at the default "
                       f"interval it would carry ~{n_snaps} snapshots, ~{n_snaps * worst:.0f} s more: scan work "
                       f"O(n) times snapshots O(n) each is O(n²).")
            out.append("- **Table snapshots inside check-back rounds** (one snapshot: " +
                       ", ".join(f"{s:,} → {snap[s].median:.2f} s" for s in cb) + "). " + SNAPSHOT_WHY + est +
                       " An incremental snapshot (only the rows changed since the last one) would bound it.")
        if all(rebuild.values()):
            g = (rebuild[large].median / large) / (rebuild[small].median / small)
            out.append("- **Table rebuild after a crash without snapshot** (" +
                       ", ".join(f"{s:,} → {rebuild[s].median:.2f} s ({rebuild[s].median / s * 1e6:.0f} µs/tx)"
                                 for s in cb) + f"; per transaction ×{g:.2f}): a full replay of the half and op "
                       "queues (`recovery.recover_table`: a record decode, a dict lookup and a set insert per half), "
                       "linear in the pending halves in its algorithm " +
                       ("but slower per row as the table outgrows the CPU caches; "
                        if g > 1.2 else "and in the measurement; ") +
                       "the engine then writes a snapshot of the whole table (the snapshot line above), so a "
                       "restart after a crash costs both.")
        if all(idle.values()):
            out.append("- An idle round (nothing due) stays flat: " +
                       ", ".join(f"{s:,} → {idle[s].median:.3f} ms" for s in cb) +
                       " — `claim_due` looks only at the due-heap's head.")
    prod = {b: {n: r.get("scaling", f"producers.{b}.{n}") for n in (1, 2, 4, 8)} for b in ("batch_1", "batch_100")}
    for batch, series in prod.items():
        if series[1] and series[8]:
            ratio = series[8].median / series[1].median
            trend = "falls to" if ratio < 0.8 else "stays at" if ratio < 1.25 else "grows only to"
            out.append(f"- **Concurrent producers, {batch.replace('_', ' ')} per send**: with 8 producers offering "
                       f"8× the work, throughput {trend} ×{ratio:.2f} the one-producer figure ("
                       f"{', '.join(f'{n}: {s.median:,.0f}' for n, s in series.items() if s)} msg/s), so the "
                       f"cost per message grows with concurrency. "
                       + (PRODUCERS_WHY_1 if batch == "batch_1" else PRODUCERS_WHY_100))
    p1, p4 = r.get("scaling", "pull.1_queues"), r.get("scaling", "pull.4_queues")
    if p1 and p4:
        ratio = p4.median / p1.median
        out.append(f"- **Pull with 4 queues and 4 consumers**: ×{ratio:.2f} of one queue "
                   f"({p1.median:,.0f} → {p4.median:,.0f} msg/s). " + (PULL_SCALES if ratio >= 1.5 else PULL_WHY))
    for kind in ("plain", "transaction"):
        b100, b1000 = r.get("scaling", f"batch.{kind}.100"), r.get("scaling", f"batch.{kind}.1000")
        if b100 and b1000 and b1000.median < 0.9 * b100.median:
            out.append(f"- **{kind.capitalize()} batches of 1000 are slower per message than batches of 100** "
                       f"({b100.median:,.0f} → {b1000.median:,.0f} msg/s). " + BATCH_WHY)
    return out or ["(the scaling benchmark did not run)"]


CHECKBACK_WHY = (
    "Per transaction a round does (`CheckbackService.run_once`): `TransactionEngine.claim_due` — a heap "
    "pop under the table lock, O(log n); `check_verdict`; `_deliver` → `engine.info(tx)`, which builds a "
    "`TransactionInfo` with `Transaction.topics()`/`senders()` recomputed as sorted sets of the halves, and "
    "`engine.first_half(tx)`, which for a half not in the 64 MiB half cache (every half after a restart, as "
    "here) is a `MessageStore.read_at` — a CommitLog read and record decode, scattered over a log that grows "
    "with n; then `record_check` → `_schedule`, a heap push, O(log n). ")
CHECKBACK_GROWS_TABLE = (
    "The table rebuild below, which reads the same halves sequentially and touches no heap, grows ×{g:.2f} per "
    "row over the same range, so most of the growth is the cost of a larger table itself — a million "
    "`Transaction` objects, their half references and dict entries spread far beyond the CPU caches, and "
    "CommitLog reads scattered over a ~1 GiB log — more than the heap's O(log n). Keeping table rows compact "
    "(fewer Python objects per transaction) and caching each transaction's first half (all a check shows) "
    "would attack both.")
CHECKBACK_GROWS = (
    "That growth is the heap's O(n log n) and the CommitLog reads losing locality as the log outgrows the "
    "caches; caching only each transaction's first half (all a check shows) would remove the reads.")
CHECKBACK_FLAT = (
    "In theory the heap makes a scan O(n log n) and the reads lose locality as the log grows; measured, both "
    "stay small next to the per-check constant — Python object construction (`TransactionInfo`, "
    "`StoredMessage`) and the record decode — so the scan itself is not where the cost runs away.")
SNAPSHOT_WHY = (
    "A snapshot encodes every pending row (`TransactionEngine.snapshot` → `encode_tx` per row, under the "
    "exclusive gate, so prepares and commits wait), O(table). `CheckbackService.run_once` ends with "
    "`engine.maybe_snapshot()`, which takes one whenever `snapshot_interval_s` (10 s) has passed: a scan "
    "that lasts longer than 10 s pays a whole-table snapshot every 10 s, so its cost grows with the table "
    "size times the scan length. (The scan figures above hold the periodic snapshot off and measure it apart.)")
PRODUCERS_WHY_1 = (
    "One-message sends are bound by per-RPC work in the one broker process: gRPC's thread pool hands each "
    "call to a Python handler that needs the GIL, and `MessageStore.append` serialises writers on its "
    "`_write_lock`; on 2 cores the producer processes compete with the broker for CPU, so extra producers "
    "add queueing (latency) rather than throughput.")
PRODUCERS_WHY_100 = (
    "With 100-message batches the per-RPC cost is amortised and the single writer (`WriteLock` "
    "around the CommitLog append and dispatch, plus Arrow decode under the GIL) is the limit; more producers "
    "only add contention for that lock, for the GIL and for the two cores (their own processes included).")
PULL_WHY = (
    "Each queue has its own consumer process, but every PullArrow is served by the same broker process: the "
    "queue read and the Arrow encoding (`server/native_pull.py`) run under its GIL, so four concurrent pulls "
    "share one core's worth of Python work while the four consumers compete for the other core.")
PULL_SCALES = (
    "One consumer is latency-bound, not CPU-bound: per PullArrow the broker reads the records and builds the "
    "Arrow batch (`server/native_pull.py`) while the consumer waits, then "
    "the consumer decodes while the broker idles. Four consumers overlap those phases across both cores, so "
    "pulls scale with queues until the broker's GIL is saturated; a single consumer would gain the same by "
    "pipelining (keeping the next pull in flight while decoding).")
BATCH_WHY = (
    "A 1000 × 1 KiB batch is a ~1 MiB Arrow payload decoded, validated and appended in one call under the "
    "store's write lock: client and broker no longer overlap (no pipelining between them), and the larger "
    "buffers cost more copying than the RPCs saved.")


# ---- the report -------------------------------------------------------------------------------


def header(summary: dict) -> list[str]:
    m, v, peers = summary.get("machine", {}), summary.get("versions", {}), summary.get("peers", {})
    mode = "quick (`make bench-quick`)" if summary.get("quick") else "full (`make bench`)"
    vers = ", ".join(f"{k} {v[k]}" for k in ("python", "grpcio", "protobuf", "pyarrow", "pyspark", "rabbitmq",
                                             "redis-server", "pika", "redis", "apache-kafka", "apache-rocketmq",
                                             "confluent-kafka", "java") if k in v)
    return [
        "# txmq benchmark report",
        "",
        f"Generated by `bench/run_all.py` ({mode}) on {summary.get('started_utc', '?')} at commit "
        f"`{summary.get('commit', '?')}`, total {summary.get('total_seconds', '?')} s.",
        "",
        f"**Machine**: {m.get('cores', '?')} cores ({m.get('cpu', '?')}), {m.get('memory_gib', '?')} GiB memory, "
        f"Linux {m.get('kernel', '?')}. The machine was shared with other work while this ran, so absolute "
        "figures move between runs; ratios are measured within one run against a peer or a limit on the same "
        "machine at the same time.",
        "",
        f"**Versions**: {vers}.",
        "",
        *([f"**Peers unavailable**: {', '.join(f'{k} ({v})' for k, v in peers.items() if v != 'ok')}.", ""]
          if any(v != "ok" for v in peers.values()) else []),
        "Every figure is the median of the runs with [min–max]; a ratio is the median of the per-run ratios. "
        "Raw runs: `bench/results/summary.json`; each script's last run, stamped with the commit it measured, "
        "the host's load and the peers' versions: `bench/results/<name>.json`.",
        "",
    ]


def bench_status(r: Results) -> list[str]:
    out = ["| benchmark | what | args | status | runs | seconds per run |", "|---|---|---|---|---|---|"]
    for name, e in r.benches.items():
        status = e.get("status", "?")
        if status != "ok":
            status = f"**{status}**" + (f": {_cell(e.get('error', ''))}" if e.get("error") else "")
        secs = ", ".join(f"{s:.0f}" for s in e.get("seconds", []))
        args = " ".join(e.get("args", [])) or "(full size)"
        out.append(f"| `{e.get('script', name)}` | {e.get('what', '')} | `{args}` | {status} | "
                   f"{len(e.get('runs', []))} | {secs} |")
    out += ["", "Runs beyond the first are added, cheapest benchmark first, while the time budget lasts "
            f"({summary_budget(r)}); the first run of each is also the profiled one, but for the comparisons against "
            "JVM peers (`vs_peers`, `replication_cost`), which run unsampled: py-spy samples only txmq's Python side. "
            "To keep `make bench` under "
            "20 minutes on 2 cores (plus `bench/vs_peers.py`'s own share, which runs at full size once), the store, tx, broker and Spark scripts run at their `--quick` sizes; run a "
            "script directly for its full-size figures (e.g. the store's 4 GiB recovery, Spark's 2M rows)."]
    return out


def summary_budget(r: Results) -> str:
    budget = r.summary.get("budget_s")
    return f"{budget / 60:.0f} min" if budget else "no budget: --quick runs each once"


def write_report(summary: dict) -> str:
    r = Results(summary)
    plots = {}
    for name, fn in (("throughput", report_plots.plot_throughput_vs_batch), ("latency", report_plots.plot_latency),
                     ("spark", report_plots.plot_spark), ("recovery", report_plots.plot_recovery),
                     ("scaling", report_plots.plot_scaling)):
        try:
            plots[name] = fn(r)
        except Exception as exc:  # noqa: BLE001 - a broken plot must not lose the tables
            plots[name] = None
            print(f"plot {name} failed: {exc}", file=sys.stderr)
    lines = header(summary)
    lines += ["## Benchmarks run", ""] + bench_status(r) + [""]
    lines += ["## Ratios (txmq vs peer vs limit)", "",
              "*vs peer*: RabbitMQ / Redis doing the same work; *vs limit*: the same work done by the simplest "
              "possible code (raw file loop, bare gRPC call, plain append, Spark/Arrow ceiling); *scaling*: txmq "
              "against itself with more concurrency, queues or pending work. *better*: ↑ a larger ratio is better "
              "for txmq (throughputs), ↓ a smaller one is (costs, times).", ""]
    lines += ratio_rows(r) + [""]
    tg = targets(r)
    if tg:
        lines += ["Targets reported by the benchmarks (last run):", ""] + tg + [""]
    lines += ["## Plots", ""]
    for name, title in (("throughput", "Throughput against batch size"), ("latency", "Latency percentiles"),
                        ("spark", "Spark rows/s against the ceilings"), ("recovery", "Recovery time against log size"),
                        ("scaling", "Scaling: producers, queues, pending transactions")):
        if plots.get(name):
            lines += [f"### {title}", "", f"![{title}]({plots[name]})", ""]
    lines += ["## Kafka and RocketMQ 5 (bench/vs_peers.py)", ""] + peers_section(r) + [""]
    lines += ["## Where cost grows faster than the work", ""] + growth_section(r) + [""]
    lines += ["## Hot paths (profile)", ""] + profile_section(summary) + [""]
    lines += ["## All figures", ""] + figure_tables(r)
    lines += ["", "Reproduce: `make bench` (full, < 20 min on 2 cores) or `make bench-quick` (a few minutes); "
              "`.venv/bin/python bench/report.py` rewrites this file and the plots from "
              "`bench/results/summary.json`.", ""]
    REPORT.write_text("\n".join(lines))
    write_docs(r, summary)
    return str(REPORT)


def write_docs(r: Results, summary: dict) -> None:
    m = summary.get("machine", {})
    lines = [
        "# Benchmarks",
        "",
        "`make bench` runs every benchmark in `bench/` against its peers in one command: it installs and starts "
        "private RabbitMQ and Redis instances (Debian's rabbitmq-server and redis-server, driven by pika and "
        "redis-py), runs the storage, transaction, RocketMQ-protocol, broker, scaling and Spark benchmarks "
        "several times each, stops every process it started, profiles the hot paths with py-spy, and writes "
        "[`bench/REPORT.md`](../bench/REPORT.md) with plots in `bench/plots/`. Each ratio compares figures "
        "measured in the same run (txmq against RabbitMQ/Redis, or against the simplest code doing the same "
        "work: a raw file loop, a bare gRPC call, a plain append); figures are medians with [min–max]. "
        "`make bench-quick` is the few-minute variant for development. In the table, ↑ means a larger ratio is "
        "better for txmq (throughput against a peer or limit), ↓ that a smaller one is (a cost or a time).",
        "",
        f"Key ratios from the committed report ({'quick' if summary.get('quick') else 'full'} run, "
        f"{summary.get('started_utc', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB):",
        "",
    ]
    lines += ratio_rows(r, key_only=True)
    lines += ["", "The full tables, the plots, where cost grows faster than the work, and the three heaviest "
              "functions of each benchmark are in [`bench/REPORT.md`](../bench/REPORT.md).", "", NOTES_MARKER]
    DOCS.write_text("\n".join(lines) + kept_notes(DOCS.read_text() if DOCS.exists() else ""))


NOTES_MARKER = "<!-- bench/report.py rewrites the page above this line; the notes below it are kept -->"


def kept_notes(page: str) -> str:
    """What follows NOTES_MARKER on the current page (the hand-written notes on each session's
    figures): a report run replaces the generated table, never the notes."""
    _, marker, notes = page.partition(NOTES_MARKER)
    return notes if marker else "\n"


def main() -> int:
    print(write_report(json.loads(SUMMARY.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
