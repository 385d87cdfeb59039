"""The official RocketMQ Python client (5.1.2) as bench/vs_peers.py drives it, against txmq or Apache RocketMQ.

Runs under .venv-rocketmq/bin/python (the official client's own environment) and
prints one line `RESULT {json}`. The same code talks to either broker: only the
endpoint differs.

  load   --mode send|transaction --seconds S --threads T [--broker-pids P,...]   closed loop of
         one-message sends (or transactions: begin, send, commit), 1 KiB bodies: per_s, p50_ms,
         p99_ms, and the CPU per call of this client and of the broker's processes
  e2e    --count N   one-message transactions one at a time; a SimpleConsumer in this
         process receives each: the time from the commit call to the receive, p50/p99
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import closed_loop, process_cpu_s  # noqa: E402  (bench/load.py: stdlib only, so it runs in this venv too)

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message,  # noqa: E402
                      MessageListener, Producer, PushConsumer, SimpleConsumer, TransactionChecker,
                      TransactionResolution)

BODY = b"x" * 1024


class CommitAll(TransactionChecker):
    """Check-backs (not expected: every transaction is committed at once) are answered COMMIT."""

    def check(self, message) -> TransactionResolution:
        return TransactionResolution.COMMIT


def config(endpoint: str) -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials("", ""), request_timeout=10)


def message(topic: str, body: bytes = BODY) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    return m


def cmd_load(args) -> dict:
    transactional = args.mode == "transaction"
    producer = Producer(config(args.endpoint), (args.topic,), CommitAll() if transactional else None)
    producer.startup()

    def send() -> None:
        producer.send(message(args.topic))

    def transaction() -> None:
        tx = producer.begin_transaction()
        producer.send(message(args.topic), tx)
        tx.commit()

    fn = transaction if transactional else send
    broker_pids = [int(p) for p in args.broker_pids.split(",") if p]

    def broker_cpu_s() -> float:
        return sum(process_cpu_s(p) for p in broker_pids)

    try:
        for _ in range(args.warmup):
            fn()
        client_before, broker_before = time.process_time(), broker_cpu_s()
        figures = closed_loop(fn, args.seconds, args.threads)
        client_s, broker_s = time.process_time() - client_before, broker_cpu_s() - broker_before
    finally:
        producer.shutdown()
    # where a call's time goes: this client's CPU per call (its own Python and gRPC) against the broker's
    figures["client_cpu_ms_per_call"] = round(client_s / figures["calls"] * 1000, 3)
    if broker_pids:
        figures["broker_cpu_ms_per_call"] = round(broker_s / figures["calls"] * 1000, 3)
    return figures


class Timer(MessageListener):
    """Records, per received body's sequence number, the time since its commit call."""

    def __init__(self) -> None:
        self.committed_at: dict[int, float] = {}
        self.latencies: dict[int, float] = {}
        self.arrived = threading.Condition()

    def consume(self, message) -> ConsumeResult:
        self.seen(message, time.perf_counter())
        return ConsumeResult.SUCCESS

    def seen(self, message, now: float) -> None:
        if not message.body[:12].isdigit():
            return  # not one of this run's numbered messages
        seq = int(message.body[:12])
        with self.arrived:
            if seq in self.committed_at:
                self.latencies[seq] = now - self.committed_at[seq]
            self.arrived.notify_all()


def start_consumer(args, timer: Timer):
    """A PushConsumer (the client's own receive loop), or a SimpleConsumer with our receive loop."""
    subscription = {args.topic: FilterExpression("*")}
    if args.consumer == "push":
        consumer = PushConsumer(config(args.endpoint), args.group, timer, subscription)
        consumer.startup()
        return consumer, None
    consumer = SimpleConsumer(config(args.endpoint), args.group, subscription, await_duration=5)
    consumer.startup()
    stop = threading.Event()

    def receive_loop() -> None:
        while not stop.is_set():
            try:
                messages = consumer.receive(32, 15)
            except Exception as exc:  # an empty long poll surfaces as an exception in this client
                if args.verbose:
                    print(f"receive: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                continue
            now = time.perf_counter()
            for m in messages:
                timer.seen(m, now)
                consumer.ack(m)

    threading.Thread(target=receive_loop, daemon=True).start()
    return consumer, stop


def cmd_e2e(args) -> dict:
    timer = Timer()
    consumer, stop = start_consumer(args, timer)
    time.sleep(args.settle)
    producer = Producer(config(args.endpoint), (args.topic,), CommitAll())
    producer.startup()
    errors = 0
    try:
        for seq in range(args.warmup + args.count):
            body = b"%012d" % seq + BODY[12:]
            tx = producer.begin_transaction()
            producer.send(message(args.topic, body), tx)
            with timer.arrived:
                timer.committed_at[seq] = time.perf_counter()
            tx.commit()
            with timer.arrived:
                if not timer.arrived.wait_for(lambda: seq in timer.latencies, timeout=args.timeout):
                    errors += 1
                    if errors >= 3 and not timer.latencies:
                        break  # nothing arrives at all: no point waiting out every message
    finally:
        if stop is not None:
            stop.set()
        producer.shutdown()
        consumer.shutdown()
    measured = sorted(v for k, v in timer.latencies.items() if k >= args.warmup)
    if not measured:
        return {"error": f"no message received ({errors} timed out)", "consumer": args.consumer}
    return {"count": len(measured), "timed_out": errors, "consumer": args.consumer,
            "p50_ms": round(statistics.median(measured) * 1000, 3),
            "p99_ms": round(measured[min(len(measured) - 1, int(len(measured) * 0.99))] * 1000, 3)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--warmup", type=int, default=50)
    sub = p.add_subparsers(dest="cmd", required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--mode", choices=("send", "transaction"), required=True)
    ld.add_argument("--seconds", type=float, default=5)
    ld.add_argument("--threads", type=int, default=1)
    ld.add_argument("--broker-pids", default="", help="comma-separated pids whose CPU to measure (the broker's)")
    e2e = sub.add_parser("e2e")
    e2e.add_argument("--group", required=True)
    e2e.add_argument("--count", type=int, default=500)
    e2e.add_argument("--timeout", type=float, default=10)
    e2e.add_argument("--verbose", action="store_true")
    e2e.add_argument("--settle", type=float, default=2, help="seconds for the consumer to subscribe")
    e2e.add_argument("--consumer", choices=("push", "simple"), default="push")
    args = p.parse_args()
    fn = {"load": cmd_load, "e2e": cmd_e2e}[args.cmd]
    try:
        result = fn(args)
    except Exception as exc:
        import traceback

        traceback.print_exc()  # the benchmark's log keeps where the client failed
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
