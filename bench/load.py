"""A closed-loop load driver: `threads` callers each call `fn` back to back for `seconds`."""

from __future__ import annotations

import statistics
import threading
import time
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
    return {"per_s": round(len(latencies) / elapsed, 1),
            "p50_ms": round(statistics.median(latencies) * 1000, 3),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 3)}
