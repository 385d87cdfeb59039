"""The points service: applies "points" messages to a SQLite ledger, exactly once.

It reads committed messages with a PullConsumer and stores its read positions
in the SAME SQLite transaction as the points it applies, so a crash between the
two can neither lose nor double-apply a message.

Run on its own:  python points_consumer.py --broker 127.0.0.1:8081 --db points.db
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from txmq.broker.client import PullConsumer
from txmq.broker.client.cluster_client import ClusterClient

POINTS_TOPIC = "points"

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS points (user TEXT PRIMARY KEY, points INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS applied (order_id TEXT PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS positions (topic TEXT, grp TEXT, queue_id INTEGER, next_offset INTEGER,"
    " PRIMARY KEY (topic, grp, queue_id))",
]


def open_ledger(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), isolation_level=None)
    for statement in SCHEMA:
        db.execute(statement)
    return db


def stored_positions(db: sqlite3.Connection) -> dict[str, dict[tuple[str, int], int]]:
    """{topic: {(group, queue id): next offset}}; the group is "" for a lone broker."""
    positions: dict[str, dict[tuple[str, int], int]] = {}
    for topic, group, queue_id, offset in db.execute("SELECT topic, grp, queue_id, next_offset FROM positions"):
        positions.setdefault(topic, {})[(group, queue_id)] = offset
    return positions


def apply_available(broker: str, db_path: Path) -> int:
    """Apply every committed points message not yet applied; returns how many were applied now."""
    db = open_ledger(db_path)
    applied = 0
    with ClusterClient(broker) as client:  # one broker, or every group of a cluster
        consumer = PullConsumer(client, [POINTS_TOPIC], start=stored_positions(db) or "earliest")
        while batches := consumer.poll(timeout_ms=0):
            db.execute("BEGIN")
            for batch in batches:
                for body in batch.column("body").to_pylist():
                    entry = json.loads(body)
                    db.execute("INSERT INTO applied VALUES (?)", (entry["order_id"],))  # a duplicate would fail
                    db.execute("INSERT INTO points VALUES (?, ?) ON CONFLICT(user) DO UPDATE "
                               "SET points = points + excluded.points", (entry["user"], entry["points"]))
                    applied += 1
            for topic, queues in consumer.positions.items():
                for (group, queue_id), offset in queues.items():
                    db.execute("INSERT OR REPLACE INTO positions VALUES (?, ?, ?, ?)", (topic, group, queue_id, offset))
            db.execute("COMMIT")
    db.close()
    return applied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", default="127.0.0.1:8081")
    parser.add_argument("--db", type=Path, default=Path("points.db"))
    args = parser.parse_args()
    print(f"applied {apply_available(args.broker, args.db)} points messages")


if __name__ == "__main__":
    main()
