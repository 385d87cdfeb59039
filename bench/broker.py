"""Broker benchmark: txmq over loopback gRPC against RabbitMQ and Redis streams, in one run.

    .venv/bin/python bench/broker.py [--quick] [--seconds S] [--flush async|sync]

All three systems get 1 KiB bodies from Python clients in separate processes:
(a) transactions of 100 messages, committed messages/s — txmq: one native
    PrepareMessages (Arrow payload) + EndTransaction COMMIT; RabbitMQ: pika
    tx_select, 100 persistent basic_publish to a durable queue, tx_commit;
    Redis: MULTI, 100 XADD, EXEC (AOF appendfsync everysec).
(b) single-message transactions as RocketMQ's official client runs them —
    txmq: RocketMQ-protocol SendMessage (TRANSACTION) then EndTransaction
    COMMIT (txmq's own proto classes, the official method paths); the peers:
    a one-message tx_commit / MULTI-EXEC — transactions/s and p50/p99 latency
    with 1 and 8 concurrent producers.
Targets: (a) ≥10x RabbitMQ and ≥2x Redis; (b) on par with RabbitMQ, p99 ≤ 5 ms.
The limit for (b) is measured in the same run: "transactions" of two calls to a
Python gRPC echo server that does nothing (bench/grpc_server_models.py's sync
server), with 1 and 8 producers. No Python gRPC broker can beat it, so it
shows how much of (b) is the broker's own work and how much the two calls.
Every figure also carries the CPU per transaction of the clients (their measured
loop) and of the server process(es): clients, servers and the other users of
this machine share its 2 cores, so CPU per transaction shows where the time
goes when throughput ratios are noisy.
Each peer runs as its own instance (own port and data dir), started and
stopped here; a peer that cannot start is reported as such and txmq's figures
are still printed. Prints one JSON line and writes bench/results/broker.json.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import emit  # noqa: E402

BODY = b"x" * 1024
BATCH = 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.2)
    return False


# ---- peers ------------------------------------------------------------------------


class RabbitPeer:
    """A private RabbitMQ node (own port, mnesia dir, node name), started as root without the su wrapper."""

    name = "rabbitmq"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="txmq-bench-rabbit-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.epmd_was_running = _epmd_running()

    def start(self) -> None:
        binary = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
        if not binary.exists():
            binary = Path(shutil.which("rabbitmq-server") or "")
        if not binary.name:
            raise RuntimeError("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
        (self.dir / "mnesia").mkdir()
        (self.dir / "log").mkdir()
        (self.dir / "enabled_plugins").write_text("[].\n")
        env = dict(os.environ, HOME=str(self.dir), RABBITMQ_NODENAME=f"txbench{self.port}@localhost",
                   RABBITMQ_NODE_PORT=str(self.port), RABBITMQ_DIST_PORT=str(free_port()),
                   RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"), RABBITMQ_LOG_BASE=str(self.dir / "log"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
                   RABBITMQ_PID_FILE=str(self.dir / "pid"))
        self.proc = subprocess.Popen([str(binary)], cwd=self.dir, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        if not wait_port(self.port, 60):
            self.stop()
            raise RuntimeError("rabbitmq-server did not open its port within 60 s")
        import pika

        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))
        conn.channel().queue_declare("bench", durable=True)
        conn.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if not self.epmd_was_running:
            for pid in _epmd_pids():  # the epmd our node started
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)


def _epmd_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "epmd":
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _epmd_running() -> bool:
    return bool(_epmd_pids())


class RedisPeer:
    """A private redis-server with AOF appendfsync everysec."""

    name = "redis"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="txmq-bench-redis-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(binary).exists():
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                                      "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                                      "--daemonize", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        if not wait_port(self.port, 20):
            self.stop()
            raise RuntimeError("redis-server did not open its port within 20 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- workers (run in their own processes) ------------------------------------------------


def _txmq_batch_worker(endpoint: str, topic: str):
    import pyarrow as pa

    from txmq.broker.client import NativeClient

    client = NativeClient(endpoint, timeout_s=30)
    table = pa.table({"body": pa.array([BODY] * BATCH, pa.binary())})
    sender = uuid.uuid4().hex[:8]

    def one() -> int:
        prep = client.prepare_arrow("", table, topic=topic, producer_group="bench", sender=sender)
        client.end_transaction(prep.transaction_id, "COMMIT")
        return BATCH
    return one, client.close


def _txmq_single_worker(endpoint: str, topic: str):
    """One transactional message the way RocketMQ 5 clients do it: SendMessage, then EndTransaction."""
    import grpc
    from google.protobuf.timestamp_pb2 import Timestamp

    from txmq.broker.protocol import rocketmq_v2_pb2 as pb
    from txmq.broker.protocol.rocketmq_methods import SERVICE_NAME

    channel = grpc.insecure_channel(endpoint)
    send = channel.unary_unary(f"/{SERVICE_NAME}/SendMessage", request_serializer=pb.SendMessageRequest.SerializeToString,
                               response_deserializer=pb.SendMessageResponse.FromString)
    end = channel.unary_unary(f"/{SERVICE_NAME}/EndTransaction",
                              request_serializer=pb.EndTransactionRequest.SerializeToString,
                              response_deserializer=pb.EndTransactionResponse.FromString)
    client_id = f"bench-{uuid.uuid4().hex[:8]}"
    metadata = (("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))
    resource = pb.Resource(name=topic)

    def one() -> int:
        msg_id = uuid.uuid4().hex
        born = Timestamp()
        born.GetCurrentTime()
        message = pb.Message(topic=resource, body=BODY, system_properties=pb.SystemProperties(
            message_id=msg_id, message_type=pb.TRANSACTION, body_encoding=pb.IDENTITY, born_timestamp=born,
            born_host="127.0.0.1"))
        resp = send(pb.SendMessageRequest(messages=[message]), metadata=metadata, timeout=30)
        if resp.status.code != pb.OK:
            raise RuntimeError(f"SendMessage failed: {resp.status.code} {resp.status.message}")
        entry = resp.entries[0]
        done = end(pb.EndTransactionRequest(topic=resource, message_id=msg_id, transaction_id=entry.transaction_id,
                                            resolution=pb.COMMIT, source=pb.SOURCE_CLIENT),
                   metadata=metadata, timeout=30)
        if done.status.code != pb.OK:
            raise RuntimeError(f"EndTransaction failed: {done.status.code} {done.status.message}")
        return 1
    return one, channel.close


def _rabbit_worker(port: int, size: int):
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = conn.channel()
    channel.tx_select()
    props = pika.BasicProperties(delivery_mode=2)

    def one() -> int:
        for _ in range(size):
            channel.basic_publish(exchange="", routing_key="bench", body=BODY, properties=props)
        channel.tx_commit()
        return size
    return one, conn.close


def _redis_worker(port: int, size: int):
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)

    def one() -> int:
        pipe = r.pipeline(transaction=True)
        for _ in range(size):
            pipe.xadd("bench", {"body": BODY})
        pipe.execute()
        return size
    return one, r.close


def _bare_grpc_worker(endpoint: str):
    """The limit for (b): two unary calls of a trivial echo server (bytes in, bytes out, no work),
    the same two round trips a RocketMQ transaction makes, with the message's 1 KiB."""
    import grpc

    from bench.grpc_server_models import echo_stub

    channel = grpc.insecure_channel(endpoint)
    echo = echo_stub(channel)

    def one() -> int:
        echo(BODY, timeout=30)
        echo(b"end", timeout=30)
        return 1
    return one, channel.close


