"""Driver program: a batch read of a whole topic with `format("txmq")` (no registration), timed.

argv: broker topic expected_rows result.json. Writes {"rows", "distinct", "seconds", "rows_per_s", "master"}."""

import json
import sys
import time

from pyspark.sql import SparkSession, functions as F

broker, topic, expected, result = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
spark = SparkSession.builder.appName("txmq-cluster-read").getOrCreate()
df = spark.read.format("txmq").option("broker", broker).option("topic", topic).load()
# Warm-up: every executor starts its Python workers (imports numba, pyarrow) before the timed read.
df.limit(10).collect()
distinct = df.select(F.countDistinct("messageId")).first()[0]
start = time.perf_counter()
row = df.agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes")).first()
seconds = time.perf_counter() - start
with open(result, "w") as f:
    json.dump({"rows": row["n"], "bytes": row["bytes"], "distinct": distinct, "seconds": seconds,
               "rows_per_s": row["n"] / seconds, "master": spark.sparkContext.master,
               "expected": expected}, f)
spark.stop()
