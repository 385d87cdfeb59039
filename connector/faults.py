"""Crash points for the connector's crash tests (no effect unless the variables are set).

`TXMQ_SPARK_CRASH_AT="point:batch_id"` makes `crash_point(point, batch_id)` SIGKILL
the Spark application when reached: the process group named by
`TXMQ_SPARK_CRASH_PGID` (the driver program, its JVM) and then the caller's own
group (pyspark's worker daemon runs in a group of its own). That is how the
tests kill the driver exactly between two steps of the sink's protocol. Points:
  sink.before_halves, sink.after_halves, sink.after_broker_commit,
  fb.after_halves, fb.after_local_transaction, fb.after_broker_commit.
"""

from __future__ import annotations

import os
import signal

ENV = "TXMQ_SPARK_CRASH_AT"
ENV_PGID = "TXMQ_SPARK_CRASH_PGID"


def crash_point(point: str, batch_id: int | str | None) -> None:
    wanted = os.environ.get(ENV)
    if not wanted or batch_id is None:
        return
    name, _, batch = wanted.rpartition(":")
    if name != point or batch != str(batch_id):
        return
    target = os.environ.get(ENV_PGID)
    if target:
        os.killpg(int(target), signal.SIGKILL)
    os.killpg(os.getpgid(0), signal.SIGKILL)
