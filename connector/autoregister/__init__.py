"""Registers the txmq Spark data source: pyspark imports `pyspark_*` modules and uses their DefaultSource."""
