"""Clients that run on lab hosts and record what they saw for lab.checker.

Run as `python -m lab.workloads MODE --endpoints "a:p;b:p;c:p" --topic T --history FILE ...` on a host:

- `native`: txmq's native client. Plain sends of one message and transactions of 1-3 messages, each
  ended COMMIT or ROLLBACK by the client, or left to check-back (the client's check-back session
  answers from its own decisions). Every attempt's outcome is recorded: ok, fail (known not to have
  happened) or info (it may have happened: a timeout, an unreachable broker).
- `consumer`: reads every queue from offset 0 forward, recording each batch as a poll.
- `drain`: reads every queue from 0 to the end of a consistent cut, once, as the final read.
- `cluster-tx`: transactions of 1-3 messages through a ClusterClient over a cluster of groups (one
  bootstrap endpoint list), each ended COMMIT or ROLLBACK by the client (an unsure end retried).
- `cluster-drain`: the final read over a cluster: every queue (group, id) from 0 to a consistent cut.
- `official-read`: the official Python client's SimpleConsumer reads the topic once through (acking
  each message), recorded as polls; it stops after `--idle-s` without a message.
- `official`: the official RocketMQ 5 Python client (rocketmq-python-client, in .venv-rocketmq) sending
  plain messages; it cannot import txmq, so it only needs this file and its own package.
- `official-tx`: the official Python client's transactions (one half message each, as the RocketMQ 5
  clients allow), ended COMMIT or ROLLBACK by the client (an unsure end retried), or left to the
  broker's check-back, which its TransactionChecker answers from the client's own decisions.
- `query`: a Spark Structured Streaming query (local[2] on its host), `format("txmq")` source on
  `--topic` -> `format("txmq")` sink on `--out-topic`, bodies copied unchanged, its sink's
  check-back answered by `SinkCheckback`. Each finished micro-batch is recorded (`query-progress`);
  a query that dies (a broker call failed during a fault) is recorded (`query-restart`) and started
  again from its checkpoint, as an operator would. Once `--query-stop-file` exists it takes a
  consistent cut of the input, runs until its progress reaches it (`query-stop`: the cut and whether
  it caught up), stops, and reads the whole output topic (`query-read`). With `--cluster` the
  endpoints are a cluster's groups: the cut and the final read go through a ClusterClient over them
  all, queues named "group:id" as `cluster-drain` names them.

Each stops when `--duration` has passed or the `--stop-file` exists, whichever comes first.
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
from typing import Any


def _history(path: str, process: str):
    from lab.checker import History

    return History(path, process)


def _stopper(args: argparse.Namespace):
    end = time.monotonic() + args.duration

    def stop() -> bool:
        return time.monotonic() >= end or (args.stop_file is not None and Path(args.stop_file).exists())

    return stop


def run_native(args: argparse.Namespace) -> None:
    from txmq.broker import errors
    from txmq.broker.client.native_client import NativeClient
    from txmq.broker.client.types import LocalTransactionState, Message

    rng = random.Random(args.seed)
    proc = args.process
    group = f"lab-{proc}"
    decisions: dict[str, str] = {}  # transaction id -> the decision this producer made
    stop = _stopper(args)
    with _history(args.history, proc) as h, NativeClient(args.endpoints, timeout_s=args.timeout) as client:

        def on_check(request) -> LocalTransactionState:
            decision = decisions.get(request.transaction_id)
            # The message and producer group the broker asked about, not only its transaction id: a
            # check about another client's transaction (an official client's) is then recognised.
            body = request.message.body if request.message is not None else None
            h.record("check", "ok", txn=request.transaction_id, known=decision is not None,
                     value=body.decode(errors="replace") if body is not None else None,
                     group=request.producer_group, own_group=group)
            return LocalTransactionState.parse(decision or "UNKNOWN")

        session = client.checkback_session(group, [args.topic], on_check)
        session.wait_registered(10)
        i = 0
        while not stop():
            i += 1
            t0 = time.monotonic()
            if rng.random() >= args.txn_ratio:
                value = f"{proc}-{i}"
                try:
                    summary = client.send([Message(args.topic, value.encode())], return_message_ids=False)
                    s = summary.slices[0]
                    h.record("send", "ok", queue=f"{s.topic}/{s.queue_id}", offset=s.first_offset, value=value,
                             seq=i, txn=None, latency=round(time.monotonic() - t0, 4))
                except errors.TxmqError as exc:
                    h.record("send", "info", queue=None, value=value, seq=i, txn=None, error=type(exc).__name__)
                    time.sleep(0.05)
                continue
            values = [f"{proc}-{i}.{k}" for k in range(rng.randint(1, 3))]
            label = f"{proc}-t{i}"
            try:
                prepared = client.prepare("", [Message(args.topic, v.encode()) for v in values],
                                          producer_group=group, sender=client.client_id, return_message_ids=False)
            except errors.TxmqError as exc:
                for v in values:  # the halves may be stored: check-back (which knows nothing of them) decides
                    h.record("send", "info", queue=None, value=v, seq=i, txn=label, error=type(exc).__name__)
                time.sleep(0.05)
                continue
            txn = prepared.transaction_id
            for v in values:
                h.record("send", "ok", queue=None, value=v, seq=i, txn=txn, latency=round(time.monotonic() - t0, 4))
            roll = rng.random()
            decision = "ROLLBACK" if roll < 0.2 else "COMMIT"
            decisions[txn] = decision
            if roll > 0.9:
                h.record(decision.lower(), "info", txn=txn, via="check-back")
                continue  # left to check-back: the broker asks this producer, which answers `decision`
            _end(client, errors, h, txn, decision, args, stop)
        session.close()


def _end(client, errors, h, txn: str, decision: str, args: argparse.Namespace, stop) -> None:
    """End `txn`, retrying an unsure answer as the docs say to (ending is idempotent) for `end_retry_s`."""
    f = decision.lower()
    deadline = time.monotonic() + args.end_retry_s
    while True:
        t0 = time.monotonic()
        try:
            ended = client.end_transaction(txn, decision, producer_group=f"lab-{args.process}")
        except errors.TxmqError as exc:
            h.record(f, "info", txn=txn, error=type(exc).__name__)
            if time.monotonic() > deadline:
                return
            time.sleep(0.2)
            continue
        expected = "COMMITTED" if decision == "COMMIT" else "ROLLED_BACK"
        state = str(getattr(ended.state, "name", ended.state))
        h.record(f, "ok" if expected in state.upper().replace("ROLLEDBACK", "ROLLED_BACK") else "fail", txn=txn,
                 state=state, newly_ended=ended.newly_ended, latency=round(time.monotonic() - t0, 4))
        return


def _read_range(client, topic: str, q: int, start: int, end: int) -> list[list[Any]]:
    msgs = []
    for result in client.read_queue(topic, q, start, end):
        batch = result.batch
        offsets = batch.column("queueOffset").to_pylist()
        bodies = batch.column("body").to_pylist()
        msgs.extend([f"{topic}/{q}", int(o), b.decode()] for o, b in zip(offsets, bodies))
    return msgs


def run_consumer(args: argparse.Namespace) -> None:
    from txmq.broker import errors
    from txmq.broker.client.native_client import NativeClient

    stop = _stopper(args)
    positions: dict[int, int] = {}
    with _history(args.history, args.process) as h, NativeClient(args.endpoints, timeout_s=args.timeout) as client:
        while not stop():
            try:
                cut = client.snapshot_offsets([args.topic])[args.topic]
                msgs = []
                for q, end in sorted(cut.items()):
                    start = positions.get(q, 0)
                    if end > start:
                        msgs.extend(_read_range(client, args.topic, q, start, end))
                        positions[q] = end
                if msgs:
                    h.record("poll", "ok", session=0, msgs=msgs)
            except errors.TxmqError as exc:
                h.record("poll", "fail", error=type(exc).__name__)
            time.sleep(0.2)


def run_drain(args: argparse.Namespace) -> None:
    from txmq.broker.client.native_client import NativeClient

    with _history(args.history, args.process) as h, NativeClient(args.endpoints, timeout_s=args.timeout) as client:
        cut = client.snapshot_offsets([args.topic])[args.topic]
        msgs = []
        for q, end in sorted(cut.items()):
            msgs.extend(_read_range(client, args.topic, q, 0, end))
        h.record("drain", "ok", msgs=msgs, cut={str(q): e for q, e in cut.items()})


def run_cluster_tx(args: argparse.Namespace) -> None:
    from txmq.broker import errors
    from txmq.broker.client.cluster_client import ClusterClient
    from txmq.broker.client.types import Message

    rng = random.Random(args.seed)
    proc = args.process
    stop = _stopper(args)
    with _history(args.history, proc) as h, ClusterClient(args.endpoints, timeout_s=args.timeout) as client:
        i = 0
        while not stop():
            i += 1
            t0 = time.monotonic()
            values = [f"{proc}-{i}.{k}" for k in range(rng.randint(1, 3))]
            try:
                prepared = client.prepare("", [Message(args.topic, v.encode()) for v in values],
                                          producer_group=f"lab-{proc}", return_message_ids=False)
            except errors.TxmqError as exc:  # may be stored: no one ends it, check-back discards it
                for v in values:
                    h.record("send", "info", queue=None, value=v, seq=i, txn=f"{proc}-t{i}", error=type(exc).__name__)
                time.sleep(0.05)
                continue
            txn = prepared.transaction_id
            for v in values:
                h.record("send", "ok", queue=None, value=v, seq=i, txn=txn, latency=round(time.monotonic() - t0, 4))
            _end(client, errors, h, txn, "ROLLBACK" if rng.random() < 0.2 else "COMMIT", args, stop)
            time.sleep(args.interval_ms / 1000)


def run_cluster_drain(args: argparse.Namespace) -> None:
    from txmq.broker.client.cluster_client import ClusterClient

    with _history(args.history, args.process) as h, ClusterClient(args.endpoints, timeout_s=args.timeout) as client:
        cut = client.consistent_cut([args.topic], {})[args.topic]
        msgs = []
        for (group, q), end in sorted(cut.items()):
            for result in client.read_queue(args.topic, (group, q), 0, end):
                batch = result.batch
                msgs.extend([f"{args.topic}/{group}:{q}", int(o), b.decode()] for o, b in
                            zip(batch.column("queueOffset").to_pylist(), batch.column("body").to_pylist()))
        h.record("drain", "ok", msgs=msgs, cut={f"{g}:{q}": e for (g, q), e in cut.items()})


def run_official_read(args: argparse.Namespace) -> None:
    """Read the topic through the official client's SimpleConsumer, acking each message; each read
    gets a position of its own, so a message delivered twice shows as read twice."""
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer  # type: ignore[import-not-found]

    h = _OwnHistory(args.history, args.process)
    config = ClientConfiguration(args.endpoints, Credentials("", ""), request_timeout=int(args.timeout))
    consumer = SimpleConsumer(config, f"lab-{args.process}", {args.topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    read = 0
    stop = _stopper(args)
    last = time.monotonic()
    try:
        while not stop() and time.monotonic() - last < args.idle_s:
            try:
                messages = consumer.receive(32, 30)
            except Exception as exc:  # nothing to receive is an exception of its own in this client
                h.record("poll", "fail", error=type(exc).__name__)
                time.sleep(0.2)
                continue
            msgs = []
            for m in messages:
                consumer.ack(m)
                msgs.append([f"{args.topic}/official", read, m.body.decode()])
                read += 1
            if msgs:
                last = time.monotonic()
                h.record("poll", "ok", session=0, msgs=msgs)
    finally:
        consumer.shutdown()
        h.close()


def run_official(args: argparse.Namespace) -> None:
    """Plain sends through the official Python client; its own retries may duplicate (reported apart)."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer  # type: ignore[import-not-found]

    stop = _stopper(args)
    h = _OwnHistory(args.history, args.process)
    config = ClientConfiguration(args.endpoints, Credentials("", ""), request_timeout=int(args.timeout))
    producer = Producer(config, (args.topic,))
    producer.startup()
    i = 0
    try:
        while not stop():
            i += 1
            value = f"{args.process}-{i}"
            msg = Message()
            msg.topic = args.topic
            msg.body = value.encode()
            t0 = time.monotonic()
            try:
                producer.send(msg)
                h.record("send", "ok", queue=None, value=value, seq=i, txn=None, latency=round(time.monotonic() - t0, 4),
                         retrying_client=True)
            except Exception as exc:  # the official client raises its own classes; any failure may have landed
                h.record("send", "info", queue=None, value=value, seq=i, txn=None, error=type(exc).__name__,
                         retrying_client=True)
                time.sleep(0.05)
    finally:
        producer.shutdown()
        h.close()


