"""Crash points for the connector's crash tests (no effect unless the variable is set).

`TXMQ_SPARK_CRASH_AT="point:batch_id"` makes `crash_point(point, batch_id)` SIGKILL
the whole Spark application (its process group: the JVM, the Python driver and
its workers) when reached, which is how the tests kill the driver exactly
between two steps of the sink's protocol. Points:
  sink.before_halves, sink.after_halves, sink.after_broker_commit,
  fb.after_halves, fb.after_local_transaction, fb.after_broker_commit.
"""

from __future__ import annotations

import os
import signal

ENV = "TXMQ_SPARK_CRASH_AT"


def crash_point(point: str, batch_id: int | str | None) -> None:
    wanted = os.environ.get(ENV)
    if not wanted or batch_id is None:
        return
    name, _, batch = wanted.rpartition(":")
    if name == point and batch == str(batch_id):
        os.killpg(os.getpgid(0), signal.SIGKILL)
