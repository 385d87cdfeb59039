"""Crash and pause points for the connector's tests (no effect unless the variables are set).

`TXMQ_SPARK_CRASH_AT="point:batch_id"` makes `crash_point(point, batch_id)` SIGKILL
the Spark application when reached: the process group named by
`TXMQ_SPARK_CRASH_PGID` (the driver program, its JVM) and then the caller's own
group (pyspark's worker daemon runs in a group of its own). That is how the
tests kill the driver exactly between two steps of the sink's protocol. Points:
  sink.before_halves, sink.after_halves, sink.after_broker_commit,
  sink.after_decision, sink.between_parts,
  fb.after_halves, fb.after_local_transaction, fb.after_broker_commit.

`TXMQ_SPARK_PAUSE_DIR=<dir>` makes `pause_point(point, partition)` hold a task while
`<dir>/<point>` exists and `<dir>/<point>.release` does not, leaving `<dir>/<point>.p<partition>`:
that is how a test moves a queue between two tasks of one micro-batch.
"""

from __future__ import annotations

import os
import signal
import time

ENV = "TXMQ_SPARK_CRASH_AT"
ENV_PGID = "TXMQ_SPARK_CRASH_PGID"
ENV_PAUSE_DIR = "TXMQ_SPARK_PAUSE_DIR"
PAUSE_LIMIT_S = 300.0  # a test that never releases its tasks fails them instead of hanging


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


def pause_point(point: str, partition: int) -> None:
    folder = os.environ.get(ENV_PAUSE_DIR)
    if not folder or not os.path.exists(os.path.join(folder, point)):
        return
    release = os.path.join(folder, f"{point}.release")
    if os.path.exists(release):
        return
    with open(os.path.join(folder, f"{point}.p{partition}"), "w"):
        pass
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"txmq: paused at {point} for {PAUSE_LIMIT_S:.0f} s without a release")
        time.sleep(0.05)
