"""txmq against Apache Kafka 4 (KRaft) and Apache RocketMQ 5, each peer started and stopped here (issue #26).

    .venv/bin/python bench/vs_peers.py [--quick] [--rows N] [--repeat K] [--only spark,tx100,e2e,rocketmq]

Same machine, same run, 1 KiB bodies. The txmq broker is a separate process
(EmbeddedBroker, --flush async); Kafka is one controller and one broker
(bench/peers_jvm.py), RocketMQ 5 a name server and a proxy in local mode.
Durability on every side: acknowledged before fsync, flushed by the OS or on
an interval (txmq async flush: 500 ms; Kafka's default log.flush.*: no fsync,
the page cache; RocketMQ's default ASYNC_FLUSH: 500 ms). The peers' versions
and settings go into the result.

1. spark_read: Spark reads N committed messages (default 2,000,000; --quick
   200,000), 4 queues / 4 partitions: `spark.read.format("txmq")` over gRPC
   against Spark's Kafka source with kafka.isolation.level=read_committed.
2. spark_write: Spark writes N/2 rows: the txmq exactly-once sink against
   Spark's Kafka sink (idempotent producer, acks=all: at-least-once).
   Every run's seconds, load average and CPU seconds per process (Spark's
   JVM, its Python workers, the txmq broker, Kafka) go to spark.write_runs.
   Both Spark runs need Spark's Kafka connector of the same version as pyspark
   (spark.jars.packages); where Maven Central has none for the installed
   pyspark, both sides run on SPARK_FOR_KAFKA's pyspark in .venv-spark42.
3. tx100: transactions of 100 messages, one producer, closed loop: txmq's
   NativeClient (prepare_arrow + COMMIT) against confluent-kafka's
   transactional producer (begin, 100 produce, commit).
4. rocketmq: one-message transactions and normal sends through the official
   RocketMQ Python client (bench/vs_peers_rmq_client.py in .venv-rocketmq),
   1 and 8 threads: txmq against Apache RocketMQ 5, per_s, p50, p99.
5. e2e: one transaction at a time; the time from the commit call to a consumer
   holding the message, p50/p99: txmq (a push subscription, and the PullConsumer's
   wait-then-pull as `txmq_pull`), Kafka (read_committed consumer), RocketMQ 5 and
   txmq through the official client (PushConsumer).
Each pair takes turns, best of --repeat rounds. Ratios are txmq / peer
(throughput) or peer / txmq (latency), so > 1 means txmq is ahead.
Prints one JSON line and writes bench/results/vs_peers.json (a run of some
parts, --only: vs_peers-<parts>.json, so the full run's file stays).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH_DIR))

from bench.load import closed_loop, descendants, tree_cpu_s  # noqa: E402
from bench.peers import PeerUnavailable  # noqa: E402
from bench.peers_jvm import (KAFKA_JVM, ROCKETMQ_HEAP, ROCKETMQ_JVM, Kafka, RocketMQ5, java_version,  # noqa: E402
                             kafka_create_topic, pom_versions)
from bench.results_io import emit  # noqa: E402
from bench.size_args import parse_size_args  # noqa: E402

BODY = b"x" * 1024
QUEUES = 4
LOAD_TX_ROWS = 10_000
TX_BATCH = 100
RMQ_PYTHON = ROOT / ".venv-rocketmq" / "bin" / "python"
RMQ_CLIENT = BENCH_DIR / "vs_peers_rmq_client.py"
# Newest pyspark whose Kafka connector (spark-sql-kafka-0-10_2.13) Maven Central serves; 4.3.0's is not there.
SPARK_FOR_KAFKA = "4.2.0"
SPARK_VENV_PYTHON = ROOT / ".venv-spark42" / "bin" / "python"
PARTS = ("spark", "tx100", "e2e", "rocketmq")  # "spark_read" / "spark_write": one of the two (e.g. to profile)


# ---- pure helpers (tests/bench/test_vs_peers.py) ---------------------------------------------------


def ratio(txmq: float | None, peer: float | None, *, lower_is_better: bool = False) -> float | None:
    """txmq against its peer, > 1 when txmq is ahead: a throughput over the peer's, or the peer's latency
    over txmq's."""
    if not txmq or not peer:
        return None
    return round(peer / txmq if lower_is_better else txmq / peer, 3)


