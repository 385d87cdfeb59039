"""Spark test fixtures: ONE local SparkSession and ONE broker process for the whole session.

Spark costs ~10 s to start on this 2-core machine, so every Spark test shares a
session (`spark.sql.shuffle.partitions=2`) and a broker, and isolates itself by
using fresh topic names and checkpoint directories instead.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.spark_env import expose_autoregister_module



@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory):
    """A broker (sync flush) shared by the Spark tests, run as from another host: its data directory
    and /dev/shm are private mounts no other process sees (needs root for `unshare`)."""
    with BrokerProcess(tmp_path_factory.mktemp("spark-broker"), hidden=os.geteuid() == 0) as proc:
        yield proc


@pytest.fixture(scope="session")
def spark_env(tmp_path_factory) -> dict[str, str]:
    """The environment Spark (and a driver subprocess) needs: our Python, pyspark_txmq importable,
    and where a test arms the connector's pause points (its workers inherit it from the JVM)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TXMQ_SPARK_PAUSE_DIR", str(tmp_path_factory.mktemp("pause-points")))
    expose_autoregister_module()
    return dict(os.environ)


@pytest.fixture(scope="session")
def spark(spark_env):
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("txmq-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.streaming.stopTimeout", "30s")
               # small jobs: C1-only JIT and the serial GC start and warm the JVM faster
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def client(spark_broker):
    from txmq.broker.client import NativeClient

    c = NativeClient(spark_broker.endpoint)
    yield c
    c.close()


@pytest.fixture
def topic(client) -> str:
    """A fresh 4-queue topic."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    client.create_topic(name, 4)
    return name


@pytest.fixture
def checkpoint(tmp_path) -> str:
    return str(tmp_path / "checkpoint")


@pytest.fixture
def source_options(spark_broker):
    return {"broker": spark_broker.endpoint}


