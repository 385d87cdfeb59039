"""A broker group of three replicas on etcd, on this machine: transactions go on across a leader kill.

Run with `make demo-cluster`. It starts an etcd member and three replica processes on
loopback (as three hosts would run them), commits transactions of 10 orders each
through a client given every replica's endpoint, kills the leader with SIGKILL half-way,
and shows the failover, the group's status, and that every committed order is there once.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.coordination import cluster_status
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup
from txmq.broker.errors import TxmqError

TRANSACTIONS = 60


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="txmq-cluster-demo-"))
    etcd = EtcdProcess(root / "etcd").start()
    group = LocalGroup(root, etcd, "orders", args=["--replication", "sync"])
    try:
        group.start()
        first = group.wait_leader()
        print(f"etcd on {etcd.endpoint}; group 'orders' of {len(group.replicas)} replicas; "
              f"{first.endpoint} leads epoch {first.epoch}")
        committed: list[bytes] = []
        killed_at = None
        with NativeClient(group.endpoints, timeout_s=30) as client:
            client.create_topic("orders", 4)
            for t in range(TRANSACTIONS):
                bodies = [b"order-%d-%d" % (t, i) for i in range(10)]
                while True:
                    try:
                        tx = client.prepare("", [Message("orders", b) for b in bodies]).transaction_id
                        client.end_transaction(tx, "COMMIT")
                        break
                    except TxmqError as exc:  # the group is electing: nothing of it was committed
                        print(f"  transaction {t}: {type(exc).__name__}, trying again")
                        time.sleep(0.2)
                committed += bodies
                if t == TRANSACTIONS // 2:
                    print(f"kill -9 of the leader {first.endpoint}")
                    group.replica(first.endpoint).kill()
                    killed_at = time.monotonic()
                elif killed_at is not None and t == TRANSACTIONS // 2 + 1:
                    print(f"first transaction committed {time.monotonic() - killed_at:.2f} s after the kill")
            cut = client.snapshot_offsets(["orders"])["orders"]
            seen: Counter = Counter()
            for qid, end in cut.items():
                for result in client.read_queue("orders", qid, 0, end):
                    seen.update(result.batch.column("body").to_pylist())
        status = cluster_status([("127.0.0.1", etcd.client_port)], "orders")["groups"]["orders"]
        print(json.dumps(status, indent=1))
        ok = all(seen[b] == 1 for b in committed) and max(seen.values()) == 1
        print(f"{len(committed)} committed orders, {sum(seen.values())} visible, "
              f"{'each exactly once' if ok else 'NOT exactly once'}; now led by {status['leader']} "
              f"(epoch {status['epoch']})")
        return 0 if ok else 1
    finally:
        group.stop()
        etcd.kill()


if __name__ == "__main__":
    sys.exit(main())
