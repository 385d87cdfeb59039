"""What a process that only writes through the client or the Spark connector loads: Spark starts a
Python worker that imports the connector for each write's planning and commit, on the driver."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_spark_sink_leaves_the_broker_engine_unloaded():
    probe = ("import sys, txmq.spark.sink\n"
             "engine = ['txmq.broker.store.message_store', 'txmq.broker.transaction.engine',\n"
             "          'txmq.broker.store.filter_read', 'txmq.broker.store.pull_decode']\n"
             "print(','.join(m for m in engine if m in sys.modules))\n")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert loaded.stdout.strip() == ""
