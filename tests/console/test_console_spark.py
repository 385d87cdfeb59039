"""The Spark page: a real streaming query's checkpoint, read back as committed offsets against the end."""

from __future__ import annotations

import os
import sys

import pytest
from selenium.webdriver.common.by import By

from tests.console.conftest import Console, wait_for
from tests.support.broker_process import BrokerProcess
from txmq.broker.client import Message, NativeClient

pytest.importorskip("pyspark", reason="the Spark page needs the spark extra")
pytestmark = [pytest.mark.spark, pytest.mark.slow]  # a SparkSession of its own: make test-slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("console-spark") / "data", flush="async") as proc:
        yield proc


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    from tests.support.spark_env import expose_autoregister_module

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    expose_autoregister_module()
    session = (SparkSession.builder.master("local[1]").appName("txmq-console-tests")
               .config("spark.sql.shuffle.partitions", "1").config("spark.ui.enabled", "false")
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def test_the_spark_page_shows_a_querys_committed_offsets_lag_and_sink_transactions(page, broker, spark, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    with NativeClient(broker.endpoint) as c:
        c.create_topic("spark-in", 2)
        c.create_topic("spark-out", 2)
        c.send([Message("spark-in", f"m-{i}".encode()) for i in range(10)])
        query = (spark.readStream.format("txmq").options(broker=broker.endpoint, topic="spark-in",
                                                          startingOffsets="earliest").load().select("body")
                 .writeStream.format("txmq").options(broker=broker.endpoint, topic="spark-out")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(240)
        assert query.exception() is None
        c.send([Message("spark-in", f"late-{i}".encode()) for i in range(5)])  # not read yet: lag 5
    console = Console(broker.endpoint)
    try:
        b = page(console.url + "/spark")
        b.find_element(By.ID, "checkpoint").send_keys(checkpoint)
        b.find_element(By.ID, "show").click()
        assert wait_for(lambda: b.find_element(By.ID, "spark-lag").text, what="the lag") == "5"
        committed = sum(int(e.text) for e in b.find_elements(By.CSS_SELECTOR, "#spark-offsets .committed"))
        assert committed == 10
        states = [r.text for r in b.find_elements(By.CSS_SELECTOR, "#sink-transactions td:nth-child(3)")]
        assert states and set(states) == {"COMMITTED"}
    finally:
        console.stop()
