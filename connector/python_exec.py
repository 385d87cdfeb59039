"""Which Python Spark runs for the txmq data source, checked where the source is created.

Spark (4.2, 4.3) gives a Python data source ONE command for every Python process it starts for it:
the driver's planner processes and the executors' readers and writers alike. A source found by
pyspark's lookup (`pyspark_txmq`, no `spark.dataSource.register`) gets the driver JVM's
`PYSPARK_DRIVER_PYTHON`, else its `PYSPARK_PYTHON`, else `python3`, from environment variables
only (the `spark.pyspark.*` confs are not read); a source registered by hand gets the driver
program's `PYSPARK_PYTHON`. So a setup whose executors must run another Python than the driver
(`PYSPARK_DRIVER_PYTHON=python`, `PYSPARK_PYTHON=./environment/bin/python`, as Spark's docs show
for packed environments) would start the driver's Python on the executors, and every task would
fail there with an unrelated-looking error. This module refuses such a setup at planning time
instead, with the fix (docs/spark.md, "Running on a Spark cluster").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

DOCS = 'docs/spark.md, "Running on a Spark cluster"'


class PythonMismatch(RuntimeError):
    """Spark would run another Python on the executors than the one PYSPARK_PYTHON names."""


def check_executors_python(environ: Mapping[str, str] = os.environ, command: str | None = None) -> None:
    """Raise PythonMismatch when the command that started this (driver-side) process is not PYSPARK_PYTHON.

    Spark starts the executors' Python workers for this source with that very command (`command`,
    default `sys.orig_argv[0]`), and PYSPARK_PYTHON is the Python the executors are meant to run. The
    strings are compared, not what they resolve to here: `python` and `./environment/bin/python` may
    be one environment on the driver and two on an executor."""
    wanted = environ.get("PYSPARK_PYTHON")
    command = sys.orig_argv[0] if command is None else command
    if not wanted or command == wanted:
        return
    raise PythonMismatch(
        f"txmq: Spark starts this data source's Python on the executors with the command that started it on "
        f"the driver ({command}), not PYSPARK_PYTHON ({wanted}). Unset PYSPARK_DRIVER_PYTHON so that both "
        f"run PYSPARK_PYTHON: with a packed environment, unpack it beside the driver too ({DOCS})")
