"""The price of replication, txmq's beside Kafka's, measured in one run on this host (issue #42).

    .venv/bin/python bench/replication_cost.py [--quick] [--seconds 5] [--threads 4] [--repeat 3] [--txmq-flush sync]

Four systems run side by side, each round measuring all four in turn (a shared host's noise hits
them alike); the same producer workload on each: `--threads` client threads, each sending 1 KiB
messages in batches of 100 and waiting for every batch's acknowledgement before the next.

- txmq, one broker (EmbeddedBroker, `--flush` = --txmq-flush) against a group of three replicas
  (`--replication sync --min-insync 1`: a write is acknowledged once every in-sync follower holds it,
  each replica on the same --flush) and its etcd;
- Kafka 4 (KRaft), one controller and one broker, topics of one replica, against one controller and
  three brokers, topics of three replicas, `min.insync.replicas=2`; producers with acks=all and
  enable.idempotence=true (confluent-kafka,
  its default linger; flush() sends the batch at once). Kafka fsyncs nothing per write (log.flush.*
  defaults): its durability is replication, the page cache holds the data.

Prints each system's ratio (replicated / single) per round, the medians with min-max, and the
server CPU per message (every process of the side: brokers, controller, etcd). Writes
bench/results/replication_cost.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from bench.peers import PeerUnavailable  # noqa: E402
from bench.peers_jvm import Kafka, pom_versions  # noqa: E402
from bench.replication import BATCH, BODY, drive, rate, sends  # noqa: E402
from bench.results_io import emit  # noqa: E402

PARTITIONS = 4
# linger.ms=0 would send each produce() as a request of its own (librdkafka does not wait for the
# batch's other messages): 100 requests per batch; the default linger gathers them and flush() sends
# the batch at once
KAFKA_PRODUCER = {"acks": "all", "enable.idempotence": True}


def spread(values: list[float]) -> dict:
    """The median of a side's rounds and their range."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def kafka_rate(kafka: Kafka, topic: str, seconds: float, threads: int) -> tuple[float, float]:
    """(messages per second, server CPU us per message): `threads` producers each sending batches of
    BATCH and flushing (every message acknowledged) before the next batch."""
    from confluent_kafka import Producer

    pids = [p.pid for p in kafka.procs]
    producers = [Producer({"bootstrap.servers": kafka.bootstrap, **KAFKA_PRODUCER}) for _ in range(threads)]
    failed: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    def batch(producer) -> None:
        for _ in range(BATCH):
            producer.produce(topic, BODY, on_delivery=on_delivery)
        producer.flush(30)

    for producer in producers:
        batch(producer)  # warm: metadata, producer ids, connections to every leader

    def step(i: int) -> int:
        batch(producers[i])
        return BATCH

    measured = drive(threads, seconds, pids, step)
    if failed:
        raise RuntimeError(f"kafka refused {len(failed)} sends, first: {failed[0]}")
    return measured


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 s per measurement, 2 rounds")
    p.add_argument("--seconds", type=float, default=None, help="per measurement (default 5)")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of unmeasured load on each side first")
    p.add_argument("--repeat", type=int, default=None, help="rounds (default 3)")
    p.add_argument("--txmq-flush", choices=("async", "sync"), default="sync",
                   help="every txmq process's --flush (sync: fsync before the acknowledgement, the figure of "
                        "bench/replication.py; async: acknowledged before fsync, as Kafka)")
    args = p.parse_args(argv)
    args.seconds = args.seconds or (2.0 if args.quick else 5.0)
    args.repeat = args.repeat or (2 if args.quick else 3)
    from txmq.broker.cluster.etcd_process import EtcdProcess
    from txmq.broker.cluster.local_group import LocalGroup
    from txmq.broker.embedded import EmbeddedBroker
    from txmq.broker.ports import free_port

    root = Path(tempfile.mkdtemp(prefix="txmq-bench-replcost-"))
    result: dict = {"quick": args.quick, "seconds": args.seconds, "warmup_s": args.warmup, "threads": args.threads,
                    "repeats": args.repeat, "batch": BATCH,
                    "body_bytes": len(BODY), "workload": f"{args.threads} threads, 1 KiB sends in acknowledged "
                                                         f"batches of {BATCH}",
                    "durability": {
                        "txmq": f"--flush {args.txmq_flush} on every process; the group: --replication sync "
                                "--min-insync 1 (acknowledged once every in-sync follower has the write)",
                        "kafka": "no fsync per write (log.flush.* defaults); RF=3: acks=all, min.insync.replicas=2, "
                                 "acknowledged once every in-sync replica has the write"},
                    "kafka_version": pom_versions().get("kafka")}
    etcd = EtcdProcess(root / "etcd").start()
    single = EmbeddedBroker(root / "single", flush=args.txmq_flush)
    single.port = free_port()
    group = LocalGroup(root, etcd, "bench", flush=args.txmq_flush,
                       args=["--replication", "sync", "--min-insync", "1", "--log-level", "WARNING"])
    for broker in [single, *group.replicas]:
        broker.start_timeout_s = 300  # a shared host at a load of 30 takes minutes to start Python processes
    rounds: dict[str, list[tuple[float, float]]] = {"txmq_single": [], "txmq_group": [], "kafka_rf1": [],
                                                    "kafka_rf3": []}
    try:
        single.start()
        group.start()
        leader = group.wait_leader().endpoint
        endpoints = ";".join([leader] + [r.endpoint for r in group.replicas if r.endpoint != leader])
        group_pids = [r.proc.pid for r in group.replicas] + [etcd.proc.pid]
        with Kafka() as kafka1, Kafka(brokers=3, min_insync=2) as kafka3:
            topic = f"replcost-{uuid.uuid4().hex[:6]}"
            kafka1.create_topic(topic, PARTITIONS)
            kafka3.create_topic(topic, PARTITIONS)
            result["kafka_rf3_config"] = {k: v for k, v in kafka3.settings.items()
                                          if "replication" in k or "isr" in k or "insync" in k}
            # an unmeasured round first: the JVMs compile their hot paths during the first seconds of load
            # (Kafka RF=1 went 6.8k, 35.8k, 60.5k msg/s over three rounds without it)
            for work in (lambda: rate(single.endpoint, args.warmup, args.threads, sends, [single.proc.pid]),
                         lambda: rate(endpoints, args.warmup, args.threads, sends, group_pids),
                         lambda: kafka_rate(kafka1, topic, args.warmup, args.threads),
                         lambda: kafka_rate(kafka3, topic, args.warmup, args.threads)):
                if args.warmup > 0:
                    work()
            for i in range(args.repeat):
                rounds["txmq_single"].append(rate(single.endpoint, args.seconds, args.threads, sends,
                                                  [single.proc.pid]))
                rounds["txmq_group"].append(rate(endpoints, args.seconds, args.threads, sends, group_pids))
                rounds["kafka_rf1"].append(kafka_rate(kafka1, topic, args.seconds, args.threads))
                rounds["kafka_rf3"].append(kafka_rate(kafka3, topic, args.seconds, args.threads))
                figs = {k: v[-1] for k, v in rounds.items()}
                result.setdefault("load_per_round", []).append(round(os.getloadavg()[0], 1))
                print(f"round {i + 1} (load {os.getloadavg()[0]:.1f}): "
                      + "   ".join(f"{k} {v[0]:8.0f} msg/s {v[1]:5.0f} us CPU/msg" for k, v in figs.items())
                      + f"   txmq {figs['txmq_group'][0] / max(1, figs['txmq_single'][0]):.3f}"
                        f"   kafka {figs['kafka_rf3'][0] / max(1, figs['kafka_rf1'][0]):.3f}", file=sys.stderr, flush=True)
    except PeerUnavailable as exc:
        result["error"] = str(exc)
    finally:
        group.stop()
        single.stop()
        etcd.kill()
        shutil.rmtree(root, ignore_errors=True)  # preallocated segments: a few runs would fill /tmp
    # a round where a side got nothing through (its client threads refused: a leader fenced when a
    # loaded host kept it from renewing its lease) measures no throughput: it is counted, not averaged
    failed = [i for i in range(len(rounds["txmq_single"])) if any(vals[i][0] == 0 for vals in rounds.values())]
    result["failed_rounds"] = [i + 1 for i in failed]
    rounds = {k: [v for i, v in enumerate(vals) if i not in failed] for k, vals in rounds.items()}
    if all(rounds.values()):
        result["msgs_per_s"] = {k: spread([v[0] for v in vals]) for k, vals in rounds.items()}
        result["server_cpu_us_per_msg"] = {k: spread([v[1] for v in vals]) for k, vals in rounds.items()}
        result["ratios"] = {
            "txmq_group_vs_single": spread([g[0] / s[0] for g, s in zip(rounds["txmq_group"], rounds["txmq_single"])]),
            "kafka_rf3_vs_rf1": spread([g[0] / s[0] for g, s in zip(rounds["kafka_rf3"], rounds["kafka_rf1"])])}
        result["ratios"]["txmq_over_kafka"] = round(result["ratios"]["txmq_group_vs_single"]["median"]
                                                    / result["ratios"]["kafka_rf3_vs_rf1"]["median"], 3)
    emit("replication_cost", result)
    return 0 if "ratios" in result else 1


if __name__ == "__main__":
    sys.exit(main())
