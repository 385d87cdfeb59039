"""txmq on a Spark standalone cluster whose executors live on other hosts (`make spark-cluster-test`).

The lab (lab/hosts.py) gives each machine a network namespace of its own on a bridge: the broker,
the driver (beside the Spark master), a client host (producer, checks) and two one-core workers,
which also run in a private mount namespace where the source tree and the driver's environment are
hidden. The workers have a Spark install and a system python3 without pyarrow: their executors get
txmq only from the packed environment the driver ships (docs/spark.md, "Running on a Spark cluster").
"""

from __future__ import annotations

import json
import os
import queue
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.spark import standalone

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(1800)]  # a first run builds the environment

JOBS = Path(__file__).parent / "cluster_jobs"
BROKER_PORT = 8081
READ_ROWS = 200_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        from lab import hosts
    except ImportError:
        pytest.skip("the lab (lab/hosts.py) is not in this checkout")
    reason = hosts.available()
    if reason:
        pytest.skip(reason)
    if not (Path(sys.executable).parent / "venv-pack").exists():
        pytest.skip("venv-pack is not installed (pip install 'txmq[test]')")
    hosts.cleanup_stale()
    root = tmp_path_factory.mktemp("spark-cluster")
    archive, venv = standalone.packed_environment()
    spark_home = standalone.spark_install(venv, root / "spark")
    driver_dir = root / "driver"
    standalone.unpack(archive, driver_dir / "environment")
    os.link(archive, driver_dir / "txmq_env.tar.gz")  # the driver host has the archive, not the source tree
    archive = driver_dir / "txmq_env.tar.gz"
    for job in ("read_job.py", "stream_job.py", "fb_job.py"):
        (driver_dir / job).write_bytes((JOBS / job).read_bytes())
    hidden = [str(standalone.REPO), str(driver_dir)]  # the source tree holds the test's venv too
    with hosts.Lab("spk") as lab:
        broker = lab.host("broker")
        driver = lab.host("driver", hide=[str(standalone.REPO)])
        app = lab.host("app")
        workers = [lab.host(f"w{i}", hide=hidden) for i in (1, 2)]
        # The broker listens on every address of its host and names its lab address in routes.
        broker.popen([str(Path(sys.executable).parent / "txmq"), "broker", "start", "--data-dir", str(broker.disk / "d"),
                      "--listen", f"0.0.0.0:{BROKER_PORT}", "--advertised-host", broker.addr],
                     env={**os.environ, "PYTHONPATH": str(standalone.REPO)}, cwd=standalone.REPO)
        spark = standalone.StandaloneCluster(driver, workers, spark_home)
        spark.start()
        yield Cluster(lab, broker, driver, app, workers, spark, archive, driver_dir, root)