def run_official_tx(args: argparse.Namespace) -> None:
    """Transactions through the official Python client, with check-back (see the module doc)."""
    from rocketmq import (ClientConfiguration, Credentials, Message, Producer,  # type: ignore[import-not-found]
                          TransactionChecker, TransactionResolution)

    rng = random.Random(args.seed)
    proc = args.process
    stop = _stopper(args)
    h = _OwnHistory(args.history, proc)
    decisions: dict[str, str] = {}  # value (the body) -> the decision this producer made
    labels: dict[str, str] = {}  # value -> the transaction's label in the history

    class Checker(TransactionChecker):
        def check(self, message) -> TransactionResolution:
            value = message.body.decode()
            decision = decisions.get(value)
            h.record("check", "ok", txn=labels.get(value), value=value, known=decision is not None)
            if decision is None:  # another producer's transaction: not this one's to answer
                return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
            return TransactionResolution.COMMIT if decision == "COMMIT" else TransactionResolution.ROLLBACK

    config = ClientConfiguration(args.endpoints, Credentials("", ""), request_timeout=int(args.timeout))
    producer = Producer(config, (args.topic,), Checker())
    producer.startup()
    i = 0
    try:
        while not stop():
            i += 1
            value, label = f"{proc}-{i}", f"{proc}-t{i}"
            labels[value] = label
            roll = rng.random()
            decision = "ROLLBACK" if roll < 0.2 else "COMMIT"
            decisions[value] = decision  # known before the half is sent: a check may come at once
            msg = Message()
            msg.topic = args.topic
            msg.body = value.encode()
            t0 = time.monotonic()
            tx = producer.begin_transaction()
            try:
                receipt = producer.send(msg, tx)
            except Exception as exc:  # the half may be stored: check-back asks, and this producer answers
                h.record("send", "info", queue=None, value=value, seq=i, txn=label, error=type(exc).__name__,
                         retrying_client=True)
                time.sleep(0.05)
                continue
            h.record("send", "ok", queue=None, value=value, seq=i, txn=label, retrying_client=True,
                     broker_txn=receipt.transaction_id, latency=round(time.monotonic() - t0, 4))
            if roll > 0.9:
                h.record(decision.lower(), "info", txn=label, via="check-back")
                continue
            f = decision.lower()
            deadline = time.monotonic() + args.end_retry_s
            while True:
                t0 = time.monotonic()
                try:
                    tx.commit() if decision == "COMMIT" else tx.rollback()
                    h.record(f, "ok", txn=label, latency=round(time.monotonic() - t0, 4))
                    break
                except Exception as exc:  # unsure: ending is idempotent, so retry as the docs say
                    h.record(f, "info", txn=label, error=type(exc).__name__)
                    if stop() or time.monotonic() > deadline:
                        break  # check-back settles it
                    time.sleep(0.2)
    finally:
        producer.shutdown()
        h.close()


