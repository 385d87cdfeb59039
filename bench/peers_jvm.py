"""The JVM peers of bench/vs_peers.py: Apache Kafka (KRaft) and Apache RocketMQ 5, run from Maven jars.

    from bench.peers_jvm import Kafka, RocketMQ5, fetch_jars
    fetch_jars("kafka"); fetch_jars("rocketmq")     # mvn copy-dependencies, once, into bench/peers/cache/
    with Kafka() as kafka: ...kafka.bootstrap...     # one controller + one broker, own dirs and ports
    with RocketMQ5() as rmq: ...rmq.endpoint...      # name server + proxy in local mode (broker inside)

Both peers run from the jars of bench/peers/pom.xml on the class path, with
generated configuration files in a temporary directory; the settings that
decide durability and speed are spelled out in KAFKA_STATED / ROCKETMQ_STATED
(each one the peer's documented default, written down so the report can name
it). `.venv/bin/python bench/peers_jvm.py --smoke` starts and stops both.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.peers import PeerUnavailable, _Instance, _stop_group, free_port, wait_for_port  # noqa: E402

PEERS_DIR = ROOT / "bench" / "peers"
POM = PEERS_DIR / "pom.xml"
CACHE = PEERS_DIR / "cache"
JAVA = os.environ.get("TXMQ_BENCH_JAVA") or shutil.which("java") or "java"

# Kafka's own defaults for the settings that decide how a write is made durable, written out so
# the report names them: no fsync per write, the OS flushes (durability comes from replication).
KAFKA_STATED = {
    "log.flush.interval.messages": "9223372036854775807",
    "log.flush.interval.ms": "9223372036854775807",
    "log.flush.scheduler.interval.ms": "9223372036854775807",
    "num.partitions": "4",
}
# Single-node values the Kafka distribution's own config/server.properties uses (a replication
# factor above 1 cannot be met by one broker).
KAFKA_SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}
# Heap sizes of kafka-server-start.sh (KAFKA_HEAP_OPTS) and its G1 flags (kafka-run-class.sh).
KAFKA_JVM = ("-Xms1G", "-Xmx1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true")

# RocketMQ's documented defaults for durability (ASYNC_FLUSH: acked before fsync, flushed every
# 500 ms; ASYNC_MASTER: no replica), written out so the report names them.
ROCKETMQ_STATED = {
    "flushDiskType": "ASYNC_FLUSH",
    "brokerRole": "ASYNC_MASTER",
    "flushIntervalCommitLog": "500",
    "transientStorePoolEnable": "false",
}
# RocketMQ's start scripts size the heap for a dedicated host (runbroker.sh: 8 GiB, runserver.sh:
# 4 GiB); this machine is shared, so the heaps are stated here and in the report.
ROCKETMQ_JVM = ("-server", "-XX:+UseG1GC", "-XX:G1HeapRegionSize=16m", "-XX:G1ReservePercent=25",
                "-XX:InitiatingHeapOccupancyPercent=30", "-XX:SoftRefLRUPolicyMSPerMB=0",
                "-XX:-OmitStackTraceInFastThrow", "-XX:MaxDirectMemorySize=4g", "-XX:-UseLargePages",
                "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
                "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
                "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED")
ROCKETMQ_HEAP = {"namesrv": ("-Xms512m", "-Xmx512m"), "proxy": ("-Xms2g", "-Xmx2g")}


# ---- jars -------------------------------------------------------------------------------------


def pom_versions(pom: Path = POM) -> dict[str, str]:
    """The peer versions the pom pins (its <kafka.version>, <rocketmq.version> properties)."""
    import xml.etree.ElementTree as ET

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = ET.parse(pom).getroot().find("m:properties", ns)
    out = {}
    for child in list(props) if props is not None else []:
        tag = child.tag.split("}", 1)[-1]
        if tag.endswith(".version"):
            out[tag[: -len(".version")]] = (child.text or "").strip()
    return out


def jar_dir(profile: str) -> Path:
    return CACHE / profile


def fetch_jars(profile: str, log=print) -> Path:
    """Copy the profile's jars from Maven Central into bench/peers/cache/<profile>/ (once per version)."""
    out = jar_dir(profile)
    version = pom_versions().get(profile, "?")
    stamp = out / f".fetched-{version}"
    if stamp.exists():
        return out
    if shutil.which("mvn") is None:
        raise PeerUnavailable("mvn is not installed: it fetches the Kafka and RocketMQ jars")
    shutil.rmtree(out, ignore_errors=True)
    log(f"peers: mvn copy-dependencies -P{profile} ({profile} {version})")
    done = subprocess.run(["mvn", "-q", "-B", "-f", str(POM), f"-P{profile}", "dependency:copy-dependencies",
                           f"-DoutputDirectory={out}"], capture_output=True, text=True)
    if done.returncode != 0:
        raise PeerUnavailable(f"mvn could not fetch the {profile} jars: {(done.stdout + done.stderr)[-600:]}")
    stamp.write_text(version + "\n")
    return out


