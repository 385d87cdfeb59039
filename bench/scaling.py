"""Scaling benchmark: how txmq's cost grows with concurrency, queues, batch size and pending transactions.

    .venv/bin/python bench/scaling.py [--quick] [--parts batch,producers,pull,checkback] [--repeats N]

Measured in one run, every figure the median of `--repeats` runs (default 2, quick 1; with min and max):
- batch: one producer over loopback gRPC (native service, 1 KiB bodies), messages/s
  for batches of 1, 10, 100, 1000 — plain SendMessages and transactions
  (PrepareMessages + EndTransaction COMMIT);
- producers: 1, 2, 4, 8 concurrent producer processes, each sending batches of 1
  and of 100 messages; the ratio to 1 producer says how much of the added work
  the broker absorbs (ideal: N, on a 2-core machine at most ~2);
- pull: draining a topic of 1 queue with one consumer and of 4 queues with one
  consumer per queue (PullArrow), messages/s;
- checkback: a full check-back scan (CheckbackService rounds until every pending
  transaction was handed to the listener once) over 10k, 100k and 1M (--quick:
  10k, 100k) pending transactions, built at engine level in-process: halves
  appended to a MessageStore in a temp dir, then a TransactionEngine (settable
  clock, default settings: 10 000 checks per round) rebuilds its table from them
  — that rebuild time and the time of one table snapshot are reported too (the
  periodic snapshot is held off during scans and measured apart). The 1M scan
  runs once (building it alone takes minutes). Per-transaction cost should stay flat: the
  ratio 1M/10k (or 100k/10k) of µs per transaction says where it does not.
Prints one JSON line and writes bench/results/scaling.json.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.results_io import emit  # noqa: E402
BODY = b"x" * 1024
BATCH_SIZES = (1, 10, 100, 1000)
PRODUCER_COUNTS = (1, 2, 4, 8)
PRODUCER_BATCHES = (1, 100)


def stats(values: list[float]) -> dict:
    """A figure: median of the runs, with min and max (and the runs themselves)."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def body_table(n: int):
    import pyarrow as pa

    return pa.table({"body": pa.array([BODY] * n, pa.binary())})


# ---- batch size (one producer, in this process) -----------------------------------------------


def send_rate(client, topic: str, batch: int, seconds: float, transactional: bool) -> float:
    """Messages/s one sequential producer reaches for `seconds`."""
    table = body_table(batch)
    sender = uuid.uuid4().hex[:8]
    sent, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        if transactional:
            prep = client.prepare_arrow("", table, topic=topic, producer_group="scaling", sender=sender)
            client.end_transaction(prep.transaction_id, "COMMIT")
        else:
            client.send_arrow(table, topic=topic)
        sent += batch
    return sent / (time.perf_counter() - started)


def measure_batch_sizes(endpoint: str, seconds: float, repeats: int) -> dict:
    from txmq.broker.client import NativeClient

    out: dict = {"plain": {}, "transaction": {}}
    with NativeClient(endpoint, timeout_s=60) as client:
        client.create_topic("scaling-batch", 4)
        send_rate(client, "scaling-batch", 10, 0.5, True)  # warm up channel and code paths
        for kind in ("plain", "transaction"):
            for size in BATCH_SIZES:
                runs = [send_rate(client, "scaling-batch", size, seconds, kind == "transaction")
                        for _ in range(repeats)]
                out[kind][str(size)] = stats(runs)
    return out


# ---- concurrent producers (separate processes: no shared GIL on the client side) -----------


def _worker(endpoint: str, commands, results) -> None:
    """A load-generating process: runs send/pull jobs until told to stop (None).

    Long-lived, so a measurement point costs its seconds, not a Python start-up per process."""
    from txmq.broker.client import NativeClient

    tables: dict[int, object] = {}
    with NativeClient(endpoint, timeout_s=120) as client:
        # Connect, and run each code path once (lazy imports, first-call setup) before any clock starts.
        sent = client.send_arrow(body_table(1), topic="scaling-warmup")
        first = sent.slices[0]
        client.pull_arrow("scaling-warmup", first.queue_id, first.first_offset, first.first_offset + 1)
        results.put(("ready", 0, 0.0, 0.0))
        while (job := commands.get()) is not None:
            kind, topic, arg, extra, start_at = job
            time.sleep(max(0.0, start_at - time.time()))
            count, started = 0, time.perf_counter()
            if kind == "send":  # arg = batch size, extra = seconds
                table = tables.setdefault(arg, body_table(arg))
                while time.perf_counter() - started < extra:
                    client.send_arrow(table, topic=topic)
                    count += arg
            else:  # "pull": arg = queue id, extra = end offset
                offset = 0
                while offset < extra:
                    res = client.pull_arrow(topic, arg, offset, extra, max_bytes=4 << 20)
                    count += res.batch.num_rows
                    offset = res.next_offset
            results.put((kind, count, started, time.perf_counter()))


