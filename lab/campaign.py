"""A campaign: a 3-replica broker group, etcd and clients, each on a lab host of its own, through faults.

`python -m lab.campaign [--faults a,b,...] [--rounds N]` (what `make lab` runs) starts etcd, three
replicas of one group and the clients (native writers with check-back, a consumer), applies each fault
for a while and heals it, several rounds each, then drains every queue and runs lab.checker over what the
clients saw. It prints one verdict line and keeps everything in a run directory: histories (JSON lines),
faults.jsonl (when each fault began and ended), each host's logs, checker.json and summary.json.

Every run is bounded (rounds x (hold + recovery) plus fixed start and drain times) and removes its
namespaces, mounts and processes on exit, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab import checker, faults
from lab.hosts import Host, Lab

ROOT = Path(__file__).resolve().parent.parent
PORT = 8081
ETCD_PORT = 2379
OFFICIAL_PYTHON = ROOT / ".venv-rocketmq" / "bin" / "python"
OFFICIAL_REQUEST_TIMEOUT_S = 3  # the official Python client's own default (ClientConfiguration.request_timeout)
READY = re.compile(r"txmq (?:broker|replica) ready on (\S+):(\d+)")


def python() -> str:
    """The driver's interpreter: the project's venv, visible on every host that does not hide it."""
    return sys.executable


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Group:
    """etcd and the replicas of one broker group, each on its own host of `lab`."""

    def __init__(self, lab: Lab, name: str = "g", *, replicas: int = 3, disk_mb: int | None = None,
                 args: list[str] | None = None, faketime: bool = False, around: "Group | None" = None):
        """`around`: a group of the same cluster whose etcd and ctl hosts this one shares (its
        replicas' hosts are then named after the group)."""
        self.lab = lab
        self.name = name
        self.own_etcd = around is None
        self.etcd_host = lab.host("etcd") if around is None else around.etcd_host
        self.disk_mb = disk_mb
        prefix = "" if around is None else name
        self.replicas = [lab.host(f"{prefix}r{i + 1}", tmpfs_mb=disk_mb) for i in range(replicas)]
        self.removed: list[Host] = []  # replicas taken out of the group (membership faults)
        self.ctl = lab.host("ctl") if around is None else around.ctl
        self.args = list(args or [])
        self.faketime = faketime
        self.started: dict[str, float] = {}
        self.procs: dict[str, subprocess.Popen] = {}  # each replica's latest process

    def died(self) -> dict[str, int]:
        """The replicas of the group whose process ended without a fault killing it (exit codes)."""
        return {r.name: p.returncode for r in self.replicas
                if (p := self.procs.get(r.name)) is not None and p.poll() is not None}

    @property
    def etcd(self) -> str:
        return f"{self.etcd_host.addr}:{ETCD_PORT}"

    @property
    def endpoints(self) -> str:
        return ";".join(self.endpoint(r) for r in self.replicas)

    @staticmethod
    def endpoint(host: Host) -> str:
        return f"{host.addr}:{PORT}"

    def start_etcd(self) -> None:
        h = self.etcd_host
        client, peer = f"http://{h.addr}:{ETCD_PORT}", f"http://{h.addr}:2380"
        h.popen(["etcd", "--name", "lab", "--data-dir", str(h.disk / "etcd"), "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"lab={peer}", "--heartbeat-interval", "50", "--election-timeout", "500"])
        probe = f"import urllib.request,sys; sys.exit(0 if b'true' in urllib.request.urlopen('{client}/health', timeout=1).read() else 1)"
        if not faults.wait_until(lambda: self.ctl.run([python(), "-c", probe], timeout=10).returncode == 0, 30, 0.3):
            raise RuntimeError("etcd on its lab host did not become healthy")

    def start_replica(self, host: Host, *, extra: list[str] | None = None, wait: bool = True) -> None:
        log = host.log_dir / "broker.log"
        start_size = log.stat().st_size if log.exists() else 0
        argv = [python(), "-m", "txmq.broker.server", "--data-dir", str(host.disk / "data"),
                "--listen", self.endpoint(host), "--flush", "async", "--etcd", self.etcd, "--group", self.name,
                "--log-level", "INFO", "--transaction-timeout", "1s", "--check-interval", "1s",
                *self.args, *(extra or [])]
        with open(log, "ab") as out:
            self.procs[host.name] = host.popen(argv, env=base_env(), stdout=out,
                                               faketime="+0" if self.faketime else None)
        self.started[host.name] = time.time()
        if wait and not faults.wait_until(lambda: READY.search(log.read_bytes()[start_size:].decode(errors="replace")), 60, 0.1):
            raise RuntimeError(f"replica {host.name} did not start:\n{log.read_text()[-3000:]}")

    def remove_replica(self, host: Host) -> None:
        """Take `host` out of the group for good: its data directory's entry in etcd's registry (which
        sizes the group) is deleted; the replica must be stopped first."""
        key = f"/txmq/groups/{self.name}/replicas/{self.endpoint(host)}"
        self.ctl_python("from txmq.broker.cluster.coordination import EtcdGroup\n"
                        f"EtcdGroup([({self.etcd_host.addr!r}, {ETCD_PORT})], {self.name!r}, 2).delete({key!r})\n"
                        "print(1)")
        self.replicas.remove(host)
        self.removed.append(host)

    def add_replica(self, host: Host | None = None, *, wait: bool = True) -> Host:
        """A replica with an empty disk joining the running group: on a new host, or on `host` (one
        removed before, its disk wiped)."""
        if host is None:
            host = self.lab.host(f"r{len(self.replicas) + len(self.removed) + 1}", tmpfs_mb=self.disk_mb)
        else:
            self.removed.remove(host)
        self.replicas.append(host)
        self.start_replica(host, wait=wait)
        return host

    def start(self) -> Group:
        if self.own_etcd:
            self.start_etcd()
        for r in self.replicas:
            self.start_replica(r)
        self.wait_leader()
        return self

    def ctl_python(self, code: str, timeout: float = 30) -> Any:
        """Run `code` (which prints JSON) on the ctl host with the project importable; its parsed output."""
        done = self.ctl.run([python(), "-c", code], env=base_env(), timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"ctl: {done.stderr[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def status(self) -> dict[str, Any]:
        host, port = self.etcd_host.addr, ETCD_PORT
        code = ("import json; from txmq.broker.cluster.coordination import cluster_status; "
                f"print(json.dumps(cluster_status([('{host}', {port})], '{self.name}')['groups'].get('{self.name}', {{}})))")
        return self.ctl_python(code)

    def wait_leader(self, *, not_epoch: int | None = None, timeout_s: float = 30.0) -> tuple[Host, int]:
        end = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < end:
            try:
                last = self.status()
            except Exception as exc:  # etcd cut off from ctl, or starting
                last = {"error": str(exc)[-300:]}
            leader = last.get("leader")
            if leader and (not_epoch is None or last.get("epoch", 0) > not_epoch):
                return self.host_of(leader), last["epoch"]
            time.sleep(0.3)
        raise RuntimeError(f"no leader within {timeout_s}s: {last}")

    def host_of(self, endpoint: str) -> Host:
        return next(r for r in self.replicas if self.endpoint(r) == endpoint)

    def wait_in_sync(self, n: int, timeout_s: float = 30.0) -> bool:
        def enough() -> bool:
            try:
                return sum(m["in_sync"] and m["alive"] for m in self.status().get("members", [])) >= n
            except Exception:
                return False

        return faults.wait_until(enough, timeout_s, 0.5)

    def log_ends(self) -> dict[str, int | None]:
        return {m["endpoint"]: m["log_end"] for m in self.status().get("members", [])}

    def commitlog_bytes(self, host: Host, end: int) -> bytes:
        """The replica's CommitLog up to `end`, each segment file at the offset its name gives (a file
        may be shorter than a segment: space is reserved ahead in steps)."""
        out = bytearray(end)
        for f in sorted((host.disk / "data" / "commitlog").iterdir()):
            if f.name.isdigit() and len(f.name) == 20 and int(f.name) < end:
                data = f.read_bytes()[:end - int(f.name)]
                out[int(f.name):int(f.name) + len(data)] = data
        return bytes(out)

    def create_topic(self, topic: str, queues: int = 4) -> None:
        code = ("from txmq.broker.client.native_client import NativeClient\n"
                f"c = NativeClient({self.endpoints!r}, timeout_s=20)\n"
                f"c.create_topic({topic!r}, {queues})\nprint(1)")
        self.ctl_python(code, timeout=60)


@dataclass
class Fault:
    """A named fault: `apply` breaks something and returns what heals it."""

    name: str
    apply: Callable[[Group, list[Host], Host], Callable[[], None]]
    partition: bool = True  # a network fault (its failover time counts towards the partition target)


def _followers(group: Group, leader: Host) -> list[Host]:
    return [r for r in group.replicas if r is not leader]


def _heal_net(group: Group) -> Callable[[], None]:
    return lambda: faults.heal(group.lab)


def f_leader_isolated(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.isolate(leader)
    return _heal_net(group)


def f_leader_cut_from_etcd(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.partition(group.lab, [leader], [group.etcd_host])
    return _heal_net(group)


def f_leader_cut_from_followers(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.partition(group.lab, [leader], _followers(group, leader))
    return _heal_net(group)


def f_leader_to_followers_dropped(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    # one way: the leader's packets to its followers vanish, theirs to it arrive (etcd and clients reach it)
    faults.partition(group.lab, [leader], _followers(group, leader), one_way=True)
    return _heal_net(group)


def f_client_cut_from_leader(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.partition(group.lab, clients, [leader])
    return _heal_net(group)


def f_follower_isolated(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.isolate(_followers(group, leader)[0])
    return _heal_net(group)


def f_one_way_from_leader(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.partition(group.lab, [leader], [h for h in group.lab.hosts.values() if h is not leader], one_way=True)
    return _heal_net(group)


def f_rolling(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    # Each replica isolated in turn for 2 s: the group must keep a leader through every step.
    for r in group.replicas:
        faults.isolate(r)
        time.sleep(2)
        faults.heal(group.lab)
    return lambda: None


def f_pause_leader(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.pause(leader)
    return lambda: faults.resume(leader)


def f_kill9_leader(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.kill9(leader)
    return lambda: group.start_replica(leader)


def f_kill9_leader_followers_split(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    """The leader killed while its followers, in pairs, cannot reach each other: whichever is
    elected cannot reach its pair's other, alive and in etcd's in-sync set. In a group of five
    (four followers, two pairs) the new leader still reaches two followers to acknowledge with."""
    followers = _followers(group, leader)
    for a, b in zip(followers[0::2], followers[1::2]):
        faults.partition(group.lab, [a], [b])
    faults.kill9(leader)

    def heal() -> None:
        faults.heal(group.lab)
        group.start_replica(leader)

    return heal


def f_clock_jump_leader(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.clock_jump(leader, 120)
    return lambda: faults.clock_jump(leader, -120)


def f_wiped_follower(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    victim = _followers(group, leader)[0]
    faults.kill9(victim)
    faults.wipe_disk(victim)
    return lambda: group.start_replica(victim)


def f_replace_follower(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    """Membership changes in a running group: a follower removed (killed, its entry in etcd's registry
    of the group deleted, as docs/replication.md says to shrink a group) and a replacement with an
    empty disk added on a new host, an address no client was given. At the heal the newcomer is
    removed in turn and the old host comes back with an empty disk, so that the clients, given r1..r3
    at the start, again have every replica's endpoint for the faults that follow."""
    victim = _followers(group, leader)[0]
    faults.kill9(victim)
    group.remove_replica(victim)
    newcomer = group.add_replica(wait=False)

    def heal() -> None:
        group.wait_in_sync(len(group.replicas), 20)  # the newcomer joined (else it is removed unsynced)
        faults.kill9(newcomer)
        group.remove_replica(newcomer)
        faults.wipe_disk(victim)
        group.add_replica(victim)

    return heal


def f_full_disk_leader(group: Group, clients: list[Host], leader: Host) -> Callable[[], None]:
    faults.fill_disk(leader, leave_bytes=64 << 10)
    return lambda: faults.free_disk(leader)


FAULTS = {f.name: f for f in [
    Fault("leader-isolated", f_leader_isolated),
    Fault("leader-cut-from-etcd", f_leader_cut_from_etcd),
    Fault("leader-cut-from-followers", f_leader_cut_from_followers),
    Fault("leader-to-followers-dropped", f_leader_to_followers_dropped),
    Fault("client-cut-from-leader", f_client_cut_from_leader),
    Fault("follower-isolated", f_follower_isolated),
    Fault("one-way-from-leader", f_one_way_from_leader),
    Fault("rolling-partitions", f_rolling, partition=False),  # its clock starts at the first of three steps
    Fault("pause-leader", f_pause_leader, partition=False),
    Fault("kill9-leader", f_kill9_leader, partition=False),
    Fault("kill9-leader-followers-split", f_kill9_leader_followers_split, partition=False),
    Fault("clock-jump-leader", f_clock_jump_leader, partition=False),
    Fault("wiped-follower", f_wiped_follower, partition=False),
    Fault("full-disk-leader", f_full_disk_leader, partition=False),
    Fault("replace-follower", f_replace_follower, partition=False),
]}
SHORT = ["leader-isolated", "leader-cut-from-followers"]  # kill -9: tests/cluster/test_replication.py
FAILOVER_TARGET_S = 5.0


@dataclass
class Outcome:
    result: checker.Result
    run_dir: Path
    failover_s: dict[str, list[float]] = field(default_factory=dict)
    identical_logs: bool | None = None
    errors: list[str] = field(default_factory=list)
    query_batches_in_faults: int | None = None  # the Spark query's micro-batches finished while a fault held
    # per fault, seconds from its start to the query's first micro-batch with rows finished after it
    # (its sink's transaction committed: the sink found the group's leader again)
    query_first_batch_s: dict[str, list[float]] = field(default_factory=dict)

    def partition_failovers(self) -> list[float]:
        return sorted(t for name, ts in self.failover_s.items() if FAULTS[name].partition for t in ts)

    def failover_ok(self) -> bool:
        """The issue's target: a partition to the first acknowledged write, p99 <= 5 s."""
        ts = self.partition_failovers()
        return not ts or percentile(ts, 99) <= FAILOVER_TARGET_S

    def verdict_line(self) -> str:
        ts = self.partition_failovers()
        fo = (f"partition->first ack p50 {percentile(ts, 50):.2f}s p99 {percentile(ts, 99):.2f}s (n={len(ts)})"
              if ts else "no partition rounds")
        logs = {None: "logs not compared", True: "logs identical", False: "LOGS DIFFER"}[self.identical_logs]
        line = self.result.verdict_line()
        # A run in which nothing was acknowledged proves nothing, so it cannot pass.
        ok = (self.result.ok and self.result.committed > 0 and self.identical_logs is not False
              and not self.errors and self.failover_ok())
        head, _, _ = line.rpartition(" VERDICT")
        during = ("" if self.query_batches_in_faults is None
                  else f"; query batches during faults {self.query_batches_in_faults}")
        firsts = sorted(t for ts in self.query_first_batch_s.values() for t in ts)
        if firsts:
            during += (f"; fault->first query batch p50 {percentile(firsts, 50):.2f}s "
                       f"max {firsts[-1]:.2f}s (n={len(firsts)})")
        return f"{head}; {fo}{during}; {logs} VERDICT {'ok' if ok else 'FAIL'}"


def _acked_once(history: Path) -> bool:
    try:
        return '"type":"ok"' in history.read_text()
    except FileNotFoundError:
        return False


def keep_divergent_logs(logs: dict[str, bytes], where: Path) -> str:
    """Keep the replicas' CommitLogs (up to the common end) in `where` for a post-mortem; say where
    each differs first from the first replica's."""
    where.mkdir(parents=True, exist_ok=True)
    names = sorted(logs)
    first = logs[names[0]]
    said = []
    for name in names:
        (where / f"{name}.commitlog").write_bytes(logs[name])
        other = logs[name]
        n = min(len(first), len(other))
        chunk = next((c for c in range(0, n, 1 << 16) if first[c:c + (1 << 16)] != other[c:c + (1 << 16)]), None)
        at = (None if len(first) == len(other) else n) if chunk is None else \
            next(i for i in range(chunk, min(chunk + (1 << 16), n + 1)) if i == n or first[i] != other[i])
        said.append(f"{name} {'same' if at is None else f'differs from {names[0]} at byte {at}'}")
    return f"replicas' logs ({where}): " + "; ".join(said)


def _query_read_once(history: Path) -> bool:
    try:
        return any(json.loads(line).get("rows") for line in history.read_text().splitlines()
                   if '"query-progress"' in line)
    except (FileNotFoundError, json.JSONDecodeError):
        return False


def _settled(group: Group, quiet_s: float = 3.0) -> str | None:
    """Why the group's leadership has not settled once the faults healed (None: it has): one leader,
    and no election for `quiet_s` (an election storm raises the epoch again and again)."""
    try:
        before = group.status()
        time.sleep(quiet_s)
        after = group.status()
    except Exception as exc:
        return f"group status unreadable after the faults: {exc}"
    if not after.get("leader") or after.get("epoch") != before.get("epoch") or after["leader"] != before.get("leader"):
        return (f"leadership did not settle: leader {before.get('leader')} epoch {before.get('epoch')} -> "
                f"leader {after.get('leader')} epoch {after.get('epoch')} within {quiet_s:g}s")
    return None


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def first_ack_after(ops: list[dict[str, Any]], t: float) -> float | None:
    """Seconds from `t` to the first write begun after it and acknowledged (a send or an end answered ok);
    a call already in flight at `t` does not count."""
    times = [op["time"] for op in ops if op["type"] == "ok" and op["f"] in ("send", "commit", "rollback")
             and op["time"] - op.get("latency", 0.0) > t]
    return min(times) - t if times else None


def first_query_batch_after(ops: list[dict[str, Any]], t: float) -> float | None:
    """Seconds from `t` to the first micro-batch with rows the Spark query finished after it."""
    times = [op["time"] for op in ops if op["f"] == "query-progress" and op.get("rows") and op["time"] > t]
    return min(times) - t if times else None


def spark_available() -> str | None:
    """None, or why the Spark query cannot run here (pyspark in the project's venv, and a java)."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no java for Spark"
    return None


def query_batches_during(ops: list[dict[str, Any]], windows: list[tuple[float, float]]) -> int:
    """The Spark query's micro-batches that finished while a fault held."""
    return sum(1 for op in ops if op["f"] == "query-progress" and any(a <= op["time"] <= b for a, b in windows))


def run(run_dir: Path, fault_names: list[str], *, rounds: int = 2, hold_s: float = 8.0, recover_s: float = 6.0,
        writers: int = 2, with_consumer: bool = True, official: bool | None = None, query: bool = False,
        group_args: list[str] | None = None, replicas: int = 3, log=print) -> Outcome:
    """One campaign; bounded: about 40 s + rounds x len(faults) x (hold + recover + 8) s, and with the
    Spark query up to 4 min more for its start and its catching up."""
    run_dir.mkdir(parents=True, exist_ok=True)
    hist = run_dir / "histories"
    stop_file = run_dir / "stop"
    fault_log = open(run_dir / "faults.jsonl", "a", buffering=1)
    topic = "labt"
    outcome_errors: list[str] = []
    needs_faketime = "clock-jump-leader" in fault_names
    disk_mb = 256 if "full-disk-leader" in fault_names else None
    if official is None:  # the official client's own venv (make interop-venv), when there is one
        official = OFFICIAL_PYTHON.exists()
    query_stop = run_dir / "query-stop"
    # a fault's heal waits for a leader and for the in-sync set to recover, which on a loaded host takes
    # far beyond the hold and recovery themselves (docs/lab.md, the seventh pass)
    budget = 60 + rounds * len(fault_names) * (hold_s + recover_s + 30) + 60
    with Lab("camp", workdir=run_dir / "hosts") as lab:
        # the query's micro-batches may outlast --max-checks x --check-interval: its SinkCheckback answers
        # their check-backs IN_PROGRESS, which the broker does not count
        args = list(group_args or [])
        group = Group(lab, disk_mb=disk_mb, faketime=needs_faketime, args=args, replicas=replicas)
        clients = [lab.host(f"c{i + 1}") for i in range(writers + (1 if with_consumer else 0) + (2 if official else 0))]
        group.start()
        log(f"lab: group up, leader {group.wait_leader()[0].name}; etcd {group.etcd}; replicas {group.endpoints}")
        group.create_topic(topic)
        query_start_s = 600.0 if query else 0.0  # Spark took 3.5-6 min to start at a load average of 30 on 2 cores
        # a bound only: the writers stop at the stop file, and the faults may begin up to 90 s after the
        # writers start (waiting for their first acks) and then run for up to `budget`
        duration = 2 * budget + query_start_s
        procs = []
        query_proc = None
        if query:  # on a host of its own; it reads `topic` from the start while the writers write it
            group.create_topic(f"{topic}-out")
            qhost = lab.host("q1")
            with open(qhost.log_dir / "query.log", "ab") as out:
                query_proc = qhost.popen(
                    [python(), "-m", "lab.workloads", "query", "--endpoints", group.endpoints, "--topic", topic,
                     "--out-topic", f"{topic}-out", "--checkpoint", str(qhost.disk / "checkpoint"),
                     "--history", str(hist / "query.jsonl"), "--process", "query", "--query-stop-file",
                     str(query_stop), "--timeout", "5"], env=base_env(), stdout=out)
        for i in range(writers):
            procs.append(clients[i].popen(
                [python(), "-m", "lab.workloads", "native", "--endpoints", group.endpoints, "--topic", topic,
                 "--history", str(hist / f"w{i + 1}.jsonl"), "--process", f"w{i + 1}", "--duration", str(duration),
                 "--stop-file", str(stop_file), "--seed", str(i), "--timeout", "5"], env=base_env()))
        if with_consumer:
            procs.append(clients[writers].popen(
                [python(), "-m", "lab.workloads", "consumer", "--endpoints", group.endpoints, "--topic", topic,
                 "--history", str(hist / "consumer.jsonl"), "--process", "consumer", "--duration", str(duration),
                 "--stop-file", str(stop_file), "--timeout", "5"], env=base_env()))
        if official:  # plain sends, and transactions with check-back, each client on a host of its own
            for mode, host in (("official", clients[-2]), ("official-tx", clients[-1])):
                procs.append(host.popen(
                    [str(OFFICIAL_PYTHON), "-m", "lab.workloads", mode, "--endpoints", group.endpoints, "--topic",
                     topic, "--history", str(hist / f"{mode}.jsonl"), "--process", mode, "--duration",
                     str(duration), "--stop-file", str(stop_file), "--timeout", str(OFFICIAL_REQUEST_TIMEOUT_S)],
                    env=base_env()))
        # Each writer's first acknowledged write before the first fault: on a loaded machine a client can
        # take many seconds to start, and a fault's time to the first ack would count that start.
        writers_hist = [hist / f"w{i + 1}.jsonl" for i in range(writers)] + (
            [hist / "official.jsonl", hist / "official-tx.jsonl"] if official else [])
        if not faults.wait_until(lambda: all(_acked_once(p) for p in writers_hist), 90, 0.5):
            outcome_errors.append("a writer had no write acknowledged within 90 s of its start")
        # Spark takes a while to start: the faults begin once the query has finished a micro-batch.
        if query_proc is not None and not faults.wait_until(lambda: _query_read_once(hist / "query.jsonl"),
                                                           query_start_s, 1):
            outcome_errors.append(f"the Spark query finished no micro-batch within {query_start_s:g} s of its start")
        time.sleep(2)
        deadline = time.monotonic() + budget
        events: list[tuple[str, float]] = []
        windows: list[tuple[float, float]] = []
        for rnd in range(rounds):
            for name in fault_names:
                if time.monotonic() > deadline:
                    outcome_errors.append("time budget ran out before every round ran")
                    break
                fault = FAULTS[name]
                try:
                    leader = group.wait_leader(timeout_s=30)[0]
                    heal = fault.apply(group, clients, leader)
                    # The fault is in place once apply returns (a partition is one `ip` call per pair of
                    # hosts, ~0.2 s in all): calls begun before then may still be answered.
                    t0 = time.time()
                except Exception as exc:
                    outcome_errors.append(f"{name} round {rnd}: could not apply: {exc}")
                    log(f"lab: {name} round {rnd}: could not apply: {exc}")
                    faults.heal(lab)
                    continue
                fault_log.write(json.dumps({"fault": name, "round": rnd, "start": t0}) + "\n")
                events.append((name, t0))
                time.sleep(hold_s)
                try:
                    heal()
                except Exception as exc:
                    outcome_errors.append(f"{name} round {rnd}: could not heal: {exc}")
                faults.heal(lab)
                windows.append((t0, time.time()))
                fault_log.write(json.dumps({"fault": name, "round": rnd, "end": windows[-1][1]}) + "\n")
                try:
                    leader, epoch = group.wait_leader(timeout_s=30)
                    log(f"lab: {name} round {rnd}: healed; leader {leader.name} epoch {epoch}")
                except Exception as exc:
                    outcome_errors.append(f"{name} round {rnd}: no leader after heal: {exc}")
                    log(f"lab: {name} round {rnd}: NO LEADER after heal")
                time.sleep(recover_s)
        stop_file.write_text("stop\n")
        died = group.died()  # a fault kills and restarts a replica itself: any other end is a crash
        if died:
            outcome_errors.append(f"replicas died during the run (exit codes): {died}")
        for p in procs:
            try:
                if p.wait(timeout=60) != 0:
                    outcome_errors.append(f"a workload exited with {p.returncode} (see hosts/c*/logs)")
            except Exception:
                p.kill()
                outcome_errors.append("a workload did not stop within 60 s")
        # Check-back settles what the writers left: wait for the group to settle before the final read.
        group.wait_in_sync(len(group.replicas), 45)
        settled = _settled(group)
        if settled is not None:
            outcome_errors.append(settled)
        if query_proc is not None:  # the writers are done: the query catches up with its input and stops
            query_stop.write_text("stop\n")
            try:
                if query_proc.wait(timeout=300) != 0:
                    outcome_errors.append(f"the Spark query exited with {query_proc.returncode} (hosts/q1/logs)")
            except subprocess.TimeoutExpired:
                query_proc.kill()
                outcome_errors.append("the Spark query did not stop within 300 s")
        drain = group.ctl.run([python(), "-m", "lab.workloads", "drain", "--endpoints", group.endpoints, "--topic",
                               topic, "--history", str(hist / "drain.jsonl"), "--process", "drain", "--timeout", "20"],
                              env=base_env(), timeout=180)
        if drain.returncode != 0:
            outcome_errors.append(f"drain failed: {drain.stderr[-1500:]}")
        identical = None
        try:
            ends = group.log_ends()
            if len(set(ends.values())) == 1 and None not in ends.values():
                end = next(iter(ends.values()))
                logs = {r.name: group.commitlog_bytes(r, end) for r in group.replicas}
                identical = len(set(logs.values())) == 1
                if not identical:
                    log(f"lab: {keep_divergent_logs(logs, run_dir / 'divergent-logs')}")
            else:
                log(f"lab: replicas' log ends differ at the end: {ends}")
        except Exception as exc:
            outcome_errors.append(f"log comparison: {exc}")
    ops = checker.load(hist)
    result = checker.check_run(hist)
    if result.committed == 0:
        outcome_errors.append("no write was acknowledged: the campaign checked nothing")
    failover: dict[str, list[float]] = {}
    query_first: dict[str, list[float]] = {}
    for name, t0 in events:
        dt = first_ack_after(ops, t0)
        failover.setdefault(name, []).append(dt if dt is not None else float("inf"))
        if query:
            qt = first_query_batch_after(ops, t0)
            query_first.setdefault(name, []).append(qt if qt is not None else float("inf"))
    outcome = Outcome(result, run_dir, failover, identical, outcome_errors,
                      query_batches_during(ops, windows) if query else None, query_first)
    (run_dir / "summary.json").write_text(json.dumps({
        "verdict": outcome.verdict_line(), "checker": result.summary(), "failover_s": failover,
        "identical_logs": identical, "query_batches_in_faults": outcome.query_batches_in_faults,
        "query_first_batch_s": query_first,
        "errors": outcome_errors}, indent=1, default=str) + "\n")
    fault_log.close()
    return outcome


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.campaign", description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of: {', '.join(FAULTS)}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hold", type=float, default=8.0, help="seconds each fault lasts")
    p.add_argument("--recover", type=float, default=6.0, help="seconds between a heal and the next fault")
    p.add_argument("--run-dir", default=None)
    p.add_argument("--no-query", action="store_true", help="leave out the Spark txmq -> txmq query")
    args = p.parse_args(argv)
    from lab.hosts import available, cleanup_stale

    reason = available()
    if reason:
        print(f"lab: cannot run: {reason}")
        return 2
    cleanup_stale()
    names = [n.strip() for n in args.faults.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        p.error(f"unknown faults {unknown}")
    run_dir = Path(args.run_dir or ROOT / "lab-runs" / time.strftime("%Y%m%dT%H%M%S"))
    no_spark = "--no-query" if args.no_query else spark_available()
    if no_spark:
        print(f"lab: without the Spark query ({no_spark})")
    outcome = run(run_dir, names, rounds=args.rounds, hold_s=args.hold, recover_s=args.recover,
                  query=not no_spark)
    for name, ts in outcome.failover_s.items():
        print(f"lab: {name}: first ack after {', '.join(f'{t:.2f}s' for t in ts)}")
    for name, ts in outcome.query_first_batch_s.items():
        print(f"lab: {name}: first query micro-batch after {', '.join(f'{t:.2f}s' for t in ts)}")
    for e in outcome.errors:
        print(f"lab: error: {e}")
    print(f"lab: run directory {run_dir}")
    print(outcome.verdict_line())
    return 0 if "VERDICT ok" in outcome.verdict_line() else 1


if __name__ == "__main__":
    sys.exit(main())
