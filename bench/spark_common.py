"""Shared setup of the Spark benchmarks: a broker process, a local SparkSession, result output."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import descendants, process_cpu_s  # noqa: E402  (their one home: stdlib only)
from bench.results_io import emit  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.spark_env import expose_autoregister_module  # noqa: E402


def spark_session(conf: dict[str, str] | None = None):
    """local[2] with our Python; `pyspark_txmq` made visible even in an editable install.

    `conf` adds settings a benchmark needs at start-up (e.g. spark.jars.packages)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    expose_autoregister_module()
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("txmq-bench")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "4g"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def settle_page_cache() -> None:
    """Write back every dirty page before a timed run (untimed): a side that never fsyncs (Kafka)
    leaves its writes dirty, and the kernel would write them back during the other side's next run."""
    os.sync()


def spark_cpu_meters(spark, broker_pid: int | None = None) -> dict[str, Callable[[], float]]:
    """CPU seconds so far of the local Spark JVM, of its Python workers (every process under it,
    with the workers they reaped) and of the broker, as meters to read before and after a query."""
    jvm = spark.sparkContext._gateway.proc.pid

    def python_workers() -> float:
        # the workers and daemons that exited count too (in their reaper's children time): a live
        # process's own sum alone falls when one of them exits between two readings
        below = sum(process_cpu_s(p, reaped_children=True) for p in descendants(jvm))
        return below + process_cpu_s(jvm, reaped_children=True) - process_cpu_s(jvm)

    meters = {"jvm": lambda: process_cpu_s(jvm), "python_workers": python_workers}
    if broker_pid is not None:
        meters["broker"] = lambda: process_cpu_s(broker_pid)
    return meters


def best_rate(fn, rows: int, repeat: int) -> float:
    """rows/s of the fastest of `repeat` runs of fn() (the first run warms Python workers)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return rows / best


__all__ = ["BrokerProcess", "spark_session", "best_rate", "emit", "ROOT", "process_cpu_s", "descendants",
           "spark_cpu_meters"]