def run_query(args: argparse.Namespace) -> None:
    """The Spark txmq -> txmq query of the module doc."""
    from pyspark.sql import SparkSession

    from txmq.spark import SinkCheckback

    checkpoint = str(Path(args.checkpoint).resolve())
    stop_file = Path(args.query_stop_file)
    # a data source registered by hand runs PYSPARK_PYTHON on Spark's Python workers (else `python3`,
    # which on this host is not the venv): the workers must import txmq
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2,4]").appName("txmq-lab-query")  # 4 attempts per task
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "700m").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    # registered by hand: Spark's own look-up of `pyspark_*` modules runs a Python worker, which at a
    # load average of 40 did not answer in time, and the query then failed with DATA_SOURCE_NOT_FOUND
    from txmq.spark.source import TxmqDataSource

    spark.dataSource.register(TxmqDataSource)
    reported: set[int] = set()

    def start():
        src = (spark.readStream.format("txmq").option("broker", args.endpoints).option("topic", args.topic)
               .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "2000")
               .option("requestTimeoutMs", str(int(args.timeout * 1000))).load())
        return (src.select("body").writeStream.format("txmq").option("broker", args.endpoints)
                .option("topic", args.out_topic).option("requestTimeoutMs", str(int(args.timeout * 1000)))
                .option("checkpointLocation", checkpoint).trigger(processingTime="500 milliseconds").start())

    def record_progress(h, query) -> dict[str, Any] | None:
        last = None
        for p in query.recentProgress:
            last = p
            if p["batchId"] in reported:
                continue
            reported.add(p["batchId"])
            h.record("query-progress", "ok", batch=p["batchId"], rows=p["numInputRows"],
                     end=_offset_total(p["sources"][0]["endOffset"]) if p["sources"] else None)
        return last

    with _history(args.history, args.process) as h, \
            SinkCheckback(checkpoint, broker=args.endpoints, topics=[args.out_topic]):
        query, restarts = start(), 0
        h.record("query-start", "ok", run=str(query.runId))
        while not stop_file.exists():
            record_progress(h, query)
            if not query.isActive:  # a driver-side call failed: start again from the checkpoint
                error = query.exception()
                restarts += 1
                h.record("query-restart", "info", error=str(error)[:300] if error else None, restarts=restarts)
                time.sleep(1)
                query = start()
            time.sleep(0.5)
        cut = _retry(lambda: _query_cut(args, args.topic), 60)
        target = sum(cut.values())
        deadline = time.monotonic() + args.catch_up_s
        caught_up = False
        while time.monotonic() < deadline:
            last = record_progress(h, query)
            if last is not None and last["sources"] and _offset_total(last["sources"][0]["endOffset"]) >= target:
                caught_up = True
                break
            if not query.isActive:
                restarts += 1
                h.record("query-restart", "info", error=str(query.exception())[:300], restarts=restarts)
                query = start()
            time.sleep(0.5)
        query.stop()
        h.record("query-stop", "ok", caught_up=caught_up, restarts=restarts,
                 cut={f"{args.topic}/{q}": end for q, end in sorted(cut.items())})
        h.record("query-read", "ok", msgs=_retry(lambda: _query_output(args), 60))
    spark.stop()


