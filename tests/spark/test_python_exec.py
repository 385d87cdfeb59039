"""The data source refuses, where Spark creates it on the driver, a setup whose executors would run
another Python than PYSPARK_PYTHON (connector/python_exec.py)."""

import pytest

from txmq.spark.python_exec import PythonMismatch, check_executors_python


def test_a_source_started_with_the_command_pyspark_python_names_is_accepted():
    check_executors_python({"PYSPARK_PYTHON": "./environment/bin/python"}, command="./environment/bin/python")


def test_without_pyspark_python_nothing_is_checked():
    check_executors_python({"PYSPARK_DRIVER_PYTHON": "python"}, command="python")


def test_the_driver_python_of_sparks_packed_environment_recipe_is_refused_with_the_fix():
    # export PYSPARK_DRIVER_PYTHON=python; export PYSPARK_PYTHON=./environment/bin/python: pyspark's lookup
    # gives the source `python`, which the executors would start instead of the shipped environment.
    with pytest.raises(PythonMismatch, match=r"\(python\), not PYSPARK_PYTHON \(\./environment/bin/python\)"
                                             r".*Unset PYSPARK_DRIVER_PYTHON"):
        check_executors_python({"PYSPARK_PYTHON": "./environment/bin/python", "PYSPARK_DRIVER_PYTHON": "python"},
                               command="python")
