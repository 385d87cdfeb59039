"""Client work of the cluster tests, run on a lab host next to the broker (the test runner's own
namespace cannot reach the lab): fill a topic, produce under transactions, watch the sink's
pending transactions, read a topic back. Prints one JSON document (or JSON lines for `watch`)."""

from __future__ import annotations

import argparse
import json
import sys
import time

import pyarrow as pa

from txmq.broker.client.native_client import NativeClient


def fill(c: NativeClient, a) -> dict:
    c.create_topic(a.topic, a.queues)
    for start in range(0, a.count, 10_000):
        n = min(10_000, a.count - start)
        c.send_arrow(pa.record_batch({"body": [b"row-%07d-%s" % (start + i, b"x" * 80) for i in range(n)]}),
                     topic=a.topic)
    return {"sent": a.count}


def produce(c: NativeClient, a) -> dict:
    """Transactions of `size` messages; every fourth rolled back. Returns the committed bodies."""
    c.create_topic(a.topic, a.queues)
    committed = []
    for t in range(a.transactions):
        bodies = [b"o%04d-%03d" % (t, k) for k in range(a.size)]
        tx = f"{a.topic}-{t}"
        c.prepare_arrow(tx, pa.record_batch({"body": bodies}), topic=a.topic, producer_group="orders",
                        sender="producer")
        if t % 4 == 3:
            c.end_transaction(tx, "ROLLBACK", producer_group="orders")
        else:
            c.end_transaction(tx, "COMMIT", producer_group="orders")
            committed.extend(b.decode() for b in bodies)
        time.sleep(a.pause)
    return {"committed": committed}


def watch(c: NativeClient, a) -> None:
    """JSON lines: the pending transactions writing to `topic`, every 0.1 s, until killed."""
    while True:
        txs = c.list_transactions(state="PENDING", topic=a.topic)
        print(json.dumps({"t": time.time(), "pending": [
            {"tx": t.transaction_id, "senders": list(t.senders), "halves": t.half_count} for t in txs]}), flush=True)
        time.sleep(0.1)


def dump(c: NativeClient, a) -> dict:
    """Every visible message of `topic`: body and the transaction that committed it."""
    rows = []
    for q, end in sorted(c.snapshot_offsets([a.topic])[a.topic].items()):
        for r in c.read_queue(a.topic, q, 0, end):
            rows.extend(zip((b.decode() for b in r.batch.column("body").to_pylist()),
                            r.batch.column("transactionId").to_pylist()))
    txs = {tx for _, tx in rows if tx}
    info = {}
    for tx in sorted(txs | set(a.tx or ())):
        t = c.get_transaction(tx)
        info[tx] = {"state": t.state, "senders": list(t.senders), "halves": t.half_count}
    return {"rows": rows, "transactions": info}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--broker", required=True)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fill")
    f.add_argument("topic"), f.add_argument("count", type=int), f.add_argument("--queues", type=int, default=4)
    pr = sub.add_parser("produce")
    pr.add_argument("topic"), pr.add_argument("transactions", type=int), pr.add_argument("size", type=int)
    pr.add_argument("--queues", type=int, default=2), pr.add_argument("--pause", type=float, default=0.05)
    w = sub.add_parser("watch")
    w.add_argument("topic")
    d = sub.add_parser("dump")
    d.add_argument("topic"), d.add_argument("--tx", action="append")
    ct = sub.add_parser("create")
    ct.add_argument("topic"), ct.add_argument("--queues", type=int, default=2)
    a = p.parse_args()
    with NativeClient(a.broker, timeout_s=30) as c:
        if a.cmd == "watch":
            watch(c, a)
            return
        if a.cmd == "create":
            c.create_topic(a.topic, a.queues)
            out = {"created": a.topic}
        else:
            out = {"fill": fill, "produce": produce, "dump": dump}[a.cmd](c, a)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