def _query_cut(args: argparse.Namespace, topic: str) -> dict[str, int]:
    """The end of each queue of `topic` ("group:id" over a cluster, with `--cluster`) in a consistent cut."""
    if args.cluster:  # every group's queues, each moved queue under the name it was created with
        from txmq.broker.client.cluster_client import ClusterClient

        with ClusterClient(args.endpoints, timeout_s=args.timeout) as client:
            return {f"{g}:{q}": end for (g, q), end in client.consistent_cut([topic], {})[topic].items()}
    from txmq.broker.client.native_client import NativeClient

    with NativeClient(args.endpoints, timeout_s=args.timeout) as client:
        return {str(q): end for q, end in client.snapshot_offsets([topic])[topic].items()}


def _query_output(args: argparse.Namespace) -> list:
    """The whole output topic, read to a consistent cut (over every group with `--cluster`)."""
    if args.cluster:
        from txmq.broker.client.cluster_client import ClusterClient

        with ClusterClient(args.endpoints, timeout_s=args.timeout) as client:
            msgs = []
            for (g, q), end in sorted(client.consistent_cut([args.out_topic], {})[args.out_topic].items()):
                for result in client.read_queue(args.out_topic, (g, q), 0, end):
                    batch = result.batch
                    msgs.extend([f"{args.out_topic}/{g}:{q}", int(o), b.decode()] for o, b in
                                zip(batch.column("queueOffset").to_pylist(), batch.column("body").to_pylist()))
            return msgs
    from txmq.broker.client.native_client import NativeClient

    with NativeClient(args.endpoints, timeout_s=args.timeout) as client:
        out_cut = client.snapshot_offsets([args.out_topic])[args.out_topic]
        return [m for q, end in sorted(out_cut.items()) for m in _read_range(client, args.out_topic, q, 0, end)]


