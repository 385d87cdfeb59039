"""The loyalty-points Spark job: committed orders in, points out, exactly once.

    spark-submit points_job.py --broker 127.0.0.1:8081 --checkpoint /tmp/points-ckpt

It reads the "orders" topic with `format("txmq")` (only committed orders ever
arrive: a rolled-back payment's message never does), turns every order into a
points entry (1 point per currency unit) and publishes the entries to the
"points" topic through the transactional sink: each micro-batch is one broker
transaction, committed only after the batch succeeded, so a crash and replay
never publishes an entry twice.

With --stop-file, the job runs until that file appears, then processes what is
left and stops (the demo uses this); without it, it runs until interrupted.
"""

from __future__ import annotations

import argparse
import os
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id string, user string, amount long"


def build_query(spark: SparkSession, broker: str, checkpoint: str, trigger_seconds: float):
    orders = (spark.readStream.format("txmq")
              .option("broker", broker)
              .option("topic", "orders")
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", 5000)
              .load())
    order = F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("o")
    points = (orders.select(order)
              .select(F.to_json(F.struct(F.col("o.order_id").alias("order_id"),
                                         F.col("o.user").alias("user"),
                                         F.col("o.amount").alias("points"))).alias("body"),
                      F.array(F.col("o.order_id")).alias("keys"),
                      F.col("o.user").alias("shardingKey")))
    return (points.writeStream.format("txmq")
            .option("broker", broker)
            .option("topic", "points")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{trigger_seconds} seconds")
            .start())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", default=os.environ.get("TXMQ_BROKER", "127.0.0.1:8081"))
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--stop-file", default=None)
    args = parser.parse_args()

    spark = (SparkSession.builder.appName("txmq-orders-to-points")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    query = build_query(spark, args.broker, args.checkpoint, args.trigger_seconds)
    try:
        while query.isActive:
            if args.stop_file and os.path.exists(args.stop_file):
                query.processAllAvailable()
                query.stop()
                break
            time.sleep(0.5)
        if query.exception():
            raise query.exception()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
