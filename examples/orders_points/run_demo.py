"""`make demo`: the whole txmq story on one machine, end to end, with a verdict.

1. starts an embedded broker (its own process, data under .demo/, a free port);
2. starts the Spark points job (spark-submit points_job.py) reading committed orders;
3. the order service pays 200 orders in SQLite, each in a broker transaction:
   most commit, some are declined (rolled back), some leave the answer UNKNOWN
   and are resolved by the broker's check-back against the database;
4. waits until no transaction is pending, lets the Spark job drain and stop;
5. the points service applies the published points to its SQLite ledger;
6. checks: every user's points equal the sum of their committed orders, exactly.

Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))  # the example's sibling modules

from order_service import OrderService, make_orders  # noqa: E402
from points_consumer import apply_available  # noqa: E402
from txmq.broker.client import NativeClient  # noqa: E402
from txmq.broker.embedded import EmbeddedBroker  # noqa: E402


def say(text: str) -> None:
    print(text, flush=True)


def start_spark_job(broker: str, work: Path) -> subprocess.Popen:
    spark_submit = Path(sys.executable).with_name("spark-submit")
    cmd = [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           str(HERE / "points_job.py"), "--broker", broker, "--checkpoint", str(work / "checkpoint"),
           "--stop-file", str(work / "stop")]
    log = open(work / "spark.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def wait_until_resolved(client: NativeClient, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        pending = client.list_transactions(state="PENDING")
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} transactions still pending after {timeout_s}s")
        say(f"  waiting for check-back to resolve {len(pending)} pending transaction(s)...")
        time.sleep(1.0)


def verify(orders_db: Path, points_db: Path) -> tuple[bool, dict[str, int]]:
    orders = sqlite3.connect(str(orders_db))
    points = sqlite3.connect(str(points_db))
    expected = dict(orders.execute("SELECT user, SUM(amount) FROM orders GROUP BY user"))
    actual = dict(points.execute("SELECT user, points FROM points"))
    committed_ids = {r[0] for r in orders.execute("SELECT order_id FROM orders")}
    applied_ids = {r[0] for r in points.execute("SELECT order_id FROM applied")}
    applied_count = points.execute("SELECT COUNT(*) FROM applied").fetchone()[0]
    facts = {"orders_committed_in_db": len(committed_ids), "points_messages_applied": applied_count,
             "points_total": sum(actual.values()), "expected_points_total": sum(expected.values())}
    ok = expected == actual and committed_ids == applied_ids and applied_count == len(committed_ids)
    return ok, facts


def drain_and_apply(spark_job: subprocess.Popen, broker: str, work: Path,
                    timeout_s: float) -> tuple[bool, dict[str, int]] | None:
    """Steps 5 and 6: let the Spark job drain and stop, apply the points, verify; None if Spark failed."""
    say("[5/6] draining the Spark job ...")
    (work / "stop").touch()
    if spark_job.wait(timeout=timeout_s) != 0:
        say(f"      the Spark job failed; see {work / 'spark.log'}")
        return None
    say("[6/6] the points service applies what Spark published ...")
    apply_available(broker, work / "points.db")
    return verify(work / "orders.db", work / "points.db")


def run(order_count: int, work: Path) -> bool:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spark_job = None
    broker = EmbeddedBroker(work / "broker", flush="sync",
                           extra_args=["--transaction-timeout", "2s", "--check-interval", "500ms"])
    try:
        say("[1/6] starting the embedded broker ...")
        broker.start()
        say(f"      broker ready on {broker.endpoint} (data in {work / 'broker'})")
        with NativeClient(broker.endpoint) as client:
            client.create_topic("orders", 4)
            client.create_topic("points", 4)
            say("[2/6] starting the Spark points job (spark-submit, local[2]) ...")
            spark_job = start_spark_job(broker.endpoint, work)
            say(f"[3/6] placing {order_count} orders through the TransactionProducer ...")
            with OrderService(broker.endpoint, work / "orders.db") as service:
                outcome = service.place_all(make_orders(order_count), progress=say)
                say("[4/6] the broker's check-back asks the order service about unanswered transactions ...")
                wait_until_resolved(client, timeout_s=120)
        drained = drain_and_apply(spark_job, broker.endpoint, work, timeout_s=600)
        if drained is None:
            return False
        ok, facts = drained
        by_check = outcome["UNKNOWN"]
        say("")
        say("Summary")
        say(f"  orders committed by the service:     {outcome['COMMIT']}")
        say(f"  orders rolled back (declined):       {outcome['ROLLBACK']}")
        by_check_committed = facts["orders_committed_in_db"] - outcome["COMMIT"]
        say(f"  orders resolved by check-back:       {by_check} "
            f"({by_check_committed} committed, {by_check - by_check_committed} rolled back)")
        say(f"  committed orders in the database:    {facts['orders_committed_in_db']}")
        say(f"  points messages applied:             {facts['points_messages_applied']}")
        say(f"  points awarded / expected:           {facts['points_total']} / {facts['expected_points_total']}")
        say(f"  exactly-once verified:               {'yes' if ok else 'NO'}")
        return ok
    finally:
        if spark_job and spark_job.poll() is None:
            spark_job.send_signal(signal.SIGINT)
            try:
                spark_job.wait(30)
            except subprocess.TimeoutExpired:
                spark_job.kill()
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--work-dir", type=Path, default=ROOT / ".demo")
    args = parser.parse_args()
    try:
        ok = run(args.orders, args.work_dir)
    except KeyboardInterrupt:
        say("\ninterrupted: everything stopped")
        sys.exit(130)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
