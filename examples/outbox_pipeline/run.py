"""Run the outbox pipeline, kill its driver with SIGKILL twice mid-run, restart it, and check the result.

    python run.py [--payments 3000] [--kills 2]

Checks at the end: the ledger holds every payment exactly once, and the
committed "ledger-updates" messages match the ledger rows one to one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from txmq.broker.client import Message, NativeClient, PullConsumer
from txmq.broker.embedded import EmbeddedBroker

HERE = Path(__file__).resolve().parent


def say(text: str) -> None:
    print(text, flush=True)


def seed_payments(client: NativeClient, count: int) -> None:
    rng = random.Random(11)
    messages = [Message("payments", json.dumps({"payment_id": f"pay-{i:06d}", "account": f"acct-{rng.randrange(20)}",
                                                "amount": rng.randint(1, 500)}).encode(), keys=[f"pay-{i:06d}"])
                for i in range(count)]
    for start in range(0, count, 500):
        client.send(messages[start:start + 500])


def start_pipeline(broker: str, work: Path, run: int) -> subprocess.Popen:
    spark_submit = Path(sys.executable).with_name("spark-submit")
    cmd = [str(spark_submit), "--master", "local[2]", str(HERE / "pipeline.py"), "--broker", broker,
           "--checkpoint", str(work / "checkpoint"), "--db", str(work / "ledger.db")]
    log = open(work / f"pipeline-run{run}.log", "w")
    # its own session, so that SIGKILL reaches the JVM and the Python driver together
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def committed_updates(broker: str) -> list[str]:
    with PullConsumer(broker, ["ledger-updates"], start="earliest") as consumer:
        ids: list[str] = []
        while batches := consumer.poll(timeout_ms=0):
            for batch in batches:
                ids.extend(json.loads(b)["payment_id"] for b in batch.column("body").to_pylist())
        return ids


def check(work: Path, broker: str, payments: int) -> bool:
    db = sqlite3.connect(str(work / "ledger.db"))
    ledger_ids = [r[0] for r in db.execute("SELECT payment_id FROM ledger")]
    update_ids = committed_updates(broker)
    expected = {f"pay-{i:06d}" for i in range(payments)}
    say(f"  ledger rows: {len(ledger_ids)} (distinct {len(set(ledger_ids))}), "
        f"committed ledger-updates: {len(update_ids)} (distinct {len(set(update_ids))}), payments: {payments}")
    return (set(ledger_ids) == expected and len(ledger_ids) == payments
            and sorted(update_ids) == sorted(ledger_ids))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payments", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--work-dir", type=Path, default=HERE.parent.parent / ".demo" / "outbox")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    shutil.rmtree(args.work_dir, ignore_errors=True)
    args.work_dir.mkdir(parents=True)
    with EmbeddedBroker(args.work_dir / "broker", extra_args=["--transaction-timeout", "2s",
                                                              "--check-interval", "1s"]) as broker:
        with NativeClient(broker.endpoint) as client:
            for topic in ("payments", "ledger-updates"):
                client.create_topic(topic, 4)
            seed_payments(client, args.payments)
        say(f"seeded {args.payments} payments; running the pipeline with {args.kills} driver kill(s)")
        for run in range(args.kills + 1):
            proc = start_pipeline(broker.endpoint, args.work_dir, run)
            if run < args.kills:
                delay = rng.uniform(15, 35)
                try:
                    proc.wait(timeout=delay)
                    say(f"  run {run}: finished before its kill")
                    break
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    say(f"  run {run}: driver killed with SIGKILL after {delay:.0f}s")
            else:
                code = proc.wait(timeout=900)
                say(f"  run {run}: ran to the end (exit {code})")
                if code != 0:
                    say(f"  see {args.work_dir}/pipeline-run{run}.log")
                    sys.exit(1)
        ok = check(args.work_dir, broker.endpoint, args.payments)
    say(f"nothing lost, nothing duplicated: {'yes' if ok else 'NO'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