class WorkerPool:
    """`size` worker processes (spawned once) driven through per-worker command queues."""

    def __init__(self, endpoint: str, size: int) -> None:
        ctx = mp.get_context("spawn")
        self.results = ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(size)]
        self.procs = [ctx.Process(target=_worker, args=(endpoint, q, self.results), daemon=True)
                      for q in self.commands]
        for p in self.procs:
            p.start()
        for _ in self.procs:
            self.results.get(timeout=120)

    def run(self, jobs: list[tuple]) -> list[tuple[int, float, float]]:
        """Give job i to worker i, all starting together; [(count, started, ended)] with wall-clock spans."""
        start_at = time.time() + 0.3
        for q, (kind, topic, arg, extra) in zip(self.commands, jobs):
            q.put((kind, topic, arg, extra, start_at))
        got = [self.results.get(timeout=600) for _ in jobs]
        return [(count, started, ended) for _, count, started, ended in got]

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.kill()


def producers_rate(pool: WorkerPool, producers: int, batch: int, seconds: float) -> float:
    """Total messages/s of `producers` processes sending concurrently for `seconds`."""
    got = pool.run([("send", "scaling-producers", batch, seconds)] * producers)
    return sum(c for c, _, _ in got) / max(e - s for _, s, e in got)


def measure_producers(pool: WorkerPool, endpoint: str, seconds: float, repeats: int) -> dict:
    from txmq.broker.client import NativeClient

    with NativeClient(endpoint) as client:
        client.create_topic("scaling-producers", 8)
    out: dict = {}
    for batch in PRODUCER_BATCHES:
        runs: dict[int, list[float]] = {n: [] for n in PRODUCER_COUNTS}
        for _ in range(repeats):  # interleaved, so drift (other load) hits every count alike
            for n in PRODUCER_COUNTS:
                runs[n].append(producers_rate(pool, n, batch, seconds))
        out[f"batch_{batch}"] = {str(n): stats(v) for n, v in runs.items()}
    return out


# ---- pull with 1 and 4 queues ---------------------------------------------------------------


