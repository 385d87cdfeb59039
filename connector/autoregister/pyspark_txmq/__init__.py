"""Registers the txmq Spark data source: pyspark imports `pyspark_*` modules and uses their DefaultSource.

Spark (4.2+) scans the Python path for modules named `pyspark_*` the first time
a Python data source is looked up, and registers each `DefaultSource` under its
`name()`: so `spark.read.format("txmq")` works once txmq is installed.
"""

from txmq.spark.source import TxmqDataSource as DefaultSource

__all__ = ["DefaultSource"]