class Cluster:
    def __init__(self, lab, broker, driver, app, workers, spark, archive, driver_dir, root):
        self.lab, self.broker, self.driver, self.app, self.workers = lab, broker, driver, app, workers
        self.spark, self.archive, self.driver_dir, self.root = spark, archive, driver_dir, root
        self.endpoint = f"{broker.addr}:{BROKER_PORT}"

    def client(self, *args: str, timeout: float = 300) -> dict:
        """Run a client task on the app host (tests/spark/cluster_jobs/client_tasks.py)."""
        done = self.app.run([sys.executable, str(JOBS / "client_tasks.py"), "--broker", self.endpoint, *args],
                            env={**os.environ, "PYTHONPATH": str(standalone.REPO)}, timeout=timeout)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    def wait_broker(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            done = self.app.run([sys.executable, "-c", "import sys; from txmq.broker.client.native_client import "
                                 "NativeClient; NativeClient(sys.argv[1], timeout_s=3).list_topics()", self.endpoint],
                                env={**os.environ, "PYTHONPATH": str(standalone.REPO)})
            if done.returncode == 0:
                return
            assert time.monotonic() < deadline, done.stderr[-2000:]
            time.sleep(1)

    def submit(self, job: str, *args: str, master: str | None = None, env: dict | None = None) -> subprocess.Popen:
        """spark-submit on the driver host exactly as docs/spark.md says: the archive shipped to the
        executors, PYSPARK_PYTHON naming its python, the same environment unpacked beside the job."""
        argv = [str(self.spark.spark_home / "bin" / "spark-submit"), "--master", master or self.spark.url,
                "--archives", f"{self.archive}#environment",
                "--conf", f"spark.driver.host={self.driver.addr}",
                "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g",
                "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
                job, *args]
        full = standalone.host_env(self.driver, self.spark.spark_home, PYSPARK_PYTHON="./environment/bin/python")
        full.update(env or {})
        logs = standalone.CACHE / "logs"  # kept after the run (gitignored), for a failure's post-mortem
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{Path(job).stem}-{time.strftime('%H%M%S')}.log"
        with open(log, "wb") as out:
            proc = self.driver.popen(argv, env=full, cwd=self.driver_dir, stdout=out)
        proc.log = log  # where finished() and the checks find the driver's output
        return proc


_STARTED = re.compile(r"Starting task [\d.]+ in stage [\d.]+ \(TID (\d+)\) \(([\d.]+),\s*executor \d+, partition (\d+)")
_ENDED = re.compile(r"(?:Finished|Lost) task [\d.]+ in stage [\d.]+ \(TID (\d+)\)")


def running_tasks(log: Path) -> set[tuple[str, int]]:
    """(executor host, partition) of the tasks the driver's log shows started and not yet ended."""
    started, ended = {}, set()
    for line in log.read_text(errors="replace").splitlines():
        if m := _STARTED.search(line):
            started[m.group(1)] = (m.group(2), int(m.group(3)))
        elif m := _ENDED.search(line):
            ended.add(m.group(1))
    return {task for tid, task in started.items() if tid not in ended}


def excerpt(log: Path) -> str:
    """The errors of a driver's log (not their stack frames), then its end."""
    lines = log.read_text(errors="replace").splitlines()
    errors = [x for x in lines if ("Error" in x or "Exception" in x) and not x.lstrip().startswith("at ")]
    return "\n".join(errors[:20] + ["..."] + lines[-30:])


def finished(proc: subprocess.Popen, timeout_s: float, what: str) -> None:
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{what} did not finish in {timeout_s} s")
    assert rc == 0, f"{what} failed ({rc}): {excerpt(proc.log)}"


def test_a_batch_read_on_the_cluster_reads_every_message_once(cluster):
    cluster.wait_broker()
    cluster.client("fill", "big", str(READ_ROWS))
    results = {}
    for name, master in (("cluster", None), ("local[2]", "local[2]")):
        out = cluster.driver_dir / f"read-{name}.json"
        finished(cluster.submit("read_job.py", cluster.endpoint, "big", str(READ_ROWS), str(out), master=master),
                 600, f"the {name} read")
        results[name] = json.loads(out.read_text())
    for name, r in results.items():
        print(f"batch read of {r['rows']} rows on {name}: {r['seconds']:.2f} s, {r['rows_per_s']:,.0f} rows/s")
    assert results["cluster"]["rows"] == READ_ROWS
    assert results["cluster"]["distinct"] == READ_ROWS, "a message was read twice or not at all"
    assert results["local[2]"]["rows"] == READ_ROWS
    (cluster.root / "read-figures.json").write_text(json.dumps(results))


def test_a_streaming_pipeline_stays_exactly_once_when_an_executor_dies_while_its_task_sends_halves(cluster):
    cluster.wait_broker()
    cluster.client("create", "out", "--queues", "2")
    cluster.client("create", "orders", "--queues", "2")
    stop, result = cluster.driver_dir / "stream.stop", cluster.driver_dir / "stream.json"
    job = cluster.submit("stream_job.py", cluster.endpoint, "orders", "out", str(cluster.driver_dir / "chk"),
                         str(stop), str(result))
    watcher = cluster.app.popen([sys.executable, str(JOBS / "client_tasks.py"), "--broker", cluster.endpoint,
                                 "watch", "out"], env={**os.environ, "PYTHONPATH": str(standalone.REPO)},
                                stdout=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    last_seen: dict[str, dict] = {}  # every pending sink transaction as last seen (its senders only grow)

    def read_watcher() -> None:
        for line in watcher.stdout:
            snapshot = json.loads(line)
            for tx in snapshot["pending"]:
                last_seen[tx["tx"]] = tx
            lines.put(snapshot)

    threading.Thread(target=read_watcher, daemon=True).start()
    produced: dict = {}
    producer = threading.Thread(target=lambda: produced.update(
        cluster.client("produce", "orders", "160", "100", "--pause", "0.05")))
    producer.start()

    # Kill the executor of a worker whose sink task is still running (the driver's log says which tasks
    # started and have not finished) and has already sent halves (its sender is in the pending transaction).
    killed = None
    seen: dict[str, int] = {}
    deadline = time.monotonic() + 300
    while killed is None:
        assert time.monotonic() < deadline, "no running sink task was ever seen sending halves"
        assert job.poll() is None, excerpt(job.log)
        snapshot = lines.get(timeout=60)
        running = running_tasks(job.log)
        for tx in snapshot["pending"]:
            growing = tx["halves"] > seen.get(tx["tx"], tx["halves"])
            seen[tx["tx"]] = tx["halves"]
            sending = {int(s.split(".")[0][1:]) for s in tx["senders"] if ".a0." in s}
            target = next((w for w in cluster.workers for host, partition in running
                           if host == w.addr and partition in sending), None)
            if growing and target is not None and cluster.spark.executor_pids(target):
                cluster.spark.kill_executor(target)
                killed = tx
                break
    producer.join(300)
    committed = produced["committed"]

    # The query goes on (Spark retries the lost tasks elsewhere): wait until the sink holds every committed input.
    deadline = time.monotonic() + 400
    while True:
        out = cluster.client("dump", "out", "--tx", killed["tx"])
        if len(out["rows"]) >= len(committed) or time.monotonic() > deadline:
            break
        assert job.poll() is None, excerpt(job.log)
        time.sleep(3)
    watcher.kill()
    stop.write_text("stop")
    finished(job, 120, "the streaming driver")
    outcome = json.loads(result.read_text())

    assert outcome["error"] is None and outcome["active_until_stopped"], outcome
    assert outcome["run_id_unchanged"], "the query restarted"
    assert Counter(body for body, _ in out["rows"]) == Counter(f"T:{b}" for b in committed), \
        "a committed input is missing from the sink topic or is there twice"
    # The batch's transaction committed with a retried partition: the attempt that had sent halves when
    # its executor died (p<k>.a0) and its retry (p<k>.a1) both sent halves, and the sink holds each row once: the lost attempt's halves were rolled back.
    final = last_seen[killed["tx"]]
    in_sink = sum(1 for _, t in out["rows"] if t == killed["tx"])
    print(f"executor killed while {killed['tx']} had {killed['halves']} halves from {killed['senders']}; "
          f"before its COMMIT: {final['halves']} halves from {final['senders']}; {in_sink} rows committed")
    assert out["transactions"][killed["tx"]]["state"] == "COMMITTED"
    attempts = {}
    for sender in final["senders"]:
        partition, attempt, _ = sender.split(".", 2)
        attempts.setdefault(partition, set()).add(attempt)
    retried = [p for p, a in attempts.items() if {"a0", "a1"} <= a]
    assert retried, f"no partition of the batch was retried: {final['senders']}"
    assert any(s.startswith(f"{p}.a0.") for p in retried for s in killed["senders"]), \
        "the lost attempt had sent no halves when its executor died"


def test_the_foreach_batch_helper_on_the_cluster_commits_each_batch_with_its_local_transaction(cluster):
    cluster.wait_broker()
    cluster.client("create", "fbout", "--queues", "2")
    produced = cluster.client("produce", "fbin", "40", "100", "--pause", "0.05")
    committed = produced["committed"]
    stop, result, db = (cluster.driver_dir / "fb.stop", cluster.driver_dir / "fb.json", cluster.driver_dir / "fb.db")
    job = cluster.submit("fb_job.py", cluster.endpoint, "fbin", "fbout", str(cluster.driver_dir / "fbchk"), str(db),
                         str(stop), str(result))
    deadline = time.monotonic() + 400
    while True:
        out = cluster.client("dump", "fbout")
        if len(out["rows"]) >= len(committed):
            break
        assert time.monotonic() < deadline, f"{len(out['rows'])} of {len(committed)} rows in the topic"
        assert job.poll() is None, excerpt(job.log)
        time.sleep(3)
    stop.write_text("stop")
    finished(job, 120, "the foreachBatch driver")
    assert json.loads(result.read_text())["error"] is None
    with sqlite3.connect(db) as con:
        in_db = Counter(body for (body,) in con.execute("SELECT body FROM rows"))
    assert in_db == Counter(committed), "the local transactions wrote a row twice or lost one"
    assert Counter(body for body, _ in out["rows"]) == Counter(committed), "the topic holds a row twice or lacks one"
