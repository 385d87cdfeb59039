"""The outbox pipeline: payments in, a SQLite ledger and "ledger-updates" messages out, exactly once.

    spark-submit pipeline.py --broker 127.0.0.1:8081 --checkpoint /tmp/outbox-ckpt --db ledger.db

Each micro-batch of committed "payments" messages is written to the ledger
database AND published to "ledger-updates" with txmq's foreachBatch helper:

1. the executors send the batch's messages as halves of one transaction;
2. `write_ledger` (the local transaction) inserts the rows and the batch id in
   ONE SQLite transaction;
3. the helper commits the broker transaction only if that succeeded, and rolls
   it back if it raised.

If the driver dies anywhere in between, the restarted query (or the broker's
check-back, answered by `ledger_has_batch`) settles the batch from the
database: the ledger and the messages always match one to one.
"""

from __future__ import annotations

import argparse
import json
import sqlite3

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from txmq.spark import TransactionalBatch

LEDGER_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS ledger (payment_id TEXT PRIMARY KEY, account TEXT, amount INTEGER, batch_id INTEGER)",
    "CREATE TABLE IF NOT EXISTS batches (batch_id INTEGER PRIMARY KEY)",
]


def open_ledger(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    for statement in LEDGER_SCHEMA:
        db.execute(statement)
    return db


def make_local_transaction(db_path: str):
    def write_ledger(batch_df, batch_id: int) -> None:
        """The local transaction: every row of the batch plus the batch id, atomically."""
        rows = [json.loads(r.body) for r in batch_df.select(F.col("body").cast("string").alias("body")).collect()]
        db = open_ledger(db_path)
        try:
            db.execute("BEGIN")
            db.executemany("INSERT INTO ledger VALUES (?, ?, ?, ?)",
                           [(r["payment_id"], r["account"], r["amount"], batch_id) for r in rows])
            db.execute("INSERT INTO batches VALUES (?)", (batch_id,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def ledger_has_batch(batch_id: int) -> bool:
        """RocketMQ's checkLocalTransaction for a batch: did its ledger transaction commit?"""
        db = open_ledger(db_path)
        try:
            return db.execute("SELECT 1 FROM batches WHERE batch_id = ?", (batch_id,)).fetchone() is not None
        finally:
            db.close()

    return write_ledger, ledger_has_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--max-per-batch", type=int, default=200)
    args = parser.parse_args()

    spark = (SparkSession.builder.appName("txmq-outbox-pipeline")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    open_ledger(args.db).close()
    payments = (spark.readStream.format("txmq")
                .option("broker", args.broker)
                .option("topic", "payments")
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", args.max_per_batch)
                .load())
    updates = payments.select("body", F.col("keys"))
    write_ledger, ledger_has_batch = make_local_transaction(args.db)
    with TransactionalBatch(broker=args.broker, topic="ledger-updates", checkpoint_location=args.checkpoint,
                            local_transaction=write_ledger, check=ledger_has_batch) as helper:
        query = (updates.writeStream.foreachBatch(helper)
                 .option("checkpointLocation", args.checkpoint)
                 .trigger(availableNow=True)
                 .start())
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
