"""A broker-ish process for crash torture: store + transaction engine + check-back.

    python -m tests.transaction._tx_worker DATA_DIR JOURNAL --flush sync|async --seed N [--drain]

It runs random transactions (1–50 messages, or TX_WORKER_MESSAGES; random topics and
queues, one or two senders) and writes a journal line, flushed, at each step a producer would
know about:

    {"ev": "begin", "tx": ID}                         before the first prepare
    {"ev": "prepared", "tx": ID, "msgs": [[topic, queue, body], ...]}   after prepare acknowledged
    {"ev": "decided", "tx": ID, "decision": D}        the local transaction's outcome
    {"ev": "ended", "tx": ID, "state": S, "by": "client"|"check"}       after end() acknowledged

D is COMMIT or ROLLBACK (sent at once) or COMMIT_SILENT / ROLLBACK_SILENT (the
producer never sends it: check-back must resolve it). The check-back listener
answers from the journal like a producer: decided → that outcome; begun in this
process but undecided → unknown (ask again later); never decided in an earlier
life → rollback. The test SIGKILLs this process at random moments.

On start in sync mode it replays a few acknowledged resolutions: a repeat must be
acknowledged without writing, a contradiction refused; a violation exits 3.
With --drain it resolves everything pending by check-back, stops cleanly and
prints "drained".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

from txmq.broker.errors import TransactionConflict, UnknownTransaction
from txmq.broker.store import message_store
from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import Message
from txmq.broker.store.message_store import MessageStore
from txmq.broker.store.record_block import load_compiled
from txmq.broker.store.record_copy import load_compiled_scan
from txmq.broker.transaction import CheckbackService, Resolution, TransactionConfig, TransactionEngine

TOPICS = ("orders", "points", "audit")
PART_BYTES_ENV = "TX_WORKER_COPY_PART_BYTES"  # set: the store's COPY_PART_BYTES in this worker
PRODUCERS_ENV = "TX_WORKER_PRODUCERS"  # producer threads running transactions at once (default 1)
MESSAGES_ENV = "TX_WORKER_MESSAGES"  # "LO-HI": messages per transaction (default 1-50)
QUEUES = 4
DECISIONS = ("COMMIT", "COMMIT", "ROLLBACK", "COMMIT_SILENT", "ROLLBACK_SILENT")


def read_journal(path: Path) -> list[dict]:
    """Complete lines only: a kill may cut the last line short."""
    events = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events


class Journal:
    def __init__(self, path: Path) -> None:
        self._fh = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, **event: object) -> None:
        with self._lock:
            self._fh.write(json.dumps(event) + "\n")
            self._fh.flush()


class JournalListener:
    """The producer side of check-back, answering from what the journal knows."""

    def __init__(self, engine: TransactionEngine, journal: Journal, decisions: dict[str, str]) -> None:
        self.engine = engine
        self.journal = journal
        self.decisions = decisions
        self.in_progress: set[str] = set()

    def request_check(self, tx, half) -> bool:
        tx_id = tx.transaction_id
        decision = self.decisions.get(tx_id)
        if decision is None and tx_id in self.in_progress:
            return True  # the local transaction is still running: answer UNKNOWN
        resolution = Resolution.COMMIT if decision and decision.startswith("COMMIT") else Resolution.ROLLBACK
        try:
            result = self.engine.end(tx_id, resolution, source="check")
        except (TransactionConflict, UnknownTransaction) as exc:
            self.journal.write(ev="violation", tx=tx_id, error=repr(exc))
            raise
        if result.newly_ended:
            self.journal.write(ev="ended", tx=tx_id, state=result.state.value, by="check")
        return True


def store_config(data_dir: Path, flush: str = "async") -> StoreConfig:
    """Small segments so that segment rolls happen under torture (readers must use the same)."""
    return StoreConfig(data_dir=data_dir, flush_mode=flush, flush_interval_ms=50,
                       commitlog_segment_bytes=4 << 20, checkpoint_interval_ms=200)


def open_engine(data_dir: Path, flush: str, timeout_s: float):
    store = MessageStore(store_config(data_dir, flush))
    config = TransactionConfig(transaction_timeout_s=timeout_s, check_interval_s=0.05,
                               snapshot_interval_s=0.3, max_checks=1000)
    return store, TransactionEngine(store, config)


def replay_resolutions(engine: TransactionEngine, events: list[dict], journal: Journal) -> None:
    """Sync mode: acknowledged resolutions must survive, repeats are no-ops, contradictions refused."""
    ended = [e for e in events if e.get("ev") == "ended"][-20:]
    for e in ended:
        same = Resolution.COMMIT if e["state"] == "COMMITTED" else Resolution.ROLLBACK
        other = Resolution.ROLLBACK if same is Resolution.COMMIT else Resolution.COMMIT
        try:
            if engine.end(e["tx"], same).newly_ended:
                raise AssertionError("repeat wrote a new resolution")
            try:
                engine.end(e["tx"], other)
                raise AssertionError("contradiction accepted")
            except TransactionConflict:
                pass
        except (AssertionError, UnknownTransaction) as exc:
            journal.write(ev="violation", tx=e["tx"], error=repr(exc))
            sys.exit(3)


def run_transactions(engine: TransactionEngine, journal: Journal, listener: JournalListener, seed: int,
                     pace_s: float, producer: int = 0) -> None:
    rng = random.Random(seed * 100 + producer)
    lo, hi = map(int, os.environ.get(MESSAGES_ENV, "1-50").split("-"))
    serial = 0
    while True:
        serial += 1
        tx_id = f"w{seed}-{serial}" if not producer else f"w{seed}p{producer}-{serial}"
        n = rng.randint(lo, hi)
        msgs = [(rng.choice(TOPICS), rng.randrange(QUEUES), f"{tx_id}:{k}") for k in range(n)]
        listener.in_progress.add(tx_id)
        journal.write(ev="begin", tx=tx_id)
        split = rng.randint(1, n) if n > 1 and rng.random() < 0.3 else n
        for sender, part in (("s1", msgs[:split]), ("s2", msgs[split:])):
            if part:
                engine.prepare([Message(topic=t, body=b.encode(), queue_id=q) for t, q, b in part],
                               transaction_id=tx_id, producer_group="pg", sender=sender)
        journal.write(ev="prepared", tx=tx_id, msgs=msgs)
        decision = rng.choice(DECISIONS)
        listener.decisions[tx_id] = decision
        journal.write(ev="decided", tx=tx_id, decision=decision)
        listener.in_progress.discard(tx_id)
        if decision in ("COMMIT", "ROLLBACK"):
            result = engine.end(tx_id, Resolution[decision])
            if result.newly_ended:
                journal.write(ev="ended", tx=tx_id, state=result.state.value, by="client")
        time.sleep(pace_s)  # bounds the data a life writes: each kill's check re-reads all of it


def drain(engine: TransactionEngine, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while engine.pending(limit=1):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("journal", type=Path)
    ap.add_argument("--flush", choices=("sync", "async"), default="sync")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--drain", action="store_true")
    ap.add_argument("--pace-ms", type=float, default=2.0, help="pause between transactions")
    args = ap.parse_args(argv)
    part_bytes = os.environ.get(PART_BYTES_ENV)
    if part_bytes:  # COMMITs written in parts, as split groups (split_group.SplitGroupWriter)
        message_store.COPY_PART_BYTES = int(part_bytes)
    load_compiled()  # as a broker does at start: large COMMIT parts take the compiled encoder and scan
    load_compiled_scan()
    events = read_journal(args.journal)
    decisions = {e["tx"]: e["decision"] for e in events if e.get("ev") == "decided"}
    journal = Journal(args.journal)
    store, engine = open_engine(args.data_dir, args.flush, 0.0 if args.drain else 0.3)
    if args.flush == "sync":
        replay_resolutions(engine, events, journal)
    listener = JournalListener(engine, journal, decisions)
    service = CheckbackService(engine, listener)
    service.start()
    print(f"ready pid={os.getpid()} recovery={json.dumps(engine.recovery_stats)}", flush=True)
    if args.drain:
        ok = drain(engine)
        service.stop()
        engine.close()
        store.close()
        print("drained" if ok else "not drained", flush=True)
        return 0 if ok else 4
    for producer in range(1, int(os.environ.get(PRODUCERS_ENV, "1"))):  # their writes land between others' parts
        threading.Thread(target=run_transactions, args=(engine, journal, listener, args.seed, args.pace_ms / 1000,
                                                        producer), daemon=True).start()
    run_transactions(engine, journal, listener, args.seed, args.pace_ms / 1000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
