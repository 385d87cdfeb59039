"""Exactly-once through driver crashes: the Spark driver is SIGKILLed at chosen points and restarted.

Each run is a real driver process (tests/spark/crash_driver.py); the connector's
crash points kill it between two steps of the commit protocol. After the last,
uninterrupted restart, every input row must be in the output topic (and, for
the foreachBatch helper, in the SQLite table) exactly once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.spark.support import send_plain, send_transaction, topic_bodies, two_groups_with_a_queue_to_move
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.spark import faults

# Spark drivers killed -9 at the commit protocol's points: make test-faults, not the default suite
pytestmark = [pytest.mark.spark, pytest.mark.faults]

ROOT = Path(__file__).resolve().parents[2]
SINK_POINTS = ["sink.before_halves", "sink.after_halves", "sink.after_broker_commit"]
FOREACH_POINTS = ["fb.after_halves", "fb.after_local_transaction", "fb.after_broker_commit"]


def run_driver(env: dict, log: Path, *args: str, crash_at: str | None = None, timeout_s: float = 300) -> int:
    env = dict(env)
    env.pop("TXMQ_SPARK_CRASH_AT", None)
    if crash_at:
        env["TXMQ_SPARK_CRASH_AT"] = crash_at
    with open(log, "a") as out:
        out.write(f"\n=== {time.strftime('%H:%M:%S')} run crash_at={crash_at}\n")
        out.flush()
        proc = subprocess.Popen([sys.executable, "-m", "tests.spark.crash_driver", *args], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout_s)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def fill_source(client, topic: str, n: int) -> list[bytes]:
    expected = []
    for i in range(0, n, 6):  # a mix of plain sends and multi-queue transactions
        bodies = [b"row-%04d" % j for j in range(i, min(n, i + 6))]
        (send_transaction if i % 12 else send_plain)(client, topic, bodies)
        expected.extend(bodies)
    return expected


def log_tail(log: Path, lines: int = 60) -> str:
    kept = [ln for ln in log.read_text(errors="replace").splitlines()
            if not ln.lstrip().startswith("at ") and "[Stage" not in ln]
    return "\n".join(kept[-lines:])


def kill_and_restart(env, log, args, crashes: list[str]) -> None:
    for crash_at in crashes:
        rc = run_driver(env, log, *args, crash_at=crash_at)
        assert rc == -signal.SIGKILL, f"the driver was to die at {crash_at} but exited {rc}:\n{log_tail(log)}"
    rc = run_driver(env, log, *args)
    assert rc == 0, f"the final run exited {rc}:\n{log_tail(log)}"


def sink_schedule(rng: random.Random, kills: int) -> list[str]:
    """`kills` crash points, three per batch, in an order every one of them is reached.

    Within a batch the points are sorted in protocol order: once the batch's
    transaction committed, a replay no longer sends halves.
    """
    order = {p: i for i, p in enumerate(SINK_POINTS)}
    out = []
    for batch in range((kills + 2) // 3):
        points = sorted((rng.choice(SINK_POINTS) for _ in range(3)), key=order.get)
        out.extend(f"{p}:{batch}" for p in points)
    return out[:kills]


def foreach_schedule(rng: random.Random, kills: int) -> list[str]:
    """Two crash points per batch: after the halves, then anywhere (a batch whose local
    transaction committed is settled by its replay without reaching a crash point again)."""
    out = []
    for batch in range((kills + 1) // 2):
        out += [f"fb.after_halves:{batch}", f"{rng.choice(FOREACH_POINTS)}:{batch}"]
    return out[:kills]


def sink_scenario(spark_env, spark_broker, client, tmp_path, crashes: list[str], rows: int = 60,
                  checkpoint: str | None = None, extra: list[str] = ()) -> None:
    src, dst = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    client.create_topic(src, 4)
    client.create_topic(dst, 4)
    expected = fill_source(client, src, rows)
    args = ["--mode", "sink", "--broker", spark_broker.endpoint, "--src", src, "--dst", dst,
            "--checkpoint", checkpoint or str(tmp_path / "ckpt"), *extra]
    kill_and_restart(spark_env, tmp_path / "driver.log", args, crashes)
    got = Counter(topic_bodies(client, dst))
    assert sorted(got.elements()) == sorted(expected), "lost or duplicated rows"


def foreach_scenario(spark_env, spark_broker, client, tmp_path, crashes: list[str], rows: int = 60,
                     checkpoint: str | None = None, extra: list[str] = ()) -> None:
    src, dst = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    client.create_topic(src, 4)
    client.create_topic(dst, 4)
    expected = fill_source(client, src, rows)
    db = tmp_path / "local.db"
    args = ["--mode", "foreach", "--broker", spark_broker.endpoint, "--src", src, "--dst", dst,
            "--checkpoint", checkpoint or str(tmp_path / "ckpt"), "--db", str(db), *extra]
    kill_and_restart(spark_env, tmp_path / "driver.log", args, crashes)
    con = sqlite3.connect(db)
    in_db = sorted(bytes(r[0]) for r in con.execute("SELECT body FROM rows"))
    con.close()
    assert in_db == sorted(expected), "the database lost or repeated rows"
    assert sorted(topic_bodies(client, dst)) == in_db, "database rows and committed messages differ"


def test_sink_survives_driver_kills_where_the_broker_holds_halves_or_a_commit_spark_has_not_logged(
        spark_env, spark_broker, client, tmp_path):
    # the two points that leave broker state behind for the restart to settle: halves pending
    # (replay rolls them back and resends) and a commit Spark's log lacks (replay must not resend)
    sink_scenario(spark_env, spark_broker, client, tmp_path,
                  ["sink.after_halves:0", "sink.after_broker_commit:1"], rows=20)


# One driver start more than the test above: before_halves leaves nothing on the broker (the probe
# only reads), so its replay is a fresh batch's; kept here and in the thirty-kill torture run.
@pytest.mark.slow
def test_sink_survives_driver_kills_at_each_protocol_point(spark_env, spark_broker, client, tmp_path):
    # one query, killed once at each point (in different batches), then run to the end
    sink_scenario(spark_env, spark_broker, client, tmp_path,
                  ["sink.before_halves:0", "sink.after_halves:1", "sink.after_broker_commit:2"], rows=30)


@pytest.mark.slow  # ~4 driver starts; run with -m slow (the sink's kill test above covers CI)
def test_foreach_batch_helper_keeps_database_and_topic_one_to_one_through_kills(
        spark_env, spark_broker, client, tmp_path):
    foreach_scenario(spark_env, spark_broker, client, tmp_path,
                     ["fb.after_halves:0", "fb.after_local_transaction:1"], rows=24)


# Thirty-one driver starts (a JVM and a SparkSession each, ~1 min on a loaded machine)
# need far more than the suite's default 600 s per test.
TORTURE_TIMEOUT_S = 3600


@pytest.mark.torture
@pytest.mark.timeout(TORTURE_TIMEOUT_S)
def test_sink_survives_thirty_random_driver_kills(spark_env, spark_broker, client, tmp_path):
    rng = random.Random(int(os.environ.get("TXMQ_TORTURE_SEED", "5")))
    sink_scenario(spark_env, spark_broker, client, tmp_path, sink_schedule(rng, 30), rows=120)


@pytest.mark.torture
@pytest.mark.timeout(TORTURE_TIMEOUT_S)
def test_foreach_batch_helper_survives_thirty_random_driver_kills(spark_env, spark_broker, client, tmp_path):
    rng = random.Random(int(os.environ.get("TXMQ_TORTURE_SEED", "7")))
    foreach_scenario(spark_env, spark_broker, client, tmp_path, foreach_schedule(rng, 30), rows=160)


@pytest.mark.slow  # ~2-3 min per point: three groups, two driver starts, a queue moved between two tasks
@pytest.mark.parametrize("point", ["sink.after_decision", "sink.between_parts"])
def test_sink_batch_committed_in_two_parts_is_exactly_once_when_the_driver_dies_before_or_between_them(
        spark_env, group_factory, tmp_path, point):
    """A queue moves between two tasks of batch 0, so it commits in two parts; the driver is killed
    after recording the batch's decision, or with its first part committed: the restart finishes the
    batch with the dead run's senders and writes nothing twice."""
    slow_checks = ["--replication", "async", "--transaction-timeout", "60s", "--check-interval", "30s"]
    endpoints, moving = two_groups_with_a_queue_to_move(group_factory, ("ka", "kb"), slow_checks, "ksrc", "kdst")
    with ClusterClient(endpoints) as cluster:
        expected = [b"row-%04d" % i for i in range(40)]
        cluster.send([Message("ksrc", x) for x in expected], topic="ksrc")
    c = group_factory("kc", replicas=1, args=slow_checks)
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    (pauses / "sink.before_halves").touch()  # the batch's first two tasks wait before their halves
    env = {**spark_env, faults.ENV_PAUSE_DIR: str(pauses), "TXMQ_SPARK_CRASH_AT": f"{point}:0"}
    args = ["--mode", "sink", "--broker", endpoints, "--src", "ksrc", "--dst", "kdst",
            "--checkpoint", str(tmp_path / "ckpt"), "--max-per-trigger", "1000", "--repartition", "4"]
    log = tmp_path / "driver.log"
    with open(log, "a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.spark.crash_driver", *args], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while len(list(pauses.glob("sink.before_halves.p*"))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, f"no task held:\n{log_tail(log)}"
            time.sleep(0.2)
        with NativeClient(c.endpoints) as admin:
            result = admin.move_queues(topic="kdst", queue=f"{moving[0]}:{moving[1]}", to="kc", wait_s=60)
        assert [m["state"] for m in result["moves"]] == ["done"]
        time.sleep(2)  # the brokers' cached routes (up to 0.5 s old) show the move to the tasks that start next
        (pauses / "sink.before_halves.release").touch()
        assert proc.wait(240) == -signal.SIGKILL, f"the driver was to die at {point}:\n{log_tail(log)}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    decision = json.loads((tmp_path / "ckpt" / "txmq-sink" / "decision.json").read_bytes())
    assert decision["batch"] == 0 and len(decision["parts"]) == 2, decision
    (pauses / "sink.before_halves").unlink()
    rc = run_driver({**spark_env, faults.ENV_PAUSE_DIR: str(pauses)}, log, *args)
    assert rc == 0, f"the restart exited {rc}:\n{log_tail(log)}"
    with ClusterClient(f"{endpoints};{c.endpoints}") as cluster:
        got = Counter(topic_bodies(cluster, "kdst"))
    assert sorted(got.elements()) == sorted(expected), "lost or duplicated rows"
