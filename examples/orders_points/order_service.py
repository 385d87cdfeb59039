"""The order service: pays orders in SQLite and publishes "order paid" through a TransactionProducer.

This is the scenario transactional messages exist for. The DB write and the
message must agree: never "order paid but no message", never "message sent but
the payment rolled back". Each order is one transaction:

1. the "order paid" message is stored by the broker as a half (invisible);
2. the local transaction writes the order row in SQLite;
3. COMMIT makes the message visible, ROLLBACK drops it; when the service
   cannot tell (UNKNOWN: it crashed, timed out), the broker asks later through
   the check-back session and the answer comes from the database itself.

Run on its own:  python order_service.py --broker 127.0.0.1:8081 --db orders.db --orders 200
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from txmq.broker.client import LocalTransactionState, Message, TransactionProducer
from txmq.broker.client.cluster_client import ClusterClient

ORDERS_TOPIC = "orders"
PRODUCER_GROUP = "order-service"

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id   TEXT PRIMARY KEY,
    user       TEXT NOT NULL,
    amount     INTEGER NOT NULL,
    tx_id      TEXT
)
"""


@dataclass(frozen=True)
class Order:
    order_id: str
    user: str
    amount: int
    fate: str  # "pay" | "decline" | "pay-then-vanish" | "vanish"


class PaymentDeclined(Exception):
    """The card was declined: the local transaction rolls back."""


def open_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(SCHEMA)
    return db


class OrderListener:
    """RocketMQ's TransactionListener for orders: the local transaction is the order row."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute_local_transaction(self, message, order: Order) -> LocalTransactionState:
        if order.fate == "vanish":
            # The service "crashes" before touching the DB and never answers.
            return LocalTransactionState.UNKNOWN
        try:
            self.db.execute("BEGIN")
            self.db.execute("INSERT INTO orders VALUES (?, ?, ?, ?)",
                            (order.order_id, order.user, order.amount, message.transaction_id))
            if order.fate == "decline":
                raise PaymentDeclined(order.order_id)
            self.db.execute("COMMIT")
        except PaymentDeclined:
            self.db.execute("ROLLBACK")
            return LocalTransactionState.ROLLBACK
        if order.fate == "pay-then-vanish":
            # The DB committed, then the service lost its answer: the broker will ask.
            return LocalTransactionState.UNKNOWN
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, message) -> LocalTransactionState:
        """The broker asks about an unanswered transaction: the order table is the truth. The row
        names the transaction that paid it, so the halves of an attempt that failed and was
        retried (a broker lost mid-send) roll back instead of publishing the order twice."""
        order_id = message.keys[0]
        row = self.db.execute("SELECT tx_id FROM orders WHERE order_id = ?", (order_id,)).fetchone()
        paid_by_it = row is not None and row[0] == message.transaction_id
        return LocalTransactionState.COMMIT if paid_by_it else LocalTransactionState.ROLLBACK


def make_orders(count: int, seed: int = 7) -> list[Order]:
    """Orders for ten users; about 80% pay, 10% are declined, 10% leave the answer to check-back."""
    rng = random.Random(seed)
    fates = ["pay"] * 16 + ["decline"] * 2 + ["pay-then-vanish", "vanish"]
    return [Order(f"order-{i:05d}", f"user-{rng.randrange(10)}", rng.randint(1, 100), rng.choice(fates))
            for i in range(count)]


class OrderService:
    """The running order service: its database and its TransactionProducer.

    It must stay up after placing orders: the broker asks the live producer
    about transactions it left UNKNOWN, and only this process can answer.
    """

    def __init__(self, broker: str, db_path: Path) -> None:
        self.db = open_db(db_path)
        # a ClusterClient: one broker, or any broker of a cluster whose groups share the orders
        self.client = ClusterClient(broker)
        self.producer = TransactionProducer(self.client, PRODUCER_GROUP, OrderListener(self.db),
                                            topics=[ORDERS_TOPIC])
        self.counts = {"COMMIT": 0, "ROLLBACK": 0, "UNKNOWN": 0}

    def __enter__(self) -> "OrderService":
        self.producer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.producer.shutdown()
        self.client.close()
        self.db.close()

    def place(self, order: Order) -> str:
        """Pay one order in one transaction; returns COMMIT, ROLLBACK or UNKNOWN (left to check-back)."""
        body = json.dumps({"order_id": order.order_id, "user": order.user, "amount": order.amount}).encode()
        message = Message(ORDERS_TOPIC, body, tag="paid", keys=[order.order_id], sharding_key=order.user)
        state = self.producer.send_message_in_transaction(message, order).local_state.value
        self.counts[state] += 1
        return state

    def place_all(self, orders: list[Order], progress=print) -> dict[str, int]:
        for n, order in enumerate(orders, 1):
            self.place(order)
            if n % 50 == 0 or n == len(orders):
                c = self.counts
                progress(f"  orders placed: {n}/{len(orders)}  (committed {c['COMMIT']}, "
                         f"rolled back {c['ROLLBACK']}, left to check-back {c['UNKNOWN']})")
        return dict(self.counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", default="127.0.0.1:8081")
    parser.add_argument("--db", type=Path, default=Path("orders.db"))
    parser.add_argument("--orders", type=int, default=200)
    args = parser.parse_args()
    with OrderService(args.broker, args.db) as service:
        service.place_all(make_orders(args.orders))
        input("orders placed; keep this process up to answer check-backs, press Enter to stop ")


if __name__ == "__main__":
    main()