def percentiles_ms(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    if not ordered:
        return {"count": 0}
    return {"count": len(ordered), "p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3)}


def parse_result_line(stdout: str) -> dict:
    """The `RESULT {json}` line of bench/vs_peers_rmq_client.py (the last one), else an error entry."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            try:
                return json.loads(line[len("RESULT "):])
            except json.JSONDecodeError as exc:
                return {"error": f"unreadable RESULT line: {exc}"}
    return {"error": "no RESULT line: " + stdout[-300:]}


def goals(result: dict) -> dict:
    """Issue #42's goals (ratios of txmq to the peer, same run; latencies as peer / txmq) next to what
    this run measured. The price of replication, its last row, is bench/replication_cost.py's."""
    r = result.get("ratios", {})
    wanted = {"spark_read_vs_kafka": 2.0, "spark_write_vs_kafka": 1.2, "tx100_vs_kafka": 3.0,
              "rmq_tx1_p1_vs_rocketmq": 1.2, "rmq_tx1_p8_vs_rocketmq": 1.2, "rmq_send_p1_vs_rocketmq": 1.0,
              "e2e_p50_vs_kafka": 1.0, "e2e_p99_vs_kafka": 1.0}
    return {k: {"goal": v, "measured": r.get(k), "met": (r.get(k) is not None and r[k] >= v)}
            for k, v in wanted.items()}


# ---- txmq side --------------------------------------------------------------------------------


def txmq_load(client, topic: str, rows: int) -> None:
    """`rows` committed 1 KiB messages in transactions of LOAD_TX_ROWS (prepare_arrow + COMMIT)."""
    import pyarrow as pa

    bodies = pa.array([BODY] * LOAD_TX_ROWS, pa.binary())
    sent = 0
    while sent < rows:
        n = min(LOAD_TX_ROWS, rows - sent)
        prep = client.prepare_arrow("", pa.RecordBatch.from_arrays([bodies.slice(0, n)], names=["body"]),
                                    topic=topic, producer_group="bench", sender="loader")
        client.end_transaction(prep.transaction_id, "COMMIT")
        sent += n


def txmq_tx100(endpoint: str, topic: str):
    import pyarrow as pa

    from txmq.broker.client import NativeClient

    client = NativeClient(endpoint, timeout_s=30)
    table = pa.table({"body": pa.array([BODY] * TX_BATCH, pa.binary())})

    def one() -> None:
        prep = client.prepare_arrow("", table, topic=topic, producer_group="bench", sender="tx100")
        client.end_transaction(prep.transaction_id, "COMMIT")
    return one, client.close


def txmq_e2e(endpoint: str, topic: str, count: int, warmup: int, *, push: bool) -> dict:
    """One-message transactions one at a time; a consumer thread times each arrival: a push
    subscription (`NativeClient.subscribe`) or, before it, a PullConsumer (long poll, then a pull)."""
    import pyarrow as pa

    from txmq.broker import errors
    from txmq.broker.client import NativeClient, PullConsumer

    client = NativeClient(endpoint, timeout_s=30)
    timer = _ArrivalTimer()
    if push:
        reader = NativeClient(endpoint, timeout_s=30)
        consumer = reader.subscribe(reader.snapshot_offsets([topic]))

        def consume() -> None:
            for pushed in consumer:
                now = time.perf_counter()
                for body in pushed.batch.column("body").to_pylist():
                    timer.arrived(int(body[:12]), now)
    else:
        consumer = PullConsumer(endpoint, [topic], start="latest")

        def consume() -> None:
            try:
                while not timer.stop.is_set():
                    for batch in consumer.poll(timeout_ms=1000):
                        now = time.perf_counter()
                        for body in batch.column(batch.schema.get_field_index("body")).to_pylist():
                            timer.arrived(int(body[:12]), now)
            except errors.BrokerUnavailable:
                if not timer.stop.is_set():  # closed under a poll at the end: not a failure
                    raise

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    try:
        for seq in range(warmup + count):
            body = pa.array([b"%012d" % seq + BODY[12:]], pa.binary())
            prep = client.prepare_arrow("", pa.RecordBatch.from_arrays([body], names=["body"]), topic=topic,
                                        producer_group="bench", sender="e2e")
            timer.committing(seq)
            client.end_transaction(prep.transaction_id, "COMMIT")
            timer.committed(seq)
            timer.wait(seq)
    finally:
        timer.stop.set()
        consumer.close()
        thread.join(5)
        if push:
            reader.close()
        client.close()
    return timer.figures(warmup)


class _ArrivalTimer:
    """Per sequence number: when its commit was called, how long until a consumer had it."""

    def __init__(self) -> None:
        self.started: dict[int, float] = {}
        self.latency: dict[int, float] = {}
        self.commit_call: dict[int, float] = {}  # how long the commit call itself took
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.timed_out = 0

    def committing(self, seq: int) -> None:
        with self.cond:
            self.started[seq] = time.perf_counter()

    def arrived(self, seq: int, now: float) -> None:
        with self.cond:
            if seq in self.started:
                self.latency[seq] = now - self.started[seq]
            self.cond.notify_all()

    def committed(self, seq: int) -> None:
        self.commit_call[seq] = time.perf_counter() - self.started[seq]

    def wait(self, seq: int, timeout_s: float = 10) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: seq in self.latency, timeout=timeout_s):
                self.timed_out += 1

    def figures(self, warmup: int) -> dict:
        out = percentiles_ms([v for k, v in self.latency.items() if k >= warmup])
        out["timed_out"] = self.timed_out
        calls = percentiles_ms([v for k, v in self.commit_call.items() if k >= warmup])
        out["commit_call_p50_ms"], out["commit_call_p99_ms"] = calls.get("p50_ms"), calls.get("p99_ms")
        return out


# ---- Kafka side -------------------------------------------------------------------------------


def kafka_transactional_producer(bootstrap: str, name: str):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    return producer


def kafka_load(bootstrap: str, topic: str, rows: int) -> None:
    """`rows` committed messages in transactions of LOAD_TX_ROWS, spread evenly over the partitions."""
    producer = kafka_transactional_producer(bootstrap, "load")
    sent = 0
    while sent < rows:
        n = min(LOAD_TX_ROWS, rows - sent)
        producer.begin_transaction()
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, BODY, partition=(sent + i) % QUEUES)
                    break
                except BufferError:  # librdkafka's local queue is full: let it drain
                    producer.poll(0.05)
        producer.commit_transaction(60)
        sent += n


