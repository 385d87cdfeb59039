"""A closed-loop load driver: `threads` callers each call `fn` back to back for `seconds`; and
the CPU processes have used, from /proc. Standard library only: the official RocketMQ client's
environment (.venv-rocketmq) runs it too."""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path
from typing import Callable


def closed_loop(fn: Callable[[], object], seconds: float, threads: int) -> dict:
    """{"per_s", "p50_ms", "p99_ms"} over every call made by every caller."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def caller() -> None:
        local = []
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            fn()
            local.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(local)

    workers = [threading.Thread(target=caller) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    latencies.sort()
    return {"per_s": round(len(latencies) / elapsed, 1), "calls": len(latencies),
            "p50_ms": round(statistics.median(latencies) * 1000, 3),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 3)}


def process_cpu_s(pid: int, *, reaped_children: bool = False) -> float:
    """User + system CPU seconds a process has used so far, with those of the children it has
    reaped if asked (/proc; 0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(f) for f in fields[11:15 if reaped_children else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def tree_cpu_s(pids: list[int]) -> float:
    """CPU seconds so far of `pids` and every process below them."""
    return sum(process_cpu_s(p) for root in pids for p in [root, *descendants(root)])