def fill_topic(client, topic: str, queues: int, messages: int) -> dict[int, int]:
    client.create_topic(topic, queues)
    table = body_table(1000)
    for _ in range(messages // 1000):
        client.send_arrow(table, topic=topic)
    return client.snapshot_offsets([topic])[topic]


def pull_rate(pool: WorkerPool, topic: str, ends: dict[int, int]) -> float:
    """Messages/s of one consumer process per queue draining the whole topic."""
    got = pool.run([("pull", topic, q, end) for q, end in ends.items()])
    rows = sum(c for c, _, _ in got)
    assert rows == sum(ends.values()), (rows, ends)
    return rows / (max(e for _, _, e in got) - min(s for _, s, _ in got))


def measure_pull(pool: WorkerPool, endpoint: str, messages: int, repeats: int) -> dict:
    from txmq.broker.client import NativeClient

    with NativeClient(endpoint, timeout_s=120) as client:
        ends = {q: fill_topic(client, f"scaling-pull-{q}q", q, messages) for q in (1, 4)}
    runs: dict[int, list[float]] = {1: [], 4: []}
    for _ in range(repeats):
        for q in (1, 4):
            runs[q].append(pull_rate(pool, f"scaling-pull-{q}q", ends[q]))
    return {"messages": messages, **{f"{q}_queues": stats(v) for q, v in runs.items()}}


# ---- check-back scan over many pending transactions (engine level, in-process) -------------


class SettableClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class AcceptingListener:
    """Every check is 'delivered' (a producer is there); counts them."""

    def __init__(self) -> None:
        self.count = 0

    def request_check(self, tx, half) -> bool:
        self.count += 1
        return True


def full_scan(service, listener: AcceptingListener, expected: int) -> tuple[float, int]:
    """Run rounds until `expected` transactions were handed over; (seconds, rounds)."""
    listener.count, rounds = 0, 0
    started = time.perf_counter()
    while listener.count < expected:
        result = service.run_once()
        rounds += 1
        if not result.more_due and listener.count < expected:
            raise RuntimeError(f"scan stopped at {listener.count} of {expected}")
    return time.perf_counter() - started, rounds


def _half_builder():
    """Message -> its half record, via the engine's own half builder (an internal that moves:
    `build_halves` or the older `build_half`); None when neither exists."""
    from txmq.broker.transaction import half

    if hasattr(half, "build_halves"):
        return lambda m, tx, ms: half.build_halves([m], transaction_id=tx, producer_group="scaling", sender="",
                                                   prepared_ms=ms)[0]
    if hasattr(half, "build_half"):
        return lambda m, tx, ms: half.build_half(m, transaction_id=tx, producer_group="scaling", sender="",
                                                 prepared_ms=ms)
    return None


def append_pending(store, start: int, end: int, body: bytes, prepared_ms: int, clock) -> None:
    """Halves of transactions s<start>..s<end-1> written straight to the half queue, 1000 per append.

    The same records `TransactionEngine.prepare` writes, without its per-call
    overhead: a million prepares one by one would take most of the time budget.
    Falls back to `prepare` itself when the half builder is not importable."""
    from txmq.broker.store import Message

    build = _half_builder()
    if build is None:
        from txmq.broker.transaction import TransactionConfig, TransactionEngine

        engine = TransactionEngine(store, TransactionConfig(), clock=clock)
        for i in range(start, end):
            engine.prepare([Message(topic="scaling-tx", body=body, queue_id=i % 4)], transaction_id=f"s{i}",
                           producer_group="scaling")
        return
    for lo in range(start, end, 1000):
        halves = [build(Message(topic="scaling-tx", body=body, queue_id=i % 4), f"s{i}", prepared_ms)
                  for i in range(lo, min(end, lo + 1000))]
        store.append(halves, allow_system=True)


def measure_checkback(sizes: tuple[int, ...], repeats: int, body: bytes) -> dict:
    """Per size: grow the half queue, rebuild the engine's table from it, scan it `repeats` times.

    The engine is reopened with its snapshot removed, so its table is a full replay of
    the N pending halves (as after a crash without snapshot) — that rebuild time is a
    figure too. Recovered halves are not in the half cache: every check reads its half
    from the CommitLog, as after a broker restart."""
    from txmq.broker.store import MessageStore, StoreConfig
    from txmq.broker.transaction import CheckbackService, TransactionConfig, TransactionEngine

    root = Path(tempfile.mkdtemp(prefix="txmq-scaling-checkback-"))
    store = MessageStore(StoreConfig(data_dir=root))
    clock = SettableClock()
    # Periodic table snapshots are measured apart (their cost is O(table), see snapshot_s):
    # left at the default 10 s they would interleave with the scan of a large table.
    config = TransactionConfig(snapshot_interval_s=1e9)
    listener = AcceptingListener()
    out: dict = {}
    built, engine = 0, None
    try:
        for size in sizes:
            if engine is not None:  # no close(): its snapshot would only be thrown away
                shutil.rmtree(engine.state_dir, ignore_errors=True)  # force a full replay of the table
                engine = None
            started = time.perf_counter()
            append_pending(store, built, size, body, int(clock.now * 1000), clock)
            append_s = time.perf_counter() - started
            built = size
            started = time.perf_counter()
            engine = TransactionEngine(store, config, clock=clock)
            open_s = time.perf_counter() - started
            assert engine.recovery_stats.get("transactions", size) == size, engine.recovery_stats
            service = CheckbackService(engine, listener, config)
            scans, rounds = [], 0
            for _ in range(repeats if size < 1_000_000 else 1):
                clock.now += config.check_interval_s + config.transaction_timeout_s + 1  # everything due
                seconds, rounds = full_scan(service, listener, size)
                scans.append(seconds)
            started = time.perf_counter()
            idle = service.run_once()  # nothing due: the cost of a round that finds no work
            idle_s = time.perf_counter() - started
            assert idle.checked == 0
            # The engine writes a snapshot of the whole table right after a replay:
            # opening time minus replay time is what one snapshot of `size` rows costs.
            rebuild_s = engine.recovery_stats.get("seconds", open_s)
            snapshot_s = open_s - rebuild_s
            out[str(size)] = {
                "scan_s": stats(scans),
                "per_tx_us": stats([s / size * 1e6 for s in scans]),
                "rounds": rounds,
                "idle_round_ms": round(idle_s * 1000, 3),
                "snapshot_s": round(snapshot_s, 3),
                "append_halves_s": round(append_s, 2),
                "table_rebuild_s": round(rebuild_s, 3),
                "engine_open_s": round(open_s, 3),
            }
            print(f"checkback {size}: rebuild {out[str(size)]['table_rebuild_s']} s, "
                  f"scan {out[str(size)]['scan_s']['median']} s, rounds {rounds}", file=sys.stderr, flush=True)
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)
    return out


