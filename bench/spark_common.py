"""Shared setup of the Spark benchmarks: a broker process, a local SparkSession, result output."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


def best_rate(fn, rows: int, repeat: int) -> float:
    """rows/s of the fastest of `repeat` runs of fn() (the first run warms Python workers)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return rows / best


__all__ = ["BrokerProcess", "spark_session", "best_rate", "emit", "ROOT"]
