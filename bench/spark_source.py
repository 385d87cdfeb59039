"""Spark source benchmark: reading committed messages through `format("txmq")`, in rows/s.

    .venv/bin/python bench/spark_source.py [--quick] [--rows N] [--repeat K] [--same-host]

Loads N committed 1 KiB messages (transactions of 10,000 messages) into a
4-queue topic of a broker process (default 2,000,000; --quick: 200,000), then
runs `SELECT count(*), sum(length(body))` in a local[2] SparkSession over
(a) an in-memory Python data source that yields the same rows as prebuilt
    Arrow batches: the first 8192 rows of each queue as txmq reads them (real
    message ids, transaction ids, timestamps), loaded once per partition and
    yielded again and again: the ceiling of any Python data source,
(b) Spark's parquet reader over the same rows (written once beforehand),
(c) txmq, reading through the broker's Arrow Flight service,
taking turns, best of --repeat rounds each. The broker runs as from another host:
in a mount namespace of its own with its data directory and /dev/shm on private
tmpfs mounts (EmbeddedBroker(hidden=True)), so the executors reach its data only
over the network path. The broker's resident memory is sampled during (c).
--same-host measures the one exception as well: the broker's files visible, and
(d) txmq with `localReads` (executors decode the broker's CommitLog files themselves,
client/local_read.py; off by default).
Target: (c) ≥ 0.8 of (a), at the default size: with --quick every source spends
most of its time on fixed per-job overhead, so a --quick ratio flatters txmq; use it
to see that things run, not to judge the target. Also reported: the CPU seconds per million
rows of Spark's JVM, its Python workers and the broker during each query (medians, from /proc).
Prints one JSON line, writes bench/results/spark_source.json.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import pyarrow as pa

from size_args import parse_size_args  # noqa: I001
from spark_common import BrokerProcess, emit, spark_cpu_meters, spark_session  # noqa: I001

BODY = b"x" * 1024
TX_ROWS = 10_000
QUEUES = 4


def load_messages(client, topic: str, rows: int) -> None:
    bodies = pa.array([BODY] * TX_ROWS, pa.binary())
    sent = 0
    while sent < rows:
        n = min(TX_ROWS, rows - sent)
        tx = f"bench-{uuid.uuid4().hex}"
        client.prepare_arrow(tx, pa.RecordBatch.from_arrays([bodies.slice(0, n)], names=["body"]), topic=topic,
                             producer_group="bench", sender="loader")
        client.end_transaction(tx, "COMMIT", producer_group="bench")
        sent += n


MEMORY_CHUNK = 8192  # rows the in-memory source holds per partition and yields again and again


def save_txmq_rows(client, topic: str, directory: Path) -> Path:
    """The first MEMORY_CHUNK rows of each queue, as txmq's source reads them, in Arrow IPC files
    (the in-memory source's rows: the same columns and values, message ids and transaction ids
    included, not a cheaper stand-in)."""
    from txmq.spark.schema import conform_source_batch

    directory.mkdir(parents=True, exist_ok=True)
    for queue_id in range(QUEUES):
        batches, pos = [], 0
        while pos < MEMORY_CHUNK:
            result = client.pull_arrow(topic, queue_id, pos, MEMORY_CHUNK, max_bytes=32 << 20)
            batches.append(conform_source_batch(result.batch))  # with the group column, as the source adds it
            pos = result.next_offset
        table = pa.Table.from_batches(batches).combine_chunks()
        with pa.OSFile(str(directory / f"{queue_id}.arrow"), "wb") as sink, \
                pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    return directory


def memory_source_class(rows: int, rows_dir: Path):
    """A Python data source yielding `rows` rows in QUEUES partitions: each partition reads its
    queue's saved rows (save_txmq_rows) once, then yields them again and again as Arrow batches."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from txmq.spark.schema import SOURCE_SCHEMA

    per_part = rows // QUEUES
    saved = str(rows_dir)

    class MemoryReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(QUEUES)]

        def read(self, partition):
            import pyarrow as pa

            with pa.memory_map(f"{saved}/{partition.value}.arrow") as source:
                batch = pa.ipc.open_file(source).read_all().combine_chunks().to_batches()[0]
            left = per_part
            while left > 0:
                n = min(batch.num_rows, left)
                yield batch.slice(0, n)
                left -= n

    class MemorySource(DataSource):
        @classmethod
        def name(cls):
            return "bench_memory"

        def schema(self):
            return SOURCE_SCHEMA

        def reader(self, schema):
            return MemoryReader()

    return MemorySource