# ---- main ----------------------------------------------------------------------------------


def ratios(result: dict) -> dict:
    r: dict = {}
    med = lambda fig: fig["median"]  # noqa: E731
    if "producers" in result:
        for batch, series in result["producers"].items():
            r[f"producers_8_vs_1_{batch}"] = round(med(series["8"]) / med(series["1"]), 3)
            r[f"producers_2_vs_1_{batch}"] = round(med(series["2"]) / med(series["1"]), 3)
    if "pull" in result:
        r["pull_4q_vs_1q"] = round(med(result["pull"]["4_queues"]) / med(result["pull"]["1_queues"]), 3)
    if "batch" in result:
        for kind, series in result["batch"].items():
            r[f"batch_1000_vs_1_{kind}"] = round(med(series["1000"]) / med(series["1"]), 2)
        r["tx_vs_plain_batch_100"] = round(med(result["batch"]["transaction"]["100"])
                                           / med(result["batch"]["plain"]["100"]), 3)
    if "checkback" in result:
        sizes = sorted(result["checkback"], key=int)
        small, large = sizes[0], sizes[-1]
        r[f"checkback_per_tx_{large}_vs_{small}"] = round(
            med(result["checkback"][large]["per_tx_us"]) / med(result["checkback"][small]["per_tx_us"]), 3)
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter points; check-back stops at 100k")
    ap.add_argument("--parts", default="batch,producers,pull,checkback")
    ap.add_argument("--repeats", type=int, help="runs per figure (default 3)")
    ap.add_argument("--seconds", type=float, help="seconds per throughput point (default 2, quick 1.5)")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    repeats = args.repeats or (1 if args.quick else 2)
    seconds = args.seconds or (1.5 if args.quick else 2.0)
    result: dict = {"bench": "scaling", "quick": args.quick, "repeats": repeats, "seconds_per_point": seconds,
                    "body_bytes": len(BODY)}
    if parts & {"batch", "producers", "pull"}:
        from txmq.broker.embedded import EmbeddedBroker

        data = Path(tempfile.mkdtemp(prefix="txmq-scaling-broker-"))
        try:
            with EmbeddedBroker(data, flush="async") as broker:
                if "batch" in parts:
                    result["batch"] = measure_batch_sizes(broker.endpoint, seconds, repeats)
                if parts & {"producers", "pull"}:
                    pool = WorkerPool(broker.endpoint, max(PRODUCER_COUNTS))
                    try:
                        if "producers" in parts:
                            result["producers"] = measure_producers(pool, broker.endpoint, seconds, repeats)
                        if "pull" in parts:
                            result["pull"] = measure_pull(pool, broker.endpoint, 30_000 if args.quick else 60_000,
                                                          repeats)
                    finally:
                        pool.close()
        finally:
            shutil.rmtree(data, ignore_errors=True)
    if "checkback" in parts:
        sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
        result["checkback"] = measure_checkback(sizes, repeats, BODY)
    result["ratios"] = ratios(result)
    emit("scaling", result, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
