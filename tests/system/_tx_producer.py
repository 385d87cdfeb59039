"""A producer process for the crash torture: random transactions, a journal, check-backs answered from it.

Each transaction's decision is journaled (fsync) BEFORE its halves are sent,
so the check-back handler can always answer from the journal:

    BEGIN <tx> <n> <COMMIT|ROLLBACK|NONE>   before prepare
    PREPARED <tx>                           prepare acknowledged
    ABANDON <tx>                            prepare failed (the halves may or may not exist)
    ENDED <tx> <STATE>                      EndTransaction acknowledged with that state

NONE leaves the transaction to check-back, which answers COMMIT for even
sequence numbers and ROLLBACK for odd ones. ABANDON is answered ROLLBACK.
The process runs until --stop-file appears, then keeps answering check-backs
until it is terminated.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from pathlib import Path

from txmq.broker import errors
from txmq.broker.client import Message, NativeClient

GROUP = "torture-producer"


def none_answer(tx: str) -> str:
    return "COMMIT" if int(tx.rsplit("-", 1)[1]) % 2 == 0 else "ROLLBACK"


class Journal:
    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", buffering=1)
        self.decisions: dict[str, str] = {}
        self.abandoned: set[str] = set()
        self.lock = threading.Lock()

    def write(self, *fields: object) -> None:
        with self.lock:
            self.file.write(" ".join(map(str, fields)) + "\n")
            self.file.flush()
            os.fsync(self.file.fileno())

    def answer(self, tx: str) -> str:
        with self.lock:
            decision = self.decisions.get(tx)
            if decision is None or tx in self.abandoned:
                return "ROLLBACK"
        return none_answer(tx) if decision == "NONE" else decision


def run(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    journal = Journal(args.journal)
    topics = args.topics.split(",")
    client = NativeClient(args.broker, timeout_s=10)
    session = client.checkback_session(GROUP, topics, lambda request: journal.answer(request.transaction_id))
    session.wait_registered(30)
    print("producer ready", flush=True)
    seq = 0
    while not args.stop_file.exists():
        seq += 1
        tx = f"{args.prefix}-{seq}"
        n = rng.randint(1, 50)
        decision = rng.choices(["COMMIT", "ROLLBACK", "NONE"], weights=[60, 25, 15])[0]
        messages = [Message(rng.choice(topics), f"{tx}:{k}:{n}".encode(), sharding_key=str(rng.randrange(8)))
                    for k in range(n)]
        with journal.lock:
            journal.decisions[tx] = decision
        journal.write("BEGIN", tx, n, decision)
        try:
            client.prepare(tx, messages, producer_group=GROUP, sender=args.prefix)
        except errors.TxmqError:
            with journal.lock:
                journal.abandoned.add(tx)
            journal.write("ABANDON", tx)
            time.sleep(0.05)
            continue
        journal.write("PREPARED", tx)
        if decision == "NONE":
            continue
        while True:  # EndTransaction is idempotent: retrying it until it is acknowledged is safe
            try:
                ended = client.end_transaction(tx, decision, producer_group=GROUP)
                journal.write("ENDED", tx, ended.state)
                break
            except errors.TransactionConflict:
                journal.write("ENDED", tx, "CONFLICT")
                break
            except errors.TxmqError:
                time.sleep(0.1)
    print(f"producer stopped after {seq} transactions", flush=True)
    while True:  # keep answering check-backs until terminated
        time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", required=True)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--stop-file", type=Path, required=True)
    parser.add_argument("--topics", default="tort-a,tort-b,tort-c")
    parser.add_argument("--prefix", default="p")
    parser.add_argument("--seed", type=int, default=0)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
