"""Invariants 1–4 under crashes, with real processes on both sides.

A producer process runs random transactions (1–50 messages over three topics
and their queues; COMMIT, ROLLBACK or no answer) against a broker process that
is killed with SIGKILL at random moments and restarted. The producer journals
each decision before sending and answers check-backs from the journal. When
the dust settles, every transaction must be visible in full, exactly once, iff
it committed, and the broker's verdict must agree with the journal.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from txmq.broker import errors
from txmq.broker.client import NativeClient, PullConsumer
from txmq.broker.embedded import EmbeddedBroker

HERE = Path(__file__).resolve().parent
TOPICS = ["tort-a", "tort-b", "tort-c"]
BROKER_FLAGS = ["--transaction-timeout", "1s", "--check-interval", "200ms", "--max-checks", "10000"]


@dataclass
class JournalEntry:
    n: int
    decision: str
    prepared: bool = False
    abandoned: bool = False
    ended: str | None = None


def read_journal(path: Path) -> dict[str, JournalEntry]:
    entries: dict[str, JournalEntry] = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue  # a line torn by the producer's termination
        kind, tx = fields[0], fields[1]
        if kind == "BEGIN" and len(fields) == 4:
            entries[tx] = JournalEntry(int(fields[2]), fields[3])
        elif kind == "PREPARED":
            entries[tx].prepared = True
        elif kind == "ABANDON":
            entries[tx].abandoned = True
        elif kind == "ENDED" and len(fields) == 3:
            entries[tx].ended = fields[2]
    return entries


def none_answer(tx: str) -> str:
    return "COMMITTED" if int(tx.rsplit("-", 1)[1]) % 2 == 0 else "ROLLED_BACK"


def visible_messages(client: NativeClient) -> Counter[tuple[str, int]]:
    """(transaction, index) → how many times it is visible, over every queue of every topic."""
    seen: Counter[tuple[str, int]] = Counter()
    consumer = PullConsumer(client, TOPICS, start="earliest")
    while batches := consumer.poll(timeout_ms=0):
        for batch in batches:
            for body in batch.column("body").to_pylist():
                tx, index, _ = body.decode().split(":")
                seen[(tx, int(index))] += 1
    return seen


def broker_state(client: NativeClient, tx: str) -> str:
    try:
        return client.get_transaction(tx).state
    except errors.UnknownTransaction:
        return "UNKNOWN"


def wait_until_settled(client: NativeClient, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while client.list_transactions(state="PENDING", limit=10):
        assert time.monotonic() < deadline, "check-back did not resolve every pending transaction"
        time.sleep(0.3)


def run_torture(tmp_path: Path, *, kills: int, flush: str, seed: int) -> dict[str, JournalEntry]:
    rng = random.Random(seed)
    journal, stop_file = tmp_path / "journal.txt", tmp_path / "stop"
    broker = EmbeddedBroker(tmp_path / "broker", flush=flush, extra_args=BROKER_FLAGS).start()
    producer = None
    try:
        with NativeClient(broker.endpoint) as admin:
            for topic in TOPICS:
                admin.create_topic(topic, 4)
        producer = subprocess.Popen(
            [sys.executable, str(HERE / "_tx_producer.py"), "--broker", broker.endpoint, "--journal", str(journal),
             "--stop-file", str(stop_file), "--seed", str(seed), "--topics", ",".join(TOPICS)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert producer.stdout.readline().strip() == "producer ready"
        for _ in range(kills):
            time.sleep(rng.uniform(0.3, 1.5))
            broker.kill()
            time.sleep(rng.uniform(0.0, 0.5))
            broker.restart()
        time.sleep(1.0)
        stop_file.touch()
        with NativeClient(broker.endpoint, timeout_s=30) as client:
            wait_until_settled(client, timeout_s=120)
            entries = read_journal(journal)
            check_invariants(client, entries, flush=flush)
        return entries
    finally:
        if producer is not None:
            producer.kill()
            producer.wait()
        broker.stop()


def check_invariants(client: NativeClient, entries: dict[str, JournalEntry], *, flush: str) -> None:
    seen = visible_messages(client)
    assert all(count == 1 for count in seen.values()), \
        f"duplicates: {[k for k, c in seen.items() if c > 1][:5]}"
    per_tx = Counter(tx for tx, _ in seen)
    assert set(per_tx) <= set(entries), f"visible messages of unknown transactions: {set(per_tx) - set(entries)}"
    for tx, entry in entries.items():
        state = broker_state(client, tx)
        assert state not in ("PENDING", "DISCARDED"), f"{tx} left {state}"
        # invariants 1 and 2: visible iff committed, and then all of it
        assert per_tx.get(tx, 0) == (entry.n if state == "COMMITTED" else 0), (tx, state, per_tx.get(tx), entry)
        if state == "UNKNOWN":
            # only a prepare that failed, or (async) one whose unflushed halves died with the broker
            assert entry.abandoned or not entry.prepared or flush == "async", (tx, entry)
            continue
        if entry.decision == "ROLLBACK":
            assert state != "COMMITTED", (tx, entry)
        if entry.ended is not None:  # an acknowledged end is never undone (invariant 4)
            assert entry.ended == state, (tx, state, entry)
        if entry.prepared and not entry.abandoned:
            expected = {"COMMIT": "COMMITTED", "ROLLBACK": "ROLLED_BACK"}.get(entry.decision) or none_answer(tx)
            assert state == expected, (tx, state, entry)


def test_transactions_survive_broker_kills_exactly_once(tmp_path: Path) -> None:
    entries = run_torture(tmp_path, kills=3, flush="sync", seed=1)
    assert sum(e.prepared for e in entries.values()) >= 10, "the producer made too little progress to mean much"


@pytest.mark.torture
@pytest.mark.parametrize("flush", ["sync", "async"])
def test_transactions_survive_fifty_broker_kills(tmp_path: Path, flush: str) -> None:
    run_torture(tmp_path, kills=50, flush=flush, seed=2 if flush == "sync" else 3)
