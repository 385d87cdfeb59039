"""Console page loads: 1,000 topics and 100,000 pending transactions (goal: each page < 300 ms).

    .venv/bin/python bench/console_pages.py [--topics N] [--pending N] [--loads N]

One broker (flush async), N topics of 4 queues with a message in each queue, N pending
transactions (one half each, under 10 producer groups, over 20 topics), then `txmq console`
as its own process. Each page is fetched --loads times over HTTP (the server's whole answer:
native calls + render) and once in headless chromium when it is installed (navigation to
load event, the median of --loads). Prints one JSON line and writes bench/results/console_pages.json.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results_io import emit  # noqa: E402
from tests.console.conftest import Console  # noqa: E402  (the test harness starts `txmq console`)
from txmq.broker.client import Message, NativeClient  # noqa: E402
from txmq.broker.embedded import EmbeddedBroker  # noqa: E402

PAGES = ("/cluster", "/topics", "/transactions", "/groups", "/timers")


def fill(endpoint: str, topics: int, pending: int) -> None:
    with NativeClient(endpoint) as c:
        for i in range(topics):
            c.create_topic(f"bench-topic-{i:04d}", 4)
        for start in range(0, topics, 100):
            c.send([Message(f"bench-topic-{i:04d}", b"m") for i in range(start, min(topics, start + 100))
                    for _ in range(4)])

    def prepare(worker: int) -> None:
        with NativeClient(endpoint) as c:
            for n in range(worker, pending, 8):
                c.prepare("", [Message(f"bench-topic-{n % 20:04d}", b"half")], producer_group=f"pg-{n % 10}",
                          return_message_ids=False)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(prepare, range(8)))


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http_loads(url: str, loads: int, console_pid: int, broker_pid: int) -> dict[str, dict]:
    """Each page's wall time, and the CPU the console and the broker spent on it: on a machine
    shared with other jobs the wall time measures the queue for the cores, the CPU time the
    page's own work (what its wall time is on an idle machine, the calls being sequential).
    The broker's share is its process's CPU during the loads minus what it spends in as long a
    time without loads (its check-backs of the pending transactions go on meanwhile)."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    opener.open(url + "/cluster").read()  # the session
    out = {}
    for page in PAGES:
        times, failed = [], []
        console_before, broker_before, wall_before = _cpu_s(console_pid), _cpu_s(broker_pid), time.perf_counter()
        for _ in range(loads):
            t = time.perf_counter()
            try:
                body = opener.open(url + page).read()
            except urllib.error.HTTPError as exc:  # counted, not timed (a starved broker, say)
                failed.append(f"HTTP {exc.code}")
                body = b""
                continue
            times.append((time.perf_counter() - t) * 1000)
        console_cpu, broker_cpu = _cpu_s(console_pid) - console_before, _cpu_s(broker_pid) - broker_before
        wall = time.perf_counter() - wall_before
        idle_before = _cpu_s(broker_pid)
        time.sleep(min(wall, 5.0))
        idle_cpu = (_cpu_s(broker_pid) - idle_before) * wall / min(wall, 5.0)
        if not times:
            out[page] = {"failed": failed}
            continue
        out[page] = {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1),
                     **({"failed": failed} if failed else {}),
                     "cpu_ms": round((console_cpu + max(0.0, broker_cpu - idle_cpu)) * 1000 / loads, 1),
                     "console_cpu_ms": round(console_cpu * 1000 / loads, 1), "bytes": len(body)}
    return out


def browser_loads(url: str, loads: int) -> dict[str, float] | None:
    """Each page's navigation to its load event in headless chromium, the median of `loads`."""
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(url + "/cluster")
        out = {}
        for page in PAGES:
            times = []
            for _ in range(loads):
                driver.get(url + page)
                times.append(driver.execute_script(
                    "var n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;"))
            out[page] = round(statistics.median(times), 1)
        return out
    finally:
        driver.quit()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--pending", type=int, default=100_000)
    p.add_argument("--loads", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="make bench's size: 200 topics, 20,000 pending, 3 loads")
    args = p.parse_args()
    if args.quick:
        args.topics, args.pending, args.loads = 200, 20_000, 3
    with tempfile.TemporaryDirectory() as tmp:
        broker = EmbeddedBroker(Path(tmp) / "data", flush="async", start_timeout_s=300).start()
        try:
            t = time.monotonic()
            fill(broker.endpoint, args.topics, args.pending)
            filled_s = time.monotonic() - t
            console = Console(broker.endpoint, refresh_s=60, timeout_s=60)
            try:
                result = {"load_average_1m": round(os.getloadavg()[0], 1), "cpus": os.cpu_count(),
                          "topics": args.topics, "pending": args.pending, "fill_s": round(filled_s, 1),
                          "http": http_loads(console.url, args.loads, console.proc.pid, broker.proc.pid), "browser_load_ms": browser_loads(console.url, args.loads)}
            finally:
                console.stop()
        finally:
            broker.kill()  # a clean stop would snapshot 100k transactions first: not what is measured
    emit("console_pages", result)


if __name__ == "__main__":
    main()