def class_path(profile: str) -> str:
    return str(jar_dir(profile) / "*")


def java_version() -> str:
    try:
        out = subprocess.run([JAVA, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "not installed"
    lines = (out.stderr or out.stdout).splitlines()
    return lines[0] if lines else "?"


# ---- configuration (pure: unit-tested in tests/bench/) -----------------------------------------


def kafka_cluster_id(seed: bytes | None = None) -> str:
    """A KRaft cluster id: 16 bytes, URL-safe base64 without padding (Kafka's Uuid text form)."""
    while True:
        raw = seed if seed is not None else uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw[:16]).decode().rstrip("=")
        if seed is not None or not text.startswith("-"):  # kafka-storage would read "-..." as an option
            return text


def kafka_controller_config(node_id: int, port: int, log_dir: Path) -> dict[str, str]:
    return {
        "process.roles": "controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@127.0.0.1:{port}",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
    }


def kafka_replication(replicas: int, min_insync: int) -> dict[str, str]:
    """The replication settings of a cluster of `replicas` brokers: every topic, the transaction log and the
    offsets topic on all of them, a write acknowledged (acks=all) once `min_insync` of them hold it."""
    if replicas == 1:
        return KAFKA_SINGLE_NODE
    assert 1 <= min_insync <= replicas, (min_insync, replicas)
    return {**KAFKA_SINGLE_NODE,
            "default.replication.factor": str(replicas), "min.insync.replicas": str(min_insync),
            "offsets.topic.replication.factor": str(replicas),
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(min_insync),
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": str(min_insync)}


def kafka_broker_config(node_id: int, port: int, controller_id: int, controller_port: int,
                        log_dir: Path, *, replicas: int = 1, min_insync: int = 1) -> dict[str, str]:
    return {
        "process.roles": "broker",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{controller_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        **kafka_replication(replicas, min_insync),
        **KAFKA_STATED,
    }


def properties_text(props: dict[str, str]) -> str:
    """A Java .properties file (values here never need escaping beyond what we check)."""
    for key, value in props.items():
        if "\n" in value or "\n" in key:
            raise ValueError(f"newline in property {key!r}")
    return "".join(f"{k}={v}\n" for k, v in props.items())


def rocketmq_broker_config(*, port: int, namesrv: str, store: Path) -> dict[str, str]:
    return {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "brokerIP1": "127.0.0.1",
        "listenPort": str(port),
        "namesrvAddr": namesrv,
        "storePathRootDir": str(store),
        "storePathCommitLog": str(store / "commitlog"),
        "autoCreateTopicEnable": "true",
        "autoCreateSubscriptionGroup": "true",
        **ROCKETMQ_STATED,
    }


def rocketmq_proxy_config(*, grpc_port: int, remoting_port: int, namesrv: str) -> dict:
    return {"rocketMQClusterName": "DefaultCluster", "grpcServerPort": grpc_port,
            "remotingListenPort": remoting_port, "namesrvAddr": namesrv}


# ---- running instances -------------------------------------------------------------------------


def _ports_free(*ports: int) -> bool:
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None):
    out = open(log, "w")
    try:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=cwd)
    finally:
        out.close()


def _log_tail(path: Path, chars: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class _JvmInstance(_Instance):
    """An instance that cleans up after a failed start too (`with` calls no __exit__ when __enter__ raises)."""

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self


@dataclass
class Kafka(_JvmInstance):
    """A KRaft Kafka: one controller process and `brokers` broker processes (kafka.Kafka), own dirs and ports;
    with several brokers every topic has `brokers` replicas and acks=all waits for `min_insync` of them."""

    name = "kafka"
    settings: dict = field(default_factory=dict)
    brokers: int = 1
    min_insync: int = 1

    def start(self) -> None:
        fetch_jars("kafka")
        self.controller_port = free_port()
        self.broker_ports = [self.port] + [free_port() for _ in range(self.brokers - 1)]
        cluster = kafka_cluster_id()
        configs = {"controller": kafka_controller_config(1, self.controller_port, self.dir / "controller-logs")}
        for i, port in enumerate(self.broker_ports):
            suffix = "" if i == 0 else f"-{i + 1}"
            configs[f"broker{suffix}"] = kafka_broker_config(
                2 + i, port, 1, self.controller_port, self.dir / f"broker{suffix}-logs",
                replicas=self.brokers, min_insync=self.min_insync)
        self.settings = configs["broker"]
        for role, props in configs.items():
            path = self.dir / f"{role}.properties"
            path.write_text(properties_text(props))
            fmt = subprocess.run([JAVA, "-cp", class_path("kafka"), "kafka.tools.StorageTool", "format",
                                  f"--cluster-id={cluster}", f"--config={path}", "--ignore-formatted"],
                                 capture_output=True, text=True, timeout=120)
            if fmt.returncode != 0:
                raise PeerUnavailable(f"kafka-storage format ({role}) failed: {(fmt.stdout + fmt.stderr)[-600:]}")
        roles = [("controller", self.controller_port)] + [
            (role, port) for role, port in zip([r for r in configs if r != "controller"], self.broker_ports)]
        for role, port in roles:
            log = self.dir / f"{role}.log"
            proc = _spawn([JAVA, *KAFKA_JVM, "-cp", class_path("kafka"), "kafka.Kafka",
                           str(self.dir / f"{role}.properties")], log)
            self.procs.append(proc)
            if not wait_for_port(port, 90, proc):
                tail = _log_tail(log)
                self.stop()
                raise PeerUnavailable(f"kafka {role} did not open port {port} within 90 s: {tail}")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.broker_ports)

    def create_topic(self, name: str, partitions: int = 4) -> None:
        kafka_create_topic(self.bootstrap, name, partitions, self.brokers)


def kafka_create_topic(bootstrap: str, name: str, partitions: int = 4, replicas: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _, future in admin.create_topics([NewTopic(name, partitions, replicas)]).items():
        future.result(60)


@dataclass
class RocketMQ5(_JvmInstance):
    """Apache RocketMQ 5: a name server and a proxy in local mode (the broker runs inside it)."""

    name = "rocketmq"
    settings: dict = field(default_factory=dict)

    def start(self) -> None:
        fetch_jars("rocketmq")
        self.namesrv_port = free_port()
        # the broker also listens on listenPort-2 (its "fast" port) and +1 (HA): take a free trio
        for _ in range(50):
            broker_port = free_port()
            if broker_port > 1030 and _ports_free(broker_port - 2, broker_port + 1):
                break
        self.broker_port = broker_port
        self.remoting_port = free_port()
        namesrv = f"127.0.0.1:{self.namesrv_port}"
        (self.dir / "conf").mkdir(exist_ok=True)
        (self.dir / "namesrv.conf").write_text(properties_text({"listenPort": str(self.namesrv_port)}))
        broker = rocketmq_broker_config(port=broker_port, namesrv=namesrv, store=self.dir / "store")
        self.settings = broker
        (self.dir / "broker.conf").write_text(properties_text(broker))
        (self.dir / "proxy.json").write_text(json.dumps(rocketmq_proxy_config(
            grpc_port=self.port, remoting_port=self.remoting_port, namesrv=namesrv)))
        self.env = dict(os.environ, ROCKETMQ_HOME=str(self.dir))
        home = f"-Duser.home={self.dir}"  # RocketMQ keeps its logs and kv files under ~
        ns = _spawn([JAVA, *ROCKETMQ_HEAP["namesrv"], *ROCKETMQ_JVM, home, "-cp", class_path("rocketmq"),
                     "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(self.dir / "namesrv.conf")],
                    self.dir / "namesrv.log", self.env, self.dir)
        self.procs.append(ns)
        if not wait_for_port(self.namesrv_port, 240, ns):
            tail = _log_tail(self.dir / "namesrv.log")
            self.stop()
            raise PeerUnavailable(f"rocketmq name server did not start: {tail}")
        proxy = _spawn([JAVA, *ROCKETMQ_HEAP["proxy"], *ROCKETMQ_JVM, home, "-cp", class_path("rocketmq"),
                        "org.apache.rocketmq.proxy.ProxyStartup", "-pm", "local", "-pc", str(self.dir / "proxy.json"),
                        "-bc", str(self.dir / "broker.conf"), "-n", namesrv],
                       self.dir / "proxy.log", self.env, self.dir)
        self.procs.append(proxy)
        if not (wait_for_port(self.port, 300, proxy) and wait_for_port(self.broker_port, 120, proxy)):
            tail = _log_tail(self.dir / "proxy.log")
            self.stop()
            raise PeerUnavailable(f"rocketmq proxy (local mode) did not start: {tail}")

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def create_topic(self, name: str, queues: int = 4, message_type: str = "NORMAL") -> None:
        """mqadmin updateTopic: RocketMQ 5 refuses a message whose type differs from its topic's."""
        self._mqadmin(name, "updateTopic", "-t", name, "-r", str(queues), "-w", str(queues),
                      "-a", f"+message.type={message_type}")

    def create_group(self, name: str) -> None:
        """mqadmin updateSubGroup: the proxy sends a consumer no settings for a group it does not know."""
        self._mqadmin(name, "updateSubGroup", "-g", name)

    def _mqadmin(self, name: str, *args: str) -> None:
        cmd = [JAVA, "-Xms256m", "-Xmx256m", f"-Duser.home={self.dir}", "-cp", class_path("rocketmq"),
               "org.apache.rocketmq.tools.command.MQAdminStartup", args[0], "-n", self.namesrv,
               "-c", "DefaultCluster", *args[1:]]
        deadline = time.monotonic() + 90
        while True:  # the broker registers with the name server a few seconds after its port opens
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=self.env)
            if done.returncode == 0 and "success" in done.stdout.lower():
                return
            if time.monotonic() > deadline:
                raise PeerUnavailable(f"mqadmin {args[0]} {name} failed: {(done.stdout + done.stderr)[-600:]}")
            time.sleep(2)

    def stop(self) -> None:
        # the proxy first (it holds the broker), then the name server
        for proc in reversed(self.procs):
            _stop_group(proc, timeout_s=60)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def smoke() -> None:
    with Kafka() as kafka:
        kafka.create_topic("smoke", 4)
        print(f"kafka ok on {kafka.bootstrap}")
    t0 = time.monotonic()
    with RocketMQ5() as rmq:
        rmq.create_topic("smoke", 4)
        print(f"rocketmq ok on {rmq.endpoint} ({time.monotonic() - t0:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fetch", action="store_true", help="fetch both peers' jars with mvn")
    ap.add_argument("--smoke", action="store_true", help="start and stop both peers once")
    args = ap.parse_args(argv)
    if args.fetch or args.smoke:
        fetch_jars("kafka")
        fetch_jars("rocketmq")
    if args.smoke:
        smoke()
    print(pom_versions(), java_version())
    return 0


if __name__ == "__main__":
    sys.exit(main())