def kafka_tx100(bootstrap: str, topic: str):
    producer = kafka_transactional_producer(bootstrap, "tx100")

    def one() -> None:
        producer.begin_transaction()
        for _ in range(TX_BATCH):
            producer.produce(topic, BODY)
        producer.commit_transaction(30)
    return one, lambda: producer.flush(10)


def kafka_e2e(kafka: Kafka, topic: str, count: int, warmup: int) -> dict:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"e2e-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(QUEUES)])
    producer = kafka_transactional_producer(kafka.bootstrap, "e2e")
    timer = _ArrivalTimer()

    def consume() -> None:
        while not timer.stop.is_set():
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                timer.arrived(int(msg.value()[:12]), time.perf_counter())

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    time.sleep(2)  # the consumer's first fetch positions it at the end before anything is sent
    try:
        for seq in range(warmup + count):
            producer.begin_transaction()
            producer.produce(topic, b"%012d" % seq + BODY[12:], partition=seq % QUEUES)
            producer.flush(10)  # the message is with the broker (like a half) before the commit is timed
            timer.committing(seq)
            producer.commit_transaction(30)
            timer.committed(seq)
            timer.wait(seq)
    finally:
        timer.stop.set()
        thread.join(5)
        consumer.close()
    return timer.figures(warmup)


