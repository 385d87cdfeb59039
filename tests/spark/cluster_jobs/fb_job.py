"""Driver program: the foreachBatch helper (TransactionalBatch) on the cluster: each batch's rows
go to a sqlite database on the driver (the local transaction) and, as one broker transaction sent
from the executors, to a topic.

argv: broker src dst checkpoint db stop_file result.json."""

import json
import os
import sqlite3
import sys
import time

from pyspark.sql import SparkSession

from txmq.spark import TransactionalBatch

broker, src, dst, checkpoint, db, stop_file, result = sys.argv[1:8]
with sqlite3.connect(db) as con:
    con.execute("CREATE TABLE IF NOT EXISTS rows(body TEXT)")
    con.execute("CREATE TABLE IF NOT EXISTS batches(batch_id INTEGER PRIMARY KEY)")


def local_transaction(batch_df, batch_id):
    rows = [(r.body.decode(),) for r in batch_df.select("body").collect()]
    with sqlite3.connect(db) as con:
        con.executemany("INSERT INTO rows(body) VALUES (?)", rows)
        con.execute("INSERT INTO batches(batch_id) VALUES (?)", (batch_id,))


def check(batch_id):
    with sqlite3.connect(db) as con:
        return con.execute("SELECT 1 FROM batches WHERE batch_id=?", (batch_id,)).fetchone() is not None


spark = SparkSession.builder.appName("txmq-cluster-foreach-batch").getOrCreate()
src_df = (spark.readStream.format("txmq").option("broker", broker).option("topic", src)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "2000").load().select("body"))
with TransactionalBatch(broker=broker, topic=dst, checkpoint_location=checkpoint,
                        local_transaction=local_transaction, check=check) as helper:
    query = (src_df.writeStream.foreachBatch(helper).option("checkpointLocation", checkpoint)
             .trigger(processingTime="500 milliseconds").start())
    while not os.path.exists(stop_file) and query.isActive:
        time.sleep(0.5)
    error = query.exception()
    query.stop()
with open(result, "w") as f:
    json.dump({"error": None if error is None else str(error)}, f)
spark.stop()
