"""The plots of bench/REPORT.md (matplotlib, Agg backend): medians with min-max error bars."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from report import Results

PLOTS = Path(__file__).resolve().parent / "plots"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _errbar(ax, xs, stats, label, **kw):
    pts = [(x, s) for x, s in zip(xs, stats) if s is not None]
    if not pts:
        return False
    x = [p[0] for p in pts]
    med = [p[1].median for p in pts]
    lo = [p[1].median - p[1].min for p in pts]
    hi = [p[1].max - p[1].median for p in pts]
    fmt = kw.pop("fmt", "o")
    ax.errorbar(x, med, yerr=[lo, hi], marker=fmt, capsize=3, label=label, **kw)
    return True


def _save(fig, name: str) -> str:
    PLOTS.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(PLOTS / name, dpi=90)
    _plt().close(fig)
    return f"plots/{name}"


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no data: {what}", ha="center", va="center", transform=ax.transAxes, color="gray")


def plot_throughput_vs_batch(r: Results) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    sizes = (1, 10, 100, 1000)
    drawn = False
    for kind, style in (("plain", "-"), ("transaction", "--")):
        drawn |= _errbar(ax, sizes, [r.get("scaling", f"batch.{kind}.{s}") for s in sizes],
                         f"txmq {kind} send (wire, 1 producer)", linestyle=style)
    for system, color, marker in (("txmq", "C2", "s"), ("rabbitmq", "C3", "^"), ("redis", "C4", "D")):
        drawn |= _errbar(ax, (1, 100), [r.get("broker", f"figures.b_tx1_p1.{system}.messages_per_s"),
                                        r.get("broker", f"figures.a_tx100.{system}.messages_per_s")],
                         f"{system} transactions (broker bench)", color=color, linestyle=":", fmt=marker)
    drawn |= _errbar(ax, (1, 100), [r.get("tx", "plain_msgs_per_s_1"), r.get("tx", "plain_msgs_per_s_100")],
                     "store append (in-process limit)", color="gray", linestyle="-.")
    drawn |= _errbar(ax, (1, 100), [r.get("tx", "tx_msgs_per_s_1"), r.get("tx", "tx_msgs_per_s_100")],
                     "engine prepare+commit (in-process)", color="black", linestyle="-.")
    if drawn:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    else:
        _empty(ax, "scaling/broker/tx")
    ax.set_xlabel("messages per batch / transaction")
    ax.set_ylabel("messages/s (median, min–max)")
    ax.set_title("Throughput against batch size (1 KiB bodies)")
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, "throughput_vs_batch.png")


def plot_latency(r: Results) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    groups = []
    for scenario, label in (("b_tx1_p1", "1-msg tx, 1 producer"), ("b_tx1_p8", "1-msg tx, 8 producers"),
                            ("a_tx100", "100-msg tx, 1 producer")):
        for system in ("txmq", "rabbitmq", "redis"):
            groups.append((f"{system}\n{label}", r.get("broker", f"figures.{scenario}.{system}.p50_ms"),
                           r.get("broker", f"figures.{scenario}.{system}.p99_ms")))
    for key, label in (("send_1", "RocketMQ send\n1 client"), ("transaction_1", "RocketMQ tx\n1 client"),
                       ("bare_grpc_1", "bare gRPC\n1 client")):
        groups.append((label, r.get("rocketmq_send", f"{key}.p50_ms"), r.get("rocketmq_send", f"{key}.p99_ms")))
    groups = [g for g in groups if g[1] is not None or g[2] is not None]
    if not groups:
        _empty(ax, "broker/rocketmq_send")
        return _save(fig, "latency_percentiles.png")
    width = 0.4
    for i, (pct, offset) in enumerate((("p50", -width / 2), ("p99", width / 2))):
        xs, meds, lo, hi = [], [], [], []
        for j, g in enumerate(groups):
            s = g[1 + i]
            if s is None:
                continue
            xs.append(j + offset)
            meds.append(s.median)
            lo.append(s.median - s.min)
            hi.append(s.max - s.median)
        ax.bar(xs, meds, width, yerr=[lo, hi], capsize=2, label=pct)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g[0] for g in groups], fontsize=6, rotation=60, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("latency, ms (median of runs, min–max)")
    ax.set_title("Latency percentiles (1 KiB bodies, loopback)")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, "latency_percentiles.png")


def _rows_keys(r: Results, bench: str) -> list[str]:
    return [k for k in r.keys(bench) if not k.startswith("ratios.") and
            any(w in k for w in ("rows_per_s", "rows_s", "msgs_per_s", "messages_per_s"))]


def plot_spark(r: Results) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, bench in zip(axes, ("spark_source", "spark_sink")):
        keys = _rows_keys(r, bench)
        if not keys:
            _empty(ax, f"{bench} ({r.status(bench)})")
            ax.set_title(bench)
            continue
        stats = [r.get(bench, k) for k in keys]
        colors = ["C0" if any(w in k.rsplit(".", 1)[-1] for w in ("txmq", "transactional")) else "gray"
                  for k in keys]
        ax.barh(range(len(keys)), [s.median for s in stats],
                xerr=[[s.median - s.min for s in stats], [s.max - s.median for s in stats]], color=colors,
                capsize=2)
        ax.set_yticks(range(len(keys)))
        ax.set_yticklabels([k.replace("rows_per_s.", "") for k in keys], fontsize=8)
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:.0f}k"))
        ax.set_xlabel("rows/s (median, min–max); blue = txmq, gray = ceilings")
        ax.set_title(bench)
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle("Spark rows/s against the ceilings")
    return _save(fig, "spark_rows.png")


def plot_recovery(r: Results) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    keys = [k for k in r.keys("store") if k.startswith("recovery_s_")]
    points = []
    for k in keys:
        suffix = k[len("recovery_s_"):]
        size = r.get("store", f"log_bytes_{suffix}")
        if size is not None:
            points.append((size.median / (1 << 20), r.get("store", k), r.get("store", f"recovery_scan_s_{suffix}")))
    points.sort(key=lambda p: p[0])
    if points:
        xs = [p[0] for p in points]
        _errbar(ax, xs, [p[1] for p in points], "store recovery after SIGKILL (total)")
        _errbar(ax, xs, [p[2] for p in points], "of which: CommitLog scan", linestyle="--")
        tx_recovery = r.get("tx", "recovery_from_snapshot_s")
        if tx_recovery is not None:
            ax.axhline(tx_recovery.median, color="gray", linestyle=":",
                       label="tx table rebuild, 100k pending (tx bench)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    else:
        _empty(ax, f"store ({r.status('store')})")
    ax.set_xlabel("CommitLog size, MiB")
    ax.set_ylabel("seconds (median, min–max)")
    ax.set_title("Recovery time against log size")
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, "recovery_vs_log_size.png")


def plot_scaling(r: Results) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    ax = axes[0]
    counts = (1, 2, 4, 8)
    drawn = False
    for batch in ("batch_1", "batch_100"):
        drawn |= _errbar(ax, counts, [r.get("scaling", f"producers.{batch}.{n}") for n in counts],
                         f"{batch.replace('_', ' ')} per send")
    if drawn:
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    else:
        _empty(ax, "scaling.producers")
    ax.set_xticks(counts)
    ax.set_xlabel("concurrent producer processes")
    ax.set_ylabel("messages/s")
    ax.set_title("Producers")
    ax.grid(True, alpha=0.3)

    ax = axes[1]
    pulls = [r.get("scaling", f"pull.{q}_queues") for q in (1, 4)]
    if any(pulls):
        ax.bar([0, 1], [p.median if p else 0 for p in pulls],
               yerr=[[p.median - p.min if p else 0 for p in pulls], [p.max - p.median if p else 0 for p in pulls]],
               capsize=3)
        ax.set_xticks([0, 1])
        ax.set_xticklabels(["1 queue\n1 consumer", "4 queues\n4 consumers"])
    else:
        _empty(ax, "scaling.pull")
    ax.set_ylabel("messages/s")
    ax.set_title("Pull (PullArrow)")
    ax.grid(True, axis="y", alpha=0.3)

    ax = axes[2]
    sizes = sorted({int(k.split(".")[1]) for k in r.keys("scaling", "checkback.")})
    if sizes:
        _errbar(ax, sizes, [r.get("scaling", f"checkback.{s}.scan_s") for s in sizes], "full scan, s")
        ax2 = ax.twinx()
        _errbar(ax2, sizes, [r.get("scaling", f"checkback.{s}.per_tx_us") for s in sizes], "µs per transaction",
                color="C1", linestyle="--")
        ax2.set_ylabel("µs per transaction", color="C1")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(loc="upper left", fontsize=8)
    else:
        _empty(ax, "scaling.checkback")
    ax.set_xlabel("pending transactions")
    ax.set_ylabel("full check-back scan, s")
    ax.set_title("Check-back scan")
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, "scaling.png")