# ---- Spark (run in the Python whose pyspark has a Kafka connector) ---------------------------------


def spark_python() -> tuple[str, str]:
    """The interpreter for the Spark comparisons and its pyspark version."""
    from importlib import metadata

    here = metadata.version("pyspark")
    if here == SPARK_FOR_KAFKA or not SPARK_VENV_PYTHON.exists():
        return sys.executable, here
    return str(SPARK_VENV_PYTHON), SPARK_FOR_KAFKA


def run_spark_part(endpoint: str, bootstrap: str, read_rows: int, write_rows: int, repeat: int,
                   pids: dict[str, list[int]]) -> dict:
    """`pids`: the broker's and Kafka's processes, whose CPU each write is charged with."""
    python, version = spark_python()
    cmd = [python, str(Path(__file__).resolve()), "--spark-part", json.dumps(
        {"endpoint": endpoint, "bootstrap": bootstrap, "read_rows": read_rows, "write_rows": write_rows,
         "repeat": repeat, "pids": pids})]
    env = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    sys.stderr.write(done.stderr[-4000:])
    out = parse_result_line(done.stdout)
    out.setdefault("pyspark", version)
    if done.returncode != 0 and "error" not in out:
        out["error"] = f"exit {done.returncode}: {done.stderr[-400:]}"
    return out


def spark_part(spec: dict) -> dict:
    """Both Spark comparisons in one SparkSession (the Kafka connector on its class path)."""
    import pyspark

    from spark_common import spark_session
    from txmq.broker.client import NativeClient

    endpoint, bootstrap, repeat = spec["endpoint"], spec["bootstrap"], spec["repeat"]
    read_rows, write_rows = spec["read_rows"], spec["write_rows"]
    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    spark = spark_session({"spark.jars.packages": package})
    client = NativeClient(endpoint, timeout_s=60)
    out: dict = {"pyspark": pyspark.__version__, "kafka_connector": package}

    if read_rows:
        out.update(spark_read(spark, client, endpoint, bootstrap, read_rows, repeat))
    if write_rows:
        out.update(spark_write(spark, client, endpoint, bootstrap, write_rows, repeat, spec.get("pids", {})))
    client.close()
    spark.stop()
    return out


def topic_on_both(client, bootstrap: str, prefix: str) -> str:
    """A fresh topic of QUEUES queues on txmq and of as many partitions on Kafka."""
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.create_topic(topic, QUEUES)
    kafka_create_topic(bootstrap, topic, QUEUES)
    return topic


def spark_read(spark, client, endpoint: str, bootstrap: str, read_rows: int, repeat: int) -> dict:
    from spark_sink import interleaved_best_rates

    out: dict = {}
    topic = topic_on_both(client, bootstrap, "read")
    t0 = time.perf_counter()
    txmq_load(client, topic, read_rows)
    t1 = time.perf_counter()
    kafka_load(bootstrap, topic, read_rows)
    out["load_s"] = {"txmq": round(t1 - t0, 2), "kafka": round(time.perf_counter() - t1, 2)}
    txmq_df = spark.read.format("txmq").option("broker", endpoint).option("topic", topic).load()
    kafka_df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                .option("kafka.isolation.level", "read_committed").option("startingOffsets", "earliest")
                .option("endingOffsets", "latest").load().withColumnRenamed("value", "body"))
    expected = (read_rows, read_rows * len(BODY))

    def reader(df):
        def run() -> None:
            # a new aggregate each run: collecting one Dataset twice reuses its shuffle (no second read)
            row = df.selectExpr("count(*) AS n", "sum(length(body)) AS bytes").collect()[0]
            assert (row.n, row.bytes) == expected, f"read {row.n} rows, {row.bytes} bytes"
        return run

    rates, _ = interleaved_best_rates({"txmq": reader(txmq_df), "kafka": reader(kafka_df)}, read_rows, repeat)
    out["read_rows"] = read_rows
    out["read_rows_per_s"] = {k: round(v) for k, v in rates.items()}
    return out


