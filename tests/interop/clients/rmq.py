"""Drive the official rocketmq-python-client (5.1.2) against a broker; print one JSON line.

Runs under .venv-rocketmq/bin/python (the official client's own environment),
never inside the test process. Subcommands:

  produce        send --count messages (sync, or --async), print ids and offsets
  transaction    send transactional messages and commit / roll back / leave them
                 orphaned for the broker's check-back (answered by a TransactionChecker)
  simple         SimpleConsumer: receive until --expect bodies (or --timeout), with
                 ack / no-ack / change-invisible behaviours
  push           PushConsumer: consume until --expect bodies (or --timeout)
  fifo-simple    FIFO messages in several message groups through a SimpleConsumer that nacks one
  fifo-push      the same through a PushConsumer whose listener fails one
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message,
                      MessageListener, Producer, PushConsumer, SimpleConsumer, TransactionChecker,
                      TransactionResolution)
from rocketmq.grpc_protocol import FilterType


def config(args) -> ClientConfiguration:
    return ClientConfiguration(args.endpoint, Credentials(args.ak or "", args.sk or ""), request_timeout=5)


def make_message(topic: str, body: str, tag: str | None) -> Message:
    m = Message()
    m.topic = topic
    m.body = body.encode()
    if tag:
        m.tag = tag
    m.keys = f"k-{body}"
    m.add_property("origin", "interop")
    return m


def receipt(r) -> dict:
    return {"message_id": r.message_id, "transaction_id": r.transaction_id, "offset": r.offset}


def view(m) -> dict:
    """What the client makes of a delivered message, field by field."""
    return {"body": m.body.decode(), "attempt": m.delivery_attempt, "acked": False, "message_id": m.message_id,
            "tag": m.tag, "keys": sorted(m.keys), "properties": dict(m.properties),
            "message_group": m.message_group, "born_host": m.born_host, "born_timestamp": m.born_timestamp,
            "delivery_timestamp": m.delivery_timestamp or None, "receipt_handle": m.receipt_handle,
            "corrupted": m.corrupted, "message_type": m.message_type}


def subscription(args) -> FilterExpression:
    """--sql (a SQL92 expression) or --tag (a tag expression, default every tag)."""
    if args.sql:
        return FilterExpression(args.sql, FilterType.SQL)
    return FilterExpression(args.tag or "*")


def cmd_produce(args) -> dict:
    producer = Producer(config(args), (args.topic,), tls_enable=args.tls)
    producer.startup()
    sent, errors = [], []
    try:
        futures = []
        for i in range(args.count):
            msg = make_message(args.topic, f"{args.prefix}-{i}", args.tag)
            if args.numbered:
                msg.add_property("n", str(i))
            if args.message_group:
                msg.message_group = args.message_group
            if args.delay_s is not None:
                # this client (5.1.2) writes the value into Timestamp.seconds, though its docs say ms:
                # give it seconds, rounded up so the message is never due sooner than asked
                msg.delivery_timestamp = int(time.time()) + 1 + args.delay_s
            try:
                if args.use_async:
                    futures.append(producer.send_async(msg))
                else:
                    sent.append(dict(receipt(producer.send(msg)), body=f"{args.prefix}-{i}"))
            except Exception as exc:  # reported, the test decides
                errors.append(f"{type(exc).__name__}: {exc}")
            if args.interval_ms:
                time.sleep(args.interval_ms / 1000)
        for f in futures:
            try:
                sent.append(receipt(f.result(timeout=30)))
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        producer.shutdown()
    return {"sent": sent, "errors": errors}


class Checker(TransactionChecker):
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def check(self, message) -> TransactionResolution:
        with self.lock:
            self.checked.append(message.body.decode())
        return TransactionResolution.COMMIT if self.answer == "commit" else TransactionResolution.ROLLBACK


def cmd_transaction(args) -> dict:
    answer = "commit" if args.mode in ("commit", "orphan-commit") else "rollback"
    checker = Checker(answer)
    producer = Producer(config(args), (args.topic,), checker)
    producer.startup()
    tx_ids, sent, ended, errors = [], [], [], []
    try:
        for i in range(args.count):
            tx = producer.begin_transaction()
            try:
                r = producer.send(make_message(args.topic, f"{args.prefix}-{i}", args.tag), tx)
                tx_ids.append(r.transaction_id)
                sent.append(receipt(r))
                if args.mode == "commit":
                    tx.commit()
                    ended.append(f"{args.prefix}-{i}")
                elif args.mode == "rollback":
                    tx.rollback()
                    ended.append(f"{args.prefix}-{i}")
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            if args.interval_ms:
                time.sleep(args.interval_ms / 1000)
        if args.mode.startswith("orphan"):
            deadline = time.time() + args.timeout
            while time.time() < deadline and len(set(checker.checked)) < args.count:
                time.sleep(0.2)
            time.sleep(1.0)  # let the EndTransaction(SOURCE_SERVER_CHECK) calls land
    finally:
        producer.shutdown()
    return {"transaction_ids": tx_ids, "sent": sent, "ended": ended, "checked": sorted(set(checker.checked)),
            "errors": errors}


def cmd_simple(args) -> dict:
    consumer = SimpleConsumer(config(args), args.group, {args.topic: subscription(args)},
                              await_duration=args.await_s)
    consumer.startup()
    received, errors = [], []
    try:
        deadline = time.time() + args.timeout
        while time.time() < deadline and len([r for r in received if r["acked"]]) < args.expect \
                and (args.behaviour != "no-ack" or len(received) < args.expect):
            try:
                messages = consumer.receive(32, args.invisible)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.2)
                continue
            for m in messages:
                entry = view(m)
                received.append(entry)
                if args.behaviour == "ack" or (args.behaviour == "nack-once" and m.delivery_attempt > 1):
                    consumer.ack(m)
                    entry["acked"] = True
                elif args.behaviour == "change-invisible":
                    if m.delivery_attempt == 1:
                        consumer.change_invisible_duration(m, args.change_to)
                    else:
                        consumer.ack(m)
                        entry["acked"] = True
    finally:
        consumer.shutdown()
    return {"received": received, "errors": errors}


class Collector(MessageListener):
    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.lock = threading.Lock()

    def consume(self, message) -> ConsumeResult:
        with self.lock:
            self.bodies.append(message.body.decode())
        return ConsumeResult.SUCCESS


def cmd_push(args) -> dict:
    listener = Collector()
    consumer = PushConsumer(config(args), args.group, listener, {args.topic: subscription(args)})
    consumer.startup()
    try:
        deadline = time.time() + args.timeout
        while time.time() < deadline and len(listener.bodies) < args.expect:
            time.sleep(0.1)
        time.sleep(args.linger)  # duplicates would show up here
    finally:
        consumer.shutdown()
    return {"bodies": listener.bodies}


def fifo_message(topic: str, group: str, i: int) -> Message:
    m = make_message(topic, f"{group}-{i}", None)
    m.message_group = group
    return m


def cmd_fifo_simple(args) -> dict:
    """A FIFO consumer's SimpleConsumer loop: every message is acked in turn, except --fail, which
    is nacked (its invisible duration set to --nack-s) on its first --fail-times deliveries, and with
    it the rest of its message group in that batch (a FIFO consumer does not skip ahead). The first
    --split messages of each group are sent before consuming, the rest right after the first nack."""
    groups = args.message_groups.split(",")
    producer = Producer(config(args), (args.topic,))
    producer.startup()
    consumer = SimpleConsumer(config(args), args.group, {args.topic: FilterExpression("*")},
                              await_duration=args.await_s)
    consumer.startup()
    received, acked, errors = [], [], []
    start = time.time()
    try:
        for i in range(args.split):
            for g in groups:
                producer.send(fifo_message(args.topic, g, i))
        rest_sent = False
        deadline = time.time() + args.timeout
        while time.time() < deadline and len(acked) < args.expect:
            try:
                messages = consumer.receive(args.batch, args.invisible)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.2)
                continue
            held_back: set[str] = set()
            for m in messages:
                body = m.body.decode()
                received.append({"body": body, "attempt": m.delivery_attempt, "group": m.message_group,
                                 "at": round(time.time() - start, 3)})
                if m.message_group in held_back or (body == args.fail and m.delivery_attempt <= args.fail_times):
                    consumer.change_invisible_duration(m, args.nack_s)
                    held_back.add(m.message_group)
                    continue
                consumer.ack(m)
                acked.append(body)
            if held_back and not rest_sent:
                for i in range(args.split, args.count):
                    for g in groups:
                        producer.send(fifo_message(args.topic, g, i))
                rest_sent = True
    finally:
        consumer.shutdown()
        producer.shutdown()
    return {"received": received, "acked": acked, "errors": errors}


class FifoListener(MessageListener):
    """Records every consumption; fails --fail on its first --fail-times consumptions."""

    def __init__(self, fail: str | None, fail_times: int) -> None:
        self.fail, self.fail_times = fail, fail_times
        self.calls: list[dict] = []
        self.lock = threading.Lock()

    def consume(self, message) -> ConsumeResult:
        body = message.body.decode()
        with self.lock:
            n = sum(1 for c in self.calls if c["body"] == body) + 1
            ok = not (body == self.fail and n <= self.fail_times)
            self.calls.append({"body": body, "group": message.message_group, "ok": ok})
        return ConsumeResult.SUCCESS if ok else ConsumeResult.FAILURE


def cmd_fifo_push(args) -> dict:
    """A PushConsumer of a FIFO group over --count messages of each of --message-groups."""
    groups = args.message_groups.split(",")
    listener = FifoListener(args.fail, args.fail_times)
    consumer = PushConsumer(config(args), args.group, listener, {args.topic: FilterExpression("*")})
    consumer.startup()
    producer = Producer(config(args), (args.topic,))
    producer.startup()
    try:
        for i in range(args.count):
            for g in groups:
                producer.send(fifo_message(args.topic, g, i))
        deadline = time.time() + args.timeout
        while time.time() < deadline and len({c["body"] for c in listener.calls}) < args.expect:
            time.sleep(0.1)
        time.sleep(args.linger)  # a message forwarded to the DLQ, or redelivered, shows up here
    finally:
        producer.shutdown()
        consumer.shutdown()
    return {"calls": listener.calls, "fifo": consumer.fifo}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--ak")
    p.add_argument("--sk")
    p.add_argument("--tls", action="store_true", help="TLS (roots from GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("--async", dest="use_async", action="store_true")
    pr.add_argument("--message-group", help="send FIFO messages of this message group")
    pr.add_argument("--delay-s", type=int, help="send DELAY messages due this many seconds from now")


    pr.add_argument("--numbered", action="store_true", help="give message i the user property n=i")
    pr.add_argument("--interval-ms", type=int, default=0, help="pause between two sends")
    tx = sub.add_parser("transaction")
    tx.add_argument("--mode", choices=("commit", "rollback", "orphan-commit", "orphan-rollback"), required=True)
    tx.add_argument("--timeout", type=float, default=30)
    tx.add_argument("--interval-ms", type=int, default=0, help="pause between two transactions")
    for q in (pr, tx):
        q.add_argument("--topic", required=True)
        q.add_argument("--count", type=int, default=1)
        q.add_argument("--prefix", default="m")
        q.add_argument("--tag")
    sc = sub.add_parser("simple")
    sc.add_argument("--behaviour", choices=("ack", "no-ack", "nack-once", "change-invisible"), default="ack")
    sc.add_argument("--invisible", type=int, default=10)
    sc.add_argument("--change-to", type=int, default=1)
    sc.add_argument("--await-s", type=int, default=2)
    pu = sub.add_parser("push")
    pu.add_argument("--linger", type=float, default=1.0)
    for q in (sc, pu):
        q.add_argument("--topic", required=True)
        q.add_argument("--group", required=True)
        q.add_argument("--expect", type=int, required=True)
        q.add_argument("--timeout", type=float, default=30)
        q.add_argument("--tag")
        q.add_argument("--sql", help="subscribe with this SQL92 expression instead of a tag expression")
    fs = sub.add_parser("fifo-simple")
    fs.add_argument("--split", type=int, default=2, help="messages of each group sent before consuming")
    fs.add_argument("--batch", type=int, default=32, help="messages per receive")
    fs.add_argument("--invisible", type=int, default=10)
    fs.add_argument("--nack-s", type=int, default=2)
    fs.add_argument("--await-s", type=int, default=1)
    fp = sub.add_parser("fifo-push")
    fp.add_argument("--linger", type=float, default=2.0)
    for q in (fs, fp):
        q.add_argument("--topic", required=True)
        q.add_argument("--group", required=True)
        q.add_argument("--message-groups", required=True, help="comma-separated message groups")
        q.add_argument("--count", type=int, required=True, help="messages per message group")
        q.add_argument("--expect", type=int, required=True, help="stop once this many messages were consumed")
        q.add_argument("--fail", help="the body whose consumption fails")
        q.add_argument("--fail-times", type=int, default=1)
        q.add_argument("--timeout", type=float, default=40)
    args = p.parse_args()
    fn = {"produce": cmd_produce, "transaction": cmd_transaction, "simple": cmd_simple, "push": cmd_push,
          "fifo-simple": cmd_fifo_simple, "fifo-push": cmd_fifo_push}[args.cmd]
    try:
        result = fn(args)
    except Exception as exc:
        result = {"fatal": f"{type(exc).__name__}: {exc}"}
    print("RESULT " + json.dumps(result), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