def count_and_sum(df) -> tuple[int, int]:
    row = df.selectExpr("count(*) AS n", "sum(length(body)) AS bytes").collect()[0]
    return row.n, row.bytes


def interleaved_best_rates(frames: dict, rows: int, rounds: int, meters: dict[str, Callable[[], float]] | None = None,
                           spent: dict[str, dict[str, list[float]]] | None = None) -> dict[str, float]:
    """rows/s of each query's fastest run, the queries taking turns round by round.

    The machine is shared: a load burst during one query's runs would skew the
    ratios if each query ran its repeats back to back; taking turns spreads it.
    With `meters` (name -> CPU seconds some processes have used so far), each run's
    CPU seconds per million rows go to spent[query][meter].
    """
    best = {name: float("inf") for name in frames}
    for _ in range(rounds):
        for name, df in frames.items():
            before = {m: read() for m, read in (meters or {}).items()}
            t0 = time.perf_counter()
            count_and_sum(df)
            best[name] = min(best[name], time.perf_counter() - t0)
            if spent is not None:
                for m, read in (meters or {}).items():
                    spent.setdefault(name, {}).setdefault(m, []).append((read() - before[m]) / rows * 1e6)
    return {name: rows / seconds for name, seconds in best.items()}


class RssSampler:
    """The peak resident set of a process while a block runs (sampled from /proc every 50 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        with open(f"/proc/{self.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.rss())

    def __enter__(self) -> "RssSampler":
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    args, rows = parse_size_args(200_000, 2_000_000, repeat=5, extra=lambda p: p.add_argument(
        "--same-host", action="store_true", help="also read with localReads (the broker's files visible)"))
    rows -= rows % QUEUES
    spark = spark_session()
    from txmq.broker.client import NativeClient

    with tempfile.TemporaryDirectory() as tmp, \
            BrokerProcess(Path(tmp) / "broker", flush="async", hidden=not args.same_host) as broker:
        client = NativeClient(broker.endpoint)
        topic = "bench-source"
        client.create_topic(topic, QUEUES)
        t0 = time.perf_counter()
        load_messages(client, topic, rows)
        load_s = time.perf_counter() - t0

        txmq_df = spark.read.format("txmq").option("broker", broker.endpoint).option("topic", topic).load()
        spark.dataSource.register(memory_source_class(rows, save_txmq_rows(client, topic, Path(tmp) / "rows")))
        memory_df = spark.read.format("bench_memory").load()
        parquet_path = str(Path(tmp) / "rows.parquet")
        txmq_df.write.parquet(parquet_path)
        parquet_df = spark.read.parquet(parquet_path)

        expected = (rows, rows * len(BODY))
        frames = {"memory": memory_df, "parquet": parquet_df, "txmq": txmq_df}
        if args.same_host:
            frames["txmq_same_host"] = spark.read.format("txmq").option("broker", broker.endpoint) \
                .option("topic", topic).option("localReads", "true").load()
        for name, df in frames.items():
            assert count_and_sum(df) == expected, f"{name} read the wrong rows"
        sampler = RssSampler(broker.proc.pid)
        rss_before = sampler.rss()
        spent: dict[str, dict[str, list[float]]] = {}
        with sampler:
            rates = interleaved_best_rates(frames, rows, args.repeat, spark_cpu_meters(spark, broker.proc.pid), spent)
        transport = client.data_plane()
        client.close()
    spark.stop()
    ratios = {"txmq_vs_python_memory_source": round(rates["txmq"] / rates["memory"], 3),
              "txmq_vs_parquet": round(rates["txmq"] / rates["parquet"], 3)}
    if args.same_host:
        ratios["same_host_reads_vs_python_memory_source"] = round(rates["txmq_same_host"] / rates["memory"], 3)
        ratios["same_host_reads_vs_flight"] = round(rates["txmq_same_host"] / rates["txmq"], 3)
    emit("spark_source_same_host" if args.same_host else "spark_source", {
        "rows": rows, "body_bytes": len(BODY), "queues": QUEUES, "load_s": round(load_s, 2),
        "pull_transport": f"arrow flight ({transport})" + ("" if args.same_host else ", broker files hidden"),
        "broker_rss_mib": {"before_reads": round(rss_before / 2**20), "peak_during_reads": round(sampler.peak / 2**20)},
        "rows_per_s": {k: round(v) for k, v in rates.items()},
        # medians over the runs; every query's include the broker's idle CPU
        "cpu_s_per_million_rows": {q: {m: round(statistics.median(v), 3) for m, v in by.items()}
                                   for q, by in spent.items()},
        "ratios": ratios,
        "target": {"txmq_vs_python_memory_source": 0.8},
    })


if __name__ == "__main__":
    main()