def _offset_total(offset: Any) -> int:
    """The sum of every queue offset in a source offset (JSON text or parsed; a lone broker's
    {topic: {queue: n}} or a cluster's {topic: {group: {queue: n}}}): it only grows as the query reads."""
    if isinstance(offset, str):
        offset = json.loads(offset)
    if isinstance(offset, dict):
        return sum(_offset_total(v) for v in offset.values())
    return int(offset) if isinstance(offset, (int, float)) else 0


def _retry(call, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


class _OwnHistory:
    """The same JSON lines as lab.checker.History, for a venv that cannot import the lab package."""

    def __init__(self, path: str, process: str):
        self.process = process
        self._lock = threading.Lock()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", buffering=1)

    def record(self, f: str, type: str, **fields: Any) -> None:
        op = {"f": f, "type": type, "process": self.process, "time": round(time.time(), 6), **fields}
        with self._lock:
            self._file.write(json.dumps(op, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()


MODES = {"native": run_native, "consumer": run_consumer, "drain": run_drain, "official": run_official,
         "official-tx": run_official_tx, "cluster-tx": run_cluster_tx, "cluster-drain": run_cluster_drain,
         "official-read": run_official_read, "query": run_query}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m lab.workloads")
    p.add_argument("mode", choices=sorted(MODES))
    p.add_argument("--endpoints", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--history", required=True)
    p.add_argument("--process", required=True)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--stop-file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--txn-ratio", type=float, default=0.3)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--end-retry-s", type=float, default=30.0)
    p.add_argument("--out-topic", help="query: the topic it writes")
    p.add_argument("--checkpoint", help="query: its checkpoint directory")
    p.add_argument("--query-stop-file", help="query: once it exists, catch up with the input and stop")
    p.add_argument("--catch-up-s", type=float, default=120.0, help="query: how long it may take to catch up")
    p.add_argument("--cluster", action="store_true",
                   help="query: the endpoints are a cluster's groups; its cut and final read cover them all")
    p.add_argument("--interval-ms", type=int, default=0, help="cluster-tx: pause between two transactions")
    p.add_argument("--idle-s", type=float, default=10.0, help="official-read: stop after this long without a message")
    args = p.parse_args(argv)
    MODES[args.mode](args)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