def _make_worker(kind: str, target, size: int):
    if kind == "bare-grpc":
        return _bare_grpc_worker(target)
    if kind == "txmq-batch":
        return _txmq_batch_worker(*target)
    if kind == "txmq-single":
        return _txmq_single_worker(*target)
    if kind == "rabbitmq":
        return _rabbit_worker(target, size)
    if kind == "redis":
        return _redis_worker(target, size)
    raise ValueError(kind)


def _process_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def pid_cpu_s(pid: int) -> float:
    """User+system CPU seconds a process has used so far (from /proc; 0.0 where that is not readable)."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0


def session_cpu_s(sid: int) -> float:
    """CPU seconds of every live process of a session (a peer started with start_new_session: RabbitMQ
    runs beam.smp under a wrapper script, so the wrapper's own pid would show almost nothing)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
            if fields and int(fields[3]) == sid:
                total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def worker_main(kind: str, target, size: int, start_at: float, seconds: float, out) -> None:
    """Warm up, wait for the common start, run transactions for `seconds`, report counts and latencies."""
    try:
        one, close = _make_worker(kind, target, size)
        for _ in range(5):
            one()
        while time.time() < start_at:
            time.sleep(0.001)
        messages, latencies = 0, []
        cpu_start = _process_cpu_s()
        stop = time.perf_counter() + seconds
        while True:
            t0 = time.perf_counter()
            if t0 >= stop:
                break
            messages += one()
            latencies.append(time.perf_counter() - t0)
        cpu_s = _process_cpu_s() - cpu_start
        close()
        out.put({"messages": messages, "transactions": len(latencies), "latencies": latencies, "cpu_s": cpu_s})
    except Exception as exc:  # reported, not raised: the parent prints what failed
        out.put({"error": f"{type(exc).__name__}: {exc}"})


def run_workers(kind: str, target, size: int, producers: int, seconds: float, server_cpu: Callable[[], float] | None = None) -> dict:
    """Run `producers` worker processes; figures include the CPU per transaction of the clients
    (measured loop only) and, given `server_cpu` (a CPU-seconds reader), of the server (it is idle outside the loop
    but for the few warm-up transactions), because all of them share this machine's cores."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 4.0 + producers * 0.5  # spawned interpreters need time to import
    procs = [ctx.Process(target=worker_main, args=(kind, target, size, start_at, seconds, out))
             for _ in range(producers)]
    server_cpu_start = server_cpu() if server_cpu else 0.0
    for p in procs:
        p.start()
    reports = [out.get(timeout=seconds + 120) for _ in procs]
    server_cpu_s = server_cpu() - server_cpu_start if server_cpu else None
    for p in procs:
        p.join(30)
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        return {"error": errors[0]}
    latencies = sorted(l for r in reports for l in r["latencies"])
    messages = sum(r["messages"] for r in reports)
    transactions = len(latencies)

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 3) if latencies else 0.0
    figures = {"messages_per_s": round(messages / seconds, 1), "transactions_per_s": round(transactions / seconds, 1),
               "p50_ms": pct(0.50), "p99_ms": pct(0.99), "producers": producers}
    if transactions:
        figures["client_cpu_us_per_tx"] = round(sum(r["cpu_s"] for r in reports) / transactions * 1e6, 1)
        if server_cpu_s is not None:
            figures["server_cpu_us_per_tx"] = round(server_cpu_s / transactions * 1e6, 1)
    return figures


# ---- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (a few seconds per figure)")
    parser.add_argument("--seconds", type=float, help="seconds per measurement (default 10, quick 3)")
    parser.add_argument("--flush", choices=("async", "sync"), default="async",
                        help="txmq flush mode (async ≈ Redis everysec; default async)")
    args = parser.parse_args(argv)
    seconds = args.seconds or (3.0 if args.quick else 10.0)

    from tests.support.broker_process import BrokerProcess
    from txmq.broker.client import NativeClient

    peers: dict[str, object] = {}
    unavailable: dict[str, str] = {}
    for cls in (RabbitPeer, RedisPeer):
        peer = cls()
        try:
            peer.start()
            peers[peer.name] = peer
        except Exception as exc:
            unavailable[peer.name] = str(exc)
            peer.stop()
            print(f"peer {peer.name} unavailable: {exc}", file=sys.stderr)

    data_dir = Path(tempfile.mkdtemp(prefix="txmq-bench-broker-"))
    figures: dict[str, dict] = {"a_tx100": {}, "b_tx1_p1": {}, "b_tx1_p8": {}}
    try:
        with BrokerProcess(data_dir / "data", flush=args.flush) as broker:
            with NativeClient(broker.endpoint) as c:
                c.create_topic("bench_a", 4)
                c.create_topic("bench_b", 4)
            print(f"txmq broker on {broker.endpoint} (flush={args.flush}); {seconds:g}s per figure", file=sys.stderr)
            broker_cpu = lambda: pid_cpu_s(broker.proc.pid)  # noqa: E731
            plan = [("a_tx100", "txmq", "txmq-batch", (broker.endpoint, "bench_a"), BATCH, 1, broker_cpu)]
            for producers, key in ((1, "b_tx1_p1"), (8, "b_tx1_p8")):
                plan.append((key, "txmq", "txmq-single", (broker.endpoint, "bench_b"), 1, producers, broker_cpu))
            for name, peer in peers.items():
                peer_cpu = lambda sid=peer.proc.pid: session_cpu_s(sid)  # noqa: E731
                plan.append(("a_tx100", name, name, peer.port, BATCH, 1, peer_cpu))
                plan.append(("b_tx1_p1", name, name, peer.port, 1, 1, peer_cpu))
                plan.append(("b_tx1_p8", name, name, peer.port, 1, 8, peer_cpu))
            for key, system, kind, target, size, producers, server_cpu in plan:
                result = run_workers(kind, target, size, producers, seconds, server_cpu)
                figures[key][system] = result
                print(f"{key:9} {system:9} {result}", file=sys.stderr)
        figures.update(_bare_grpc_limit(seconds))
    finally:
        for peer in peers.values():
            peer.stop()
        shutil.rmtree(data_dir, ignore_errors=True)

    emit("broker", build_report(figures, unavailable, seconds, args.flush), sort_keys=True)
    return 0


def _bare_grpc_limit(seconds: float) -> dict:
    """(b)'s limit in this run: 'transactions' of two calls to a Python gRPC echo server (the
    thread-pool server txmq uses, no work in the handler), with 1 and 8 producers."""
    from bench.grpc_server_models import start_server

    proc, endpoint = start_server("sync")
    try:
        server_cpu = lambda: pid_cpu_s(proc.pid)  # noqa: E731
        limit = {}
        for producers, key in ((1, "b_tx1_p1"), (8, "b_tx1_p8")):
            limit[key] = run_workers("bare-grpc", endpoint, 1, producers, seconds, server_cpu)
            print(f"{key:9} {'2 bare gRPC calls':9} {limit[key]}", file=sys.stderr)
    finally:
        proc.kill()
        proc.wait()
    return {"bare_grpc_two_calls": limit}


def _ratio(a: dict | None, b: dict | None, key: str) -> float | None:
    if not a or not b or "error" in a or "error" in b or not b.get(key):
        return None
    return round(a[key] / b[key], 2)


def build_report(figures: dict, unavailable: dict, seconds: float, flush: str) -> dict:
    a, b1, b8 = figures["a_tx100"], figures["b_tx1_p1"], figures["b_tx1_p8"]
    limit = figures.get("bare_grpc_two_calls", {})
    ratios = {
        "a_tx100_msgs_vs_rabbitmq": _ratio(a.get("txmq"), a.get("rabbitmq"), "messages_per_s"),
        "a_tx100_msgs_vs_redis": _ratio(a.get("txmq"), a.get("redis"), "messages_per_s"),
        "b_tx1_p1_tps_vs_rabbitmq": _ratio(b1.get("txmq"), b1.get("rabbitmq"), "transactions_per_s"),
        "b_tx1_p8_tps_vs_rabbitmq": _ratio(b8.get("txmq"), b8.get("rabbitmq"), "transactions_per_s"),
        "b_tx1_p1_tps_vs_redis": _ratio(b1.get("txmq"), b1.get("redis"), "transactions_per_s"),
        "b_tx1_p8_tps_vs_redis": _ratio(b8.get("txmq"), b8.get("redis"), "transactions_per_s"),
        # the limit: two bare Python gRPC calls per transaction, no work in the server
        "b_tx1_p1_tps_vs_two_bare_grpc_calls": _ratio(b1.get("txmq"), limit.get("b_tx1_p1"), "transactions_per_s"),
        "b_tx1_p8_tps_vs_two_bare_grpc_calls": _ratio(b8.get("txmq"), limit.get("b_tx1_p8"), "transactions_per_s"),
        "b_two_bare_grpc_calls_p1_vs_rabbitmq": _ratio(limit.get("b_tx1_p1"), b1.get("rabbitmq"),
                                                       "transactions_per_s"),
        "b_two_bare_grpc_calls_p8_vs_rabbitmq": _ratio(limit.get("b_tx1_p8"), b8.get("rabbitmq"),
                                                       "transactions_per_s"),
    }
    targets = {
        "a_vs_rabbitmq_ge_10x": None if ratios["a_tx100_msgs_vs_rabbitmq"] is None
        else ratios["a_tx100_msgs_vs_rabbitmq"] >= 10,
        "a_vs_redis_ge_2x": None if ratios["a_tx100_msgs_vs_redis"] is None else ratios["a_tx100_msgs_vs_redis"] >= 2,
        "b_on_par_with_rabbitmq": None if ratios["b_tx1_p1_tps_vs_rabbitmq"] is None
        else ratios["b_tx1_p1_tps_vs_rabbitmq"] >= 0.9 and (ratios["b_tx1_p8_tps_vs_rabbitmq"] or 0) >= 0.9,
        "b_p99_le_5ms": all(f.get("p99_ms", 1e9) <= 5.0 for f in (b1.get("txmq", {}), b8.get("txmq", {}))),
    }
    return {"bench": "broker", "seconds_per_figure": seconds, "txmq_flush": flush, "body_bytes": len(BODY),
            "figures": figures, "peers_unavailable": unavailable, "ratios": ratios, "targets_met": targets}


if __name__ == "__main__":
    sys.exit(main())
