"""Backfill: read a bounded slice of committed history with Spark, in batch and with AvailableNow.

    spark-submit backfill.py --broker 127.0.0.1:8081            # against your broker (topic "clicks")
    python backfill.py --embedded                              # starts its own broker and seeds it

Shows three ways to reprocess history:
1. `spark.read.format("txmq")` with JSON `startingOffsets` / `endingOffsets`
   (exact queue offsets: the same slice every time);
2. `spark.read` with `startingTimestamp` / `endingTimestamp` (a time window);
3. `readStream` with `trigger(availableNow=True)`: everything committed at
   start, in micro-batches capped by `maxOffsetsPerTrigger`, written to parquet,
   then the query stops by itself. Run it again and it only picks up what is new.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from txmq.broker.client import Message, NativeClient
from txmq.broker.embedded import EmbeddedBroker

TOPIC = "clicks"


def seed(broker: str, count: int) -> tuple[int, int]:
    """Send `count` clicks in two halves a moment apart; returns the timestamp (ms) between them and the count."""
    with NativeClient(broker) as client:
        client.create_topic(TOPIC, 4)
        first = [Message(TOPIC, json.dumps({"n": i, "page": f"/p{i % 7}"}).encode(), tag="click",
                         sharding_key=f"user-{i % 16}") for i in range(count // 2)]
        client.send(first)
        time.sleep(1.2)
        middle_ms = int(time.time() * 1000)
        time.sleep(0.2)
        second = [Message(TOPIC, json.dumps({"n": i, "page": f"/p{i % 7}"}).encode(), tag="click",
                          sharding_key=f"user-{i % 16}") for i in range(count // 2, count)]
        client.send(second)
    return middle_ms, count


def exact_slice(spark: SparkSession, broker: str) -> None:
    """The middle 80% of every queue, by exact offsets (-2 would mean earliest, -1 latest)."""
    with NativeClient(broker) as client:
        queues = client.describe_topic(TOPIC).queues
    starting = json.dumps({TOPIC: {str(q): r.min_offset + (r.max_offset - r.min_offset) // 10
                                   for q, r in queues.items()}})
    ending = json.dumps({TOPIC: {str(q): r.max_offset - (r.max_offset - r.min_offset) // 10
                                 for q, r in queues.items()}})
    print(f"1. offsets slice\n   startingOffsets={starting}\n   endingOffsets={ending}")
    df = (spark.read.format("txmq").option("broker", broker).option("topic", TOPIC)
          .option("startingOffsets", starting).option("endingOffsets", ending).load())
    df.groupBy("queueId").agg(F.count("*").alias("rows"), F.min("queueOffset").alias("first"),
                              F.max("queueOffset").alias("last")).orderBy("queueId").show()


def time_window(spark: SparkSession, broker: str, since_ms: int) -> None:
    df = (spark.read.format("txmq").option("broker", broker).option("topic", TOPIC)
          .option("startingTimestamp", str(since_ms)).load())
    print(f"2. time window — clicks stored since {since_ms}: {df.count()}")


def available_now(spark: SparkSession, broker: str, out: Path) -> None:
    query = (spark.readStream.format("txmq").option("broker", broker).option("topic", TOPIC)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 250).load()
             .select("queueId", "queueOffset", F.col("body").cast("string").alias("click"))
             .writeStream.format("parquet").option("path", str(out / "clicks"))
             .option("checkpointLocation", str(out / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = spark.read.parquet(str(out / "clicks")).count()
    print(f"3. AvailableNow — {len(batches)} micro-batches of at most 250 rows, {rows} rows in parquet, then stopped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", default=None)
    parser.add_argument("--embedded", action="store_true", help="start a broker and seed it with 1000 clicks")
    parser.add_argument("--since-ms", type=int, default=0, help="start of the time window (ms)")
    args = parser.parse_args()
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="txmq-backfill-")))
        broker = args.broker
        since_ms = args.since_ms
        if args.embedded:
            broker = stack.enter_context(EmbeddedBroker(work / "broker")).endpoint
            since_ms, _ = seed(broker, 1000)
        if not broker:
            parser.error("give --broker HOST:PORT or --embedded")
        spark = (SparkSession.builder.appName("txmq-backfill").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("WARN")
        try:
            exact_slice(spark, broker)
            time_window(spark, broker, since_ms)
            available_now(spark, broker, work)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
