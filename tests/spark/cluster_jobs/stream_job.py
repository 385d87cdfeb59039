"""Driver program: txmq -> transform -> txmq sink, a streaming query that runs until told to stop.

argv: broker src dst checkpoint stop_file result.json. The transform (a slow mapInArrow) feeds the
sink a few hundred rows at a time, so each sink task streams its halves for seconds: a kill of an
executor lands while a task attempt has sent some of its halves."""

import json
import os
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from txmq.spark import SinkCheckback

broker, src, dst, checkpoint, stop_file, result = sys.argv[1:7]
spark = (SparkSession.builder.appName("txmq-cluster-stream")
         .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
         .getOrCreate())


def tag(batches):
    for b in batches:
        time.sleep(0.25)
        yield pa.record_batch({"body": pc.binary_join_element_wise(pa.scalar(b"T:"), b.column("body"), b"")})


src_df = (spark.readStream.format("txmq").option("broker", broker).option("topic", src)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "3000").load())
# the check-back helper beside the query answers the broker from the query's checkpoint
with SinkCheckback(checkpoint, broker=broker, topics=[dst]):
    query = (src_df.select("body").mapInArrow(tag, "body binary")
             .writeStream.format("txmq").option("broker", broker).option("topic", dst)
             .option("maxBatchRows", "100").option("checkpointLocation", checkpoint)
             .trigger(processingTime="500 milliseconds").start())
    run_id = query.runId
    while not os.path.exists(stop_file) and query.isActive:
        time.sleep(0.5)
    error = query.exception()
    active = query.isActive
    query.stop()
with open(result, "w") as f:
    json.dump({"error": None if error is None else str(error), "active_until_stopped": active,
               "run_id_unchanged": query.runId == run_id,
               "batches": query.lastProgress["batchId"] if query.lastProgress else None}, f)
spark.stop()
