"""`make demo-cluster`: the orders → points pipeline on a cluster of broker groups, through a leader kill.

1. starts an etcd member and 3 groups of 3 replicas each on loopback (as nine hosts would
   run them), `--replication sync`;
2. creates the "orders" and "points" topics, their queues spread over the groups;
3. starts the Spark points job (spark-submit, local[2]) with every replica as its broker list;
4. the order service pays orders in SQLite, each in a broker transaction, over the groups;
   half-way, the leader of one group is killed with SIGKILL, and that group elects another;
5. waits for check-back to resolve every UNKNOWN, drains the Spark job, applies the points;
6. checks: every user's points equal the sum of their committed orders, exactly.

    python examples/cluster/run_demo.py [--orders 200] [--groups 3] [--replicas 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent / "orders_points"))  # the single-broker demo's services, unchanged

from order_service import OrderService, make_orders  # noqa: E402
from run_demo import drain_and_apply, say, start_spark_job, wait_until_resolved  # noqa: E402
from txmq.broker.client.cluster_client import ClusterClient  # noqa: E402
from txmq.broker.cluster.coordination import cluster_status  # noqa: E402
from txmq.broker.cluster.etcd_process import EtcdProcess  # noqa: E402
from txmq.broker.cluster.local_group import LocalGroup  # noqa: E402


def run(order_count: int, n_groups: int, replicas: int, work: Path) -> bool:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    etcd = EtcdProcess(work / "etcd").start()
    groups = [LocalGroup(work, etcd, f"g{i + 1}", replicas=replicas,
                         args=["--replication", "sync", "--transaction-timeout", "2s", "--check-interval", "500ms"])
              for i in range(n_groups)]
    spark_job = None
    try:
        say(f"[1/6] etcd on {etcd.endpoint}; starting {n_groups} groups of {replicas} replicas ...")
        for g in groups:
            g.start()
            say(f"      group {g.name}: {g.wait_leader().endpoint} leads")
        brokers = ";".join(g.endpoints for g in groups)
        with ClusterClient(brokers) as client:
            queues = client.create_topic("orders", 2 * n_groups)
            client.create_topic("points", 2 * n_groups)
            say(f"[2/6] topics orders and points: queues {', '.join(f'{q.group}/{q.queue_id}' for q in queues)}")
            say("[3/6] starting the Spark points job (spark-submit, local[2]) ...")
            spark_job = start_spark_job(brokers, work)
            victim = groups[-1]
            doomed = victim.wait_leader()

            def kill_leader() -> None:
                say(f"      kill -9 of group {victim.name}'s leader {doomed.endpoint}")
                victim.replica(doomed.endpoint).kill()
                new = victim.wait_leader(not_epoch=doomed.epoch, timeout_s=60)
                say(f"      group {victim.name}: {new.endpoint} leads epoch {new.epoch}")

            say(f"[4/6] placing {order_count} orders over the groups; a leader dies half-way ...")
            killer = None
            with OrderService(brokers, work / "orders.db") as service:
                orders = make_orders(order_count)
                for n, order in enumerate(orders, 1):
                    while True:
                        try:
                            service.place(order)
                            break
                        except Exception as exc:  # noqa: BLE001 - a group electing: the order was not paid
                            say(f"      order {order.order_id}: {type(exc).__name__}, trying again")
                            time.sleep(0.3)
                    if n == order_count // 2:
                        killer = threading.Thread(target=kill_leader)
                        killer.start()
                    if n % 50 == 0:
                        say(f"      {n} orders placed")
                outcome = dict(service.counts)
                if killer is not None:
                    killer.join()
                say("      the broker's check-back asks the order service about unanswered transactions ...")
                wait_until_resolved(client, timeout_s=180)
        drained = drain_and_apply(spark_job, brokers, work, timeout_s=900)
        if drained is None:
            return False
        ok, facts = drained
        status = cluster_status([("127.0.0.1", etcd.client_port)])["groups"]
        say("")
        say("Cluster")
        for name, g in sorted(status.items()):
            say(f"  {name}: leader {g['leader']} (epoch {g['epoch']}), in sync: "
                f"{sum(1 for m in g['members'] if m['in_sync'])} of {len(g['members'])}")
        say("Summary")
        say(f"  orders committed / rolled back / left to check-back: {outcome['COMMIT']} / {outcome['ROLLBACK']} / "
            f"{outcome['UNKNOWN']}")
        say(f"  committed orders in the database:    {facts['orders_committed_in_db']}")
        say(f"  points messages applied:             {facts['points_messages_applied']}")
        say(f"  points awarded / expected:           {facts['points_total']} / {facts['expected_points_total']}")
        say(f"  exactly-once verified:               {'yes' if ok else 'NO'}")
        (work / "summary.json").write_text(json.dumps({"ok": ok, **facts}))
        return ok
    finally:
        if spark_job and spark_job.poll() is None:
            spark_job.kill()
        for g in groups:
            g.stop()
        etcd.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--work-dir", type=Path, default=ROOT / ".demo-cluster")
    args = parser.parse_args()
    try:
        ok = run(args.orders, args.groups, args.replicas, args.work_dir)
    except KeyboardInterrupt:
        say("\ninterrupted: everything stopped")
        sys.exit(130)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
