"""A Spark driver program for the crash tests: run as its own process, killed and restarted.

    python -m tests.spark.crash_driver --mode sink|foreach --broker H:P --src T --dst T
                                       --checkpoint DIR [--db sqlite.db] [--max-per-trigger N]
                                       [--repartition N] [--s3-endpoint URL --s3a-jars DIR]

Reads every message of `src` (Trigger.AvailableNow, a few rows per batch) and
writes the bodies to `dst`, either through the txmq sink (`sink`) or through the
foreachBatch helper with a SQLite table as the local transaction (`foreach`).
Exits 0 when everything present at start was processed. The test sets
TXMQ_SPARK_CRASH_AT to have the connector SIGKILL this whole process group at
one point of one batch. With --s3-endpoint the checkpoint is an s3a:// location on that
S3-compatible server (Hadoop's S3A from the jars in --s3a-jars), and in sink mode SinkCheckback
runs beside the query, reading the commit log there.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def sqlite_local_transaction(db_path: str):
    def local_transaction(batch_df, batch_id: int) -> None:
        rows = [(r.body,) for r in batch_df.select("body").collect()]
        con = sqlite3.connect(db_path)
        try:
            with con:  # one database transaction: the rows and the batch marker
                con.executemany("INSERT INTO rows(body) VALUES (?)", rows)
                con.execute("INSERT INTO batches(batch_id) VALUES (?)", (batch_id,))
        finally:
            con.close()

    def check(batch_id: int) -> bool:
        con = sqlite3.connect(db_path)
        try:
            return con.execute("SELECT 1 FROM batches WHERE batch_id = ?", (batch_id,)).fetchone() is not None
        finally:
            con.close()

    con = sqlite3.connect(db_path)
    with con:
        con.execute("CREATE TABLE IF NOT EXISTS rows(body BLOB)")
        con.execute("CREATE TABLE IF NOT EXISTS batches(batch_id INTEGER PRIMARY KEY)")
    con.close()
    return local_transaction, check


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("sink", "foreach"), required=True)
    p.add_argument("--broker", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--db")
    p.add_argument("--max-per-trigger", type=int, default=10)
    p.add_argument("--repartition", type=int, help="write through N tasks per batch (a shuffle before the sink)")
    p.add_argument("--s3-endpoint")
    p.add_argument("--s3a-jars")
    args = p.parse_args(argv)

    os.environ["TXMQ_SPARK_CRASH_PGID"] = str(os.getpgid(0))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("txmq-crash-driver")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               # a short-lived driver: C1-only JIT and the serial GC start the JVM faster
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"))
    if args.s3_endpoint:
        from tests.spark.s3_store import s3a_conf

        for key, value in s3a_conf(args.s3_endpoint, Path(args.s3a_jars)).items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("txmq").option("broker", args.broker).option("topic", args.src)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(args.max_per_trigger))
          .load().select("body"))
    if args.repartition:
        df = df.repartition(args.repartition)
    writer = df.writeStream.option("checkpointLocation", args.checkpoint).trigger(availableNow=True)
    if args.mode == "sink":
        from txmq.spark import SinkCheckback

        with SinkCheckback(args.checkpoint, broker=args.broker, topics=[args.dst]):
            query = writer.format("txmq").option("broker", args.broker).option("topic", args.dst).start()
            query.awaitTermination()
    else:
        from txmq.spark import TransactionalBatch

        local_transaction, check = sqlite_local_transaction(args.db)
        with TransactionalBatch(broker=args.broker, topic=args.dst, checkpoint_location=args.checkpoint,
                                local_transaction=local_transaction, check=check) as helper:
            query = writer.foreachBatch(helper).start()
            query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
