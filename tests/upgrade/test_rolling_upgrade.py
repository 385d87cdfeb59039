"""A rolling upgrade from the previous release (installed from its wheel), one replica at a time,
under transactional load on a cluster of two 3-replica groups on a real etcd; then one replica
downgraded again, made to lead, and followed by replicas of this release. lab.checker judges what
the clients saw: nothing acknowledged is lost or duplicated, nothing rolled back is read."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from lab.checker import check_run
from tests.spark.conftest import spark, spark_env  # noqa: F401 - the Spark session fixture
from tests.spark.support import topic_bodies
from tests.upgrade.previous_release import PREVIOUS_RELEASE, REPO, previous_release_python
from txmq.broker import versions
from txmq.broker.client.native_client import NativeClient
from txmq.broker.cluster.local_group import LocalGroup
from txmq.broker.embedded import EmbeddedBroker

pytestmark = [pytest.mark.slow, pytest.mark.spark]

GROUP_ARGS = ["--replication", "sync", "--min-insync", "1", "--transaction-timeout", "1s", "--check-interval", "1s"]


class Workload:
    """lab.workloads' native client (plain sends and transactions) in a process of its own."""

    def __init__(self, python: Path, run_dir: Path, process: str, endpoints: str, topic: str, seed: int) -> None:
        self.stop_file = run_dir / f"{process}.stop"
        self.proc = subprocess.Popen(
            [str(python), "-m", "lab.workloads", "native", "--endpoints", endpoints, "--topic", topic,
             "--history", str(run_dir / f"{process}.jsonl"), "--process", process, "--duration", "900",
             "--stop-file", str(self.stop_file), "--seed", str(seed), "--txn-ratio", "0.6"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> None:
        self.stop_file.touch()
        out, _ = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, out[-3000:]


class SparkQuery:
    """A txmq stream read into a parquet sink (exactly-once by its own log) from one checkpoint:
    a query on a 1 s trigger for as long as the upgrade lasts (started again from its checkpoint
    when a restart fails it, as a scheduler would), then Trigger.AvailableNow runs to catch up."""

    def __init__(self, spark, endpoints: str, topic: str, root: Path) -> None:
        self.spark = spark
        self.options = {"broker": endpoints, "topic": topic, "startingOffsets": "earliest",
                        "maxOffsetsPerTrigger": "2000"}
        self.out = str(root / "out")
        self.checkpoint = str(root / "checkpoint")
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _start(self, trigger: dict):
        df = self.spark.readStream.format("txmq").options(**self.options).load().select("body")
        return (df.writeStream.format("parquet").option("path", self.out)
                .option("checkpointLocation", self.checkpoint).trigger(**trigger).start())

    def _finished(self, query) -> bool:
        """Whether the query ended without an error."""
        ok = query.exception() is None
        self.failed += not ok
        return ok

    def run_once(self) -> bool:
        query = self._start({"availableNow": True})
        try:
            query.awaitTermination(180)
        except Exception:  # noqa: BLE001 - judged by query.exception() below
            pass
        finally:
            if query.isActive:
                query.stop()
        return self._finished(query)

    def _loop(self) -> None:
        while not self._stop.is_set():
            query = self._start({"processingTime": "1 second"})
            while query.isActive and not self._stop.wait(0.5):
                pass
            if query.isActive:
                query.stop()
            self._finished(query)

    def __enter__(self) -> "SparkQuery":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(300)

    @property
    def batches(self) -> int:
        """Micro-batches committed (the checkpoint's commit log)."""
        return sum(1 for p in Path(self.checkpoint, "commits").iterdir() if p.name.isdigit())

    def bodies(self) -> Counter:
        return Counter(self.spark.read.parquet(self.out).select("body").toPandas()["body"].map(bytes))


def _member(group: LocalGroup, endpoint: str) -> dict:
    return next((m for m in group.status().get("members", []) if m["endpoint"] == endpoint), {})


def wait_caught_up(group: LocalGroup, replica: EmbeddedBroker, *, timeout_s: float = 60.0) -> None:
    """Until the restarted replica is in the in-sync set and holds what its leader held when it started."""
    target = _member(group, group.wait_leader().endpoint).get("log_end") or 0
    since_ms = int(time.time() * 1000)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = group.view.members().get(replica.endpoint, {})
        if (info.get("updated_ms", 0) > since_ms and info.get("log_end", 0) >= target and not info.get("error")
                and replica.endpoint in group.view.in_sync().members):
            return
        time.sleep(0.1)
    raise AssertionError(f"{replica.endpoint} did not catch up: {group.status()}\n" + "\n".join(replica.output))


STOP_TIMEOUT_S = 90.0
slow_stops: list[str] = []  # replicas a clean stop did not end within STOP_TIMEOUT_S (then killed)


def stop(replica: EmbeddedBroker) -> None:
    """A clean stop (SIGTERM); one that hangs on this loaded host is ended with kill -9, as an
    operator would, and reported: a rolling upgrade must survive either."""
    try:
        replica.stop(timeout_s=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        slow_stops.append(replica.endpoint)
        print(f"{replica.endpoint} did not stop within {STOP_TIMEOUT_S:g}s; killed. Its last lines:\n"
              + "\n".join(list(replica.output)[-15:]))


def restart_as(group: LocalGroup, replica: EmbeddedBroker, program: list[str]) -> None:
    """Stop the replica, start the other release on the same data directory and port,
    and wait until it is in sync again."""
    stop(replica)
    replica.program = program
    replica.start()
    wait_caught_up(group, replica)


def roll(group: LocalGroup, program: list[str]) -> None:
    """One replica at a time, followers first, the leader last."""
    leader = group.wait_leader()
    for r in group.replicas:
        if r.endpoint != leader.endpoint:
            restart_as(group, r, program)
    old = group.replica(leader.endpoint)
    stop(old)
    group.wait_leader(not_epoch=leader.epoch)
    old.program = program
    old.start()
    wait_caught_up(group, old)


def drain(python: Path, run_dir: Path, process: str, endpoints: str, topic: str) -> None:
    subprocess.run([str(python), "-m", "lab.workloads", "drain", "--endpoints", endpoints, "--topic", topic,
                    "--history", str(run_dir / f"{process}.jsonl"), "--process", process, "--timeout", "30"],
                   cwd=REPO, check=True, capture_output=True, timeout=120)


def test_a_cluster_upgraded_one_replica_at_a_time_and_one_replica_downgraded_keeps_every_acknowledged_write_once(
        etcd, tmp_path, spark):
    previous = previous_release_python()
    print(f"previous release: {PREVIOUS_RELEASE} from {previous}")
    old_program = [str(previous), "-m", "txmq.broker.server"]
    new_program = [sys.executable, "-m", "txmq.broker.server"]
    etcd.clear()
    groups = [LocalGroup(tmp_path, etcd, name, args=GROUP_ARGS) for name in ("ua", "ub")]
    for g in groups:
        for r in g.replicas:
            r.program = old_program
    try:
        for g in groups:
            g.start()
        run = tmp_path / "run"
        run.mkdir()
        # clients of both releases: group ua's load from the previous release's client, ub's from this one's
        loads = [Workload(previous, run, "pa", groups[0].endpoints, "upa", 1),
                 Workload(Path(sys.executable), run, "pb", groups[1].endpoints, "upb", 2)]
        time.sleep(3)
        # a Spark query over group ub's topic runs across its upgrade, leader change included
        query = SparkQuery(spark, groups[1].endpoints, "upb", tmp_path / "spark")
        t0 = time.monotonic()
        with query:
            for g in groups:
                roll(g, new_program)
        upgraded_s = time.monotonic() - t0
        for g in groups:
            members = g.status()["members"]
            assert all(m["version"] is not None for m in members), f"a replica of the previous release: {members}"
            assert {m["replication_wire"] for m in members} == {versions.REPLICATION.version}
        # a downgrade while no new feature is in use: one replica back to the previous release, then it
        # leads (the other follower stopped first, so the old one is the only in-sync candidate) and
        # replicas of this release follow it
        g = groups[0]
        leader = g.wait_leader()
        back, other = [r for r in g.replicas if r.endpoint != leader.endpoint]
        restart_as(g, back, old_program)
        time.sleep(2)
        stop(other)
        stop(g.replica(leader.endpoint))
        assert g.wait_leader(not_epoch=leader.epoch, timeout_s=30).endpoint == back.endpoint
        for r in (other, g.replica(leader.endpoint)):
            r.start()
        for r in (other, g.replica(leader.endpoint)):
            wait_caught_up(g, r)
        time.sleep(3)
        for load in loads:
            load.stop()
        drain(Path(sys.executable), run, "drain-a", groups[0].endpoints, "upa")
        drain(Path(sys.executable), run, "drain-b", groups[1].endpoints, "upb")
        with NativeClient(groups[1].endpoints, timeout_s=30) as client:
            committed = Counter(topic_bodies(client, "upb"))
        deadline = time.monotonic() + 300
        while not (query.run_once() and sum(query.bodies().values()) >= sum(committed.values())):
            assert time.monotonic() < deadline, "the Spark query did not catch up"
        read = query.bodies()
    finally:
        for g in groups:
            g.stop()
    result = check_run(run)
    print(result.verdict_line("rolling upgrade"), f"(upgrade of both groups took {upgraded_s:.1f}s; "
          f"clean stops that hung and were killed: {slow_stops or 'none'})")
    assert result.ok, result.summary()
    assert result.committed > 100, result.summary()
    print(f"Spark: {sum(read.values())} rows in {query.batches} batches ({query.failed} query runs failed "
          f"during restarts)")
    assert read == committed, "the Spark query read a message twice, skipped one, or read one not committed"
    assert set(read.values()) == {1}
