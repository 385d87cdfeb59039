"""What the CommitLog's page-cache window saves on a long write (in-process, one run).

    .venv/bin/python bench/page_cache.py [--quick] [--repeat K]

Appends GIBS GiB of 1 KiB messages (4096 per append, async flush) to a fresh
MessageStore twice per round: with the page-cache window (flushed bytes older
than the window are dropped from the page cache, store/page_cache.py) and
without it (page_cache_keep_bytes=0: the kernel keeps every written page). The
two take turns, --repeat rounds (default 2), the best of each counts. Full size:
6 GiB with the default 2 GiB window; --quick: 3 GiB with a 1 GiB window.

On a machine where the host backs guest memory lazily, a page that was not used
recently costs a host fault on its first write, charged as system time; the
window keeps the writes on recently freed pages. On a machine without that cost
the two figures come out alike. Ratios: CPU per message (user + system) and wall
time, with the window against without it. Prints one JSON line and writes
bench/results/page_cache.json.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results_io import emit  # noqa: E402
from txmq.broker.store.batch import BatchColumns  # noqa: E402
from txmq.broker.store.config import StoreConfig  # noqa: E402
from txmq.broker.store.message_store import MessageStore  # noqa: E402

BODY = os.urandom(1024)
BATCH = 4096
QUEUES = 4


def write_log(directory: Path, total_bytes: int, keep_bytes: int) -> dict:
    """Append ~total_bytes of 1 KiB messages; user/system CPU and wall time per message."""
    store = MessageStore(StoreConfig(directory, flush_mode="async", page_cache_keep_bytes=keep_bytes))
    batch = BatchColumns.of_bodies(["bench"] * BATCH, [BODY] * BATCH, [i % QUEUES for i in range(BATCH)],
                                   1_700_000_000_000)
    messages = 0
    before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    try:
        while store.commitlog.write_end < total_bytes:
            store.append_columns(batch)
            messages += BATCH
        wall = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_SELF)
        released = store.page_cache.released_bytes
    finally:
        store.close()
        shutil.rmtree(directory)
    return {"user_us": (after.ru_utime - before.ru_utime) / messages * 1e6,
            "sys_us": (after.ru_stime - before.ru_stime) / messages * 1e6,
            "wall_us": wall / messages * 1e6, "released_gib": released / 2**30}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="3 GiB with a 1 GiB window instead of 6 with 2")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the best of each mode counts")
    args = parser.parse_args()
    gib, window = (3, 1 << 30) if args.quick else (6, StoreConfig(Path(".")).page_cache_keep_bytes)
    runs: dict[str, list[dict]] = {"window": [], "no_window": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.repeat):
            for mode, keep in (("window", window), ("no_window", 0)):
                runs[mode].append(write_log(Path(tmp) / f"{mode}-{rnd}", gib << 30, keep))
    best = {mode: min(rs, key=lambda r: r["user_us"] + r["sys_us"]) for mode, rs in runs.items()}
    cpu = {mode: r["user_us"] + r["sys_us"] for mode, r in best.items()}
    wall = {mode: min(r["wall_us"] for r in rs) for mode, rs in runs.items()}
    emit("page_cache", {
        "log_gib": gib, "window_gib": window / 2**30, "body_bytes": len(BODY), "messages_per_append": BATCH,
        "us_per_msg": {mode: {k: round(v, 3) for k, v in r.items() if k != "released_gib"} for mode, r in best.items()},
        "released_gib": round(best["window"]["released_gib"], 2),
        "ratios": {"cpu_window_vs_no_window": round(cpu["window"] / cpu["no_window"], 3),
                   "wall_window_vs_no_window": round(wall["window"] / wall["no_window"], 3),
                   "sys_window_vs_no_window": round(best["window"]["sys_us"] / best["no_window"]["sys_us"], 3)},
    })


if __name__ == "__main__":
    main()