def spark_write(spark, client, endpoint: str, bootstrap: str, write_rows: int, repeat: int,
                pids: dict[str, list[int]]) -> dict:
    """Each side's best write (rows/s, the ratio's figure), and every run's seconds and CPU seconds
    per process (Spark's JVM, its Python workers, the broker, Kafka) with the load average at its end."""
    from spark_common import settle_page_cache, spark_cpu_meters
    from spark_sink import broker_commit_seconds, rows_df

    out: dict = {}
    wtopic = topic_on_both(client, bootstrap, "write")
    df = rows_df(spark, write_rows)

    def txmq_write() -> float:
        """The write; returns the seconds of it the broker spent in the COMMIT (its RPC metrics)."""
        before = broker_commit_seconds(client)
        df.write.format("txmq").option("broker", endpoint).option("topic", wtopic).mode("append").save()
        return broker_commit_seconds(client) - before

    def kafka_write() -> None:
        (df.selectExpr("body AS value").write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", wtopic).option("kafka.enable.idempotence", "true").option("kafka.acks", "all").save())

    meters = spark_cpu_meters(spark)
    for name, roots in pids.items():
        meters[name] = lambda roots=roots: tree_cpu_s(roots)
    runs: dict[str, list[dict]] = {"txmq": [], "kafka": []}
    for _ in range(repeat):  # the sides take turns (spark_sink.interleaved_best_rates: load comes and goes)
        for name, write in (("txmq", txmq_write), ("kafka", kafka_write)):
            settle_page_cache()
            before = {m: read() for m, read in meters.items()}
            t0 = time.perf_counter()
            returned = write()
            run = {"s": round(time.perf_counter() - t0, 3),
                   "cpu_s": {m: round(read() - before[m], 2) for m, read in meters.items()},
                   "load_avg": round(os.getloadavg()[0], 2)}
            if name == "txmq":
                run["commit_s"] = round(returned, 3)
            runs[name].append(run)
    best = {name: min(rs, key=lambda r: r["s"]) for name, rs in runs.items()}
    # where the txmq write's time goes: the broker's COMMIT against the rest (the executors' halves, Spark)
    out["write_seconds"] = {"txmq": round(best["txmq"]["s"], 2), "kafka": round(best["kafka"]["s"], 2),
                            "txmq_commit": round(best["txmq"]["commit_s"], 2)}
    out["write_runs"] = runs
    out["write_round_ratios"] = round_ratios(runs)
    committed = sum(client.snapshot_offsets([wtopic])[wtopic].values())
    assert committed == write_rows * repeat, f"the txmq sink committed {committed} rows"
    out["write_rows"] = write_rows
    out["write_rows_per_s"] = {name: round(write_rows / run["s"]) for name, run in best.items()}
    return out


# ---- RocketMQ official client --------------------------------------------------------------------


def rmq_client(endpoint: str, topic: str, *args: str, timeout_s: float = 600) -> dict:
    if not RMQ_PYTHON.exists():
        return {"error": ".venv-rocketmq missing (make interop-venv)"}
    done = subprocess.run([str(RMQ_PYTHON), str(RMQ_CLIENT), "--endpoint", endpoint, "--topic", topic, *args],
                          capture_output=True, text=True, timeout=timeout_s)
    return parse_result_line(done.stdout)


def rocketmq_part(txmq_endpoint: str, txmq_client, rmq: RocketMQ5, seconds: float, threads: tuple[int, ...],
                  repeat: int, e2e_count: int, txmq_pid: int) -> dict:
    """Official-client loads against both brokers, taking turns; then end-to-end latency on both.
    Each load's figures carry the CPU per call of the client and of the broker's processes."""
    topics = {"normal": f"normal-{uuid.uuid4().hex[:6]}", "tx": f"tx-{uuid.uuid4().hex[:6]}"}
    txmq_client.create_topic(topics["normal"], QUEUES)
    txmq_client.create_topic(topics["tx"], QUEUES)
    rmq.create_topic(topics["normal"], QUEUES, "NORMAL")
    rmq.create_topic(topics["tx"], QUEUES, "TRANSACTION")
    sides = {"txmq": txmq_endpoint, "rocketmq": rmq.endpoint}
    broker_pids = {side: ",".join(str(p) for root in roots for p in [root, *descendants(root)])
                   for side, roots in (("txmq", [txmq_pid]), ("rocketmq", [p.pid for p in rmq.procs]))}
    out: dict = {}
    for mode, topic in (("send", topics["normal"]), ("tx1", topics["tx"])):
        for n in threads:
            best: dict[str, dict] = {}
            for _ in range(repeat):
                for side, endpoint in sides.items():
                    fig = rmq_client(endpoint, topic, "load", "--mode", "send" if mode == "send" else "transaction",
                                     "--seconds", str(seconds), "--threads", str(n),
                                     "--broker-pids", broker_pids[side])
                    if "error" in fig:
                        best.setdefault(side, fig)
                    elif fig["per_s"] > best.get(side, {}).get("per_s", -1):
                        best[side] = fig
            out[f"{mode}_p{n}"] = best
    # a topic of its own: a new group may start at the earliest offset, behind the loads' messages
    e2e_topic, group = f"e2e-{uuid.uuid4().hex[:6]}", f"e2e-{uuid.uuid4().hex[:6]}"
    txmq_client.create_topic(e2e_topic, QUEUES)
    rmq.create_topic(e2e_topic, QUEUES, "TRANSACTION")
    rmq.create_group(group)
    for side, endpoint in sides.items():
        out[f"e2e_official_client_{side}"] = rmq_client(endpoint, e2e_topic, "--warmup", "20", "e2e", "--group",
                                                       group, "--count", str(e2e_count))
    return out


# ---- the run ------------------------------------------------------------------------------------


def interleaved_loops(loops: dict, seconds: float, repeat: int) -> dict[str, dict]:
    """closed_loop figures of each side's best round (most calls/s), the sides taking turns."""
    best: dict[str, dict] = {}
    for _ in range(repeat):
        for side, (fn, _) in loops.items():
            fig = closed_loop(fn, seconds, 1)
            if fig["per_s"] > best.get(side, {}).get("per_s", -1):
                best[side] = fig
    for _, close in loops.values():
        close()
    return best


def settings(kafka: Kafka | None, rmq: RocketMQ5 | None) -> dict:
    versions = pom_versions()
    out = {"java": java_version(),
           "txmq": {"flush": "async (acked before fsync; flushed every 500 ms)", "process": "EmbeddedBroker"},
           "kafka": {"version": versions.get("kafka"), "mode": "KRaft: 1 controller + 1 broker process",
                     "jvm": " ".join(KAFKA_JVM), "durability": "log.flush.* defaults: no fsync per write (page cache)",
                     "producers": "acks=all, enable.idempotence=true (defaults of idempotent/transactional producers)"},
           "rocketmq": {"version": versions.get("rocketmq"),
                        "mode": "name server + proxy in local mode (broker inside)",
                        "jvm": {k: " ".join(v) for k, v in ROCKETMQ_HEAP.items()} | {"flags": " ".join(ROCKETMQ_JVM)},
                        "durability": "flushDiskType=ASYNC_FLUSH (default): acked before fsync"}}
    try:
        import confluent_kafka

        out["kafka"]["python_client"] = f"confluent-kafka {confluent_kafka.__version__} (librdkafka " \
                                        f"{confluent_kafka.libversion()[0]})"
    except ImportError:
        out["kafka"]["python_client"] = "not installed"
    out["rocketmq"]["python_client"] = "rocketmq-python-client 5.1.2 (.venv-rocketmq)"
    if kafka is not None and kafka.settings:
        out["kafka"]["broker_config"] = {k: v for k, v in kafka.settings.items() if "dirs" not in k}
    if rmq is not None and rmq.settings:
        out["rocketmq"]["broker_config"] = {k: v for k, v in rmq.settings.items() if "Path" not in k}
    return out


def round_ratios(runs: dict[str, list[dict]], peer: str = "kafka") -> dict | None:
    """The peer's seconds over txmq's, round by round, the first round left out (both sides warm
    up in it): median, min and max, as the issue asks beside the best of each side. None with fewer
    than two rounds."""
    pairs = list(zip(runs.get("txmq", []), runs.get(peer, [])))[1:]
    if not pairs:
        return None
    each = [theirs["s"] / ours["s"] for ours, theirs in pairs]
    return {"median": round(statistics.median(each), 3), "min": round(min(each), 3), "max": round(max(each), 3),
            "rounds": len(each)}


def compute_ratios(result: dict) -> dict:
    r: dict = {}
    sp = result.get("spark", {})
    r["spark_read_vs_kafka"] = ratio(sp.get("read_rows_per_s", {}).get("txmq"),
                                     sp.get("read_rows_per_s", {}).get("kafka"))
    r["spark_write_vs_kafka"] = ratio(sp.get("write_rows_per_s", {}).get("txmq"),
                                      sp.get("write_rows_per_s", {}).get("kafka"))
    rounds = round_ratios(sp.get("write_runs", {}))
    if rounds is not None:
        r["spark_write_rounds_median_vs_kafka"] = rounds["median"]
    tx = result.get("tx100", {})
    r["tx100_vs_kafka"] = ratio(tx.get("txmq", {}).get("per_s"), tx.get("kafka", {}).get("per_s"))
    rm = result.get("rocketmq", {})
    for key, fig in rm.items():
        if key.startswith(("send_p", "tx1_p")):
            mode = "rmq_" + key
            r[f"{mode}_vs_rocketmq"] = ratio(fig.get("txmq", {}).get("per_s"), fig.get("rocketmq", {}).get("per_s"))
            r[f"{mode}_p99_vs_rocketmq"] = ratio(fig.get("txmq", {}).get("p99_ms"),
                                                 fig.get("rocketmq", {}).get("p99_ms"), lower_is_better=True)
    e2e = result.get("e2e", {})
    for peer in ("kafka",):
        for p in ("p50_ms", "p99_ms"):
            r[f"e2e_{p[:3]}_vs_{peer}"] = ratio(e2e.get("txmq", {}).get(p), e2e.get(peer, {}).get(p),
                                                lower_is_better=True)
            r[f"e2e_pull_{p[:3]}_vs_{peer}"] = ratio(e2e.get("txmq_pull", {}).get(p), e2e.get(peer, {}).get(p),
                                                     lower_is_better=True)
    for p in ("p50_ms", "p99_ms"):
        r[f"e2e_official_client_{p[:3]}_vs_rocketmq"] = ratio(
            rm.get("e2e_official_client_txmq", {}).get(p), rm.get("e2e_official_client_rocketmq", {}).get(p),
            lower_is_better=True)
    return {k: v for k, v in r.items() if v is not None}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--spark-part":
        print("RESULT " + json.dumps(spark_part(json.loads(sys.argv[2]))), flush=True)
        return
    args, rows = parse_size_args(200_000, 2_000_000, repeat=2, extra=lambda p: p.add_argument(
        "--only", help=f"comma-separated parts of {','.join(PARTS)} (default: all)"))
    parts = set(args.only.split(",")) if args.only else set(PARTS)
    rows -= rows % QUEUES
    seconds = 2.0 if args.quick else 5.0
    threads = (1,) if args.quick else (1, 8)
    e2e_count = 100 if args.quick else 300
    from tests.support.broker_process import BrokerProcess
    from txmq.broker.client import NativeClient

    result: dict = {"quick": args.quick, "body_bytes": len(BODY), "repeats": args.repeat, "errors": {}}
    kafka_used = rmq_used = None
    # the broker as from another host: its files hidden from Spark and the clients (root: unshare)
    with tempfile.TemporaryDirectory() as tmp, \
            BrokerProcess(Path(tmp) / "broker", flush="async", hidden=os.geteuid() == 0) as broker:
        client = NativeClient(broker.endpoint, timeout_s=60)
        if parts & {"spark", "spark_read", "spark_write", "tx100", "e2e"}:
            try:
                with Kafka() as kafka:
                    kafka_used = kafka
                    if "tx100" in parts:
                        topic = f"tx100-{uuid.uuid4().hex[:6]}"
                        client.create_topic(topic, QUEUES)
                        kafka.create_topic(topic, QUEUES)
                        loops = {"txmq": txmq_tx100(broker.endpoint, topic),
                                 "kafka": kafka_tx100(kafka.bootstrap, topic)}
                        best = interleaved_loops(loops, seconds, args.repeat)
                        result["tx100"] = {side: {**fig, "msgs_per_s": round(fig["per_s"] * TX_BATCH)}
                                           for side, fig in best.items()}
                        loops.clear()
                        gc.collect()  # the Kafka producer is destroyed now, not after Kafka has stopped
                    if "e2e" in parts:
                        topic = f"e2e-{uuid.uuid4().hex[:6]}"
                        client.create_topic(topic, QUEUES)
                        kafka.create_topic(topic, QUEUES)
                        # txmq: the push subscription; txmq_pull: the PullConsumer's wait-then-pull, as before it
                        result["e2e"] = {"txmq": txmq_e2e(broker.endpoint, topic, e2e_count, 20, push=True),
                                         "txmq_pull": txmq_e2e(broker.endpoint, topic, e2e_count, 20, push=False),
                                         "kafka": kafka_e2e(kafka, topic, e2e_count, 20)}
                    if parts & {"spark", "spark_read", "spark_write"}:
                        read_rows = rows if parts & {"spark", "spark_read"} else 0
                        write_rows = rows // 2 if parts & {"spark", "spark_write"} else 0
                        pids = {"broker": [broker.proc.pid], "kafka": [p.pid for p in kafka.procs]}
                        result["spark"] = run_spark_part(broker.endpoint, kafka.bootstrap, read_rows, write_rows,
                                                         args.repeat, pids)
            except PeerUnavailable as exc:
                result["errors"]["kafka"] = str(exc)
        if "rocketmq" in parts:
            try:
                with RocketMQ5() as rmq:
                    rmq_used = rmq
                    result["rocketmq"] = rocketmq_part(broker.endpoint, client, rmq, seconds, threads, args.repeat,
                                                       e2e_count, broker.proc.pid)
            except PeerUnavailable as exc:
                result["errors"]["rocketmq"] = str(exc)
        client.close()
    result["peers"] = settings(kafka_used, rmq_used)
    result["ratios"] = compute_ratios(result)
    result["goals"] = goals(result)
    result["target"] = {name: g["goal"] for name, g in result["goals"].items()}  # the report's target column
    # a run of some parts (--only) has a file of its own: it does not replace the full run's figures
    emit("vs_peers" if parts == set(PARTS) else "vs_peers-" + "-".join(sorted(parts)), result)


if __name__ == "__main__":
    main()
