"""A broker group on this host: N replica processes on loopback ports around an etcd member.

What the cluster demo, the cluster tests and bench/replication.py start; the replicas
are EmbeddedBroker processes (kill() is SIGKILL, pause() SIGSTOP), so a test can crash,
freeze and restart each one.
"""

from __future__ import annotations

import time
from pathlib import Path

from txmq.broker.cluster.coordination import EtcdGroup, LeaderRecord, cluster_status
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.ports import free_port
from txmq.broker.embedded import EmbeddedBroker


class LocalGroup:
    def __init__(self, root: Path, etcd: EtcdProcess, name: str = "g1", *, replicas: int = 3,
                 flush: str = "async", args: list[str] | None = None, metrics: bool = False,
                 declare_size: bool = True) -> None:
        """`metrics`: each replica serves Prometheus metrics on a free port (`metrics_ports`);
        `declare_size`: pass --replicas (else the group learns its size from etcd's registry)."""
        self.root = Path(root)
        self.etcd = etcd
        self.name = name
        self.args = ["--etcd", etcd.endpoint, "--group", name, "--log-level", "INFO",
                     *(["--replicas", str(replicas)] if declare_size and "--replicas" not in (args or []) else []),
                     *(args or [])]
        self.replicas: list[EmbeddedBroker] = []
        self.metrics_ports: dict[str, int] = {}
        for i in range(replicas):
            extra = list(self.args)
            metrics_port = free_port() if metrics else 0
            if metrics:
                extra += ["--metrics-listen", f"127.0.0.1:{metrics_port}"]
            r = EmbeddedBroker(self.root / f"{name}-r{i}", flush=flush, extra_args=extra)
            r.port = free_port()
            self.replicas.append(r)
            if metrics:
                self.metrics_ports[r.endpoint] = metrics_port
        self.view = EtcdGroup([("127.0.0.1", etcd.client_port)], name, 2)

    @property
    def endpoints(self) -> str:
        """Every replica's endpoint, as a client is given them."""
        return ";".join(r.endpoint for r in self.replicas)

    def start(self) -> "LocalGroup":
        for r in self.replicas:
            r.start()
        self.wait_leader()
        self.wait_in_sync(len(self.replicas))
        return self

    def stop(self) -> None:
        for r in self.replicas:
            try:
                r.resume()
                r.stop(timeout_s=20)
            except Exception:
                r.kill()

    def leader(self) -> LeaderRecord | None:
        return self.view.leader()

    def wait_leader(self, *, not_epoch: int | None = None, timeout_s: float = 20.0) -> LeaderRecord:
        """The leader once one serves (its member status says so), of a later epoch than `not_epoch`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leader = self.view.leader()
            if leader is not None and (not_epoch is None or leader.epoch > not_epoch):
                info = self.view.members().get(leader.endpoint, {})
                if info.get("role") == "leader" and info.get("epoch") == leader.epoch:
                    return leader
            time.sleep(0.05)
        raise AssertionError(f"no leader within {timeout_s}s: {self.status()}")

    def wait_in_sync(self, n: int, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.view.in_sync().members) >= n:
                return
            time.sleep(0.05)
        raise AssertionError(f"in-sync set never reached {n}: {self.status()}")

    def replica(self, endpoint: str) -> EmbeddedBroker:
        return next(r for r in self.replicas if r.endpoint == endpoint)

    def leader_replica(self) -> EmbeddedBroker:
        return self.replica(self.wait_leader().endpoint)

    def status(self) -> dict:
        return cluster_status([("127.0.0.1", self.etcd.client_port)], self.name)["groups"].get(self.name, {})

    def wait_same_log_end(self, timeout_s: float = 20.0) -> int:
        """Wait until every live replica reports the leader's log end; returns it."""
        since_ms = int(time.time() * 1000)
        deadline = time.monotonic() + timeout_s
        running = sum(1 for r in self.replicas if r.proc and r.proc.poll() is None)
        while time.monotonic() < deadline:
            members = [m for m in self.view.members().values() if m["updated_ms"] > since_ms]
            ends = {m["log_end"] for m in members}
            if len(members) == running and len(ends) == 1:
                return ends.pop()
            time.sleep(0.1)
        raise AssertionError(f"replicas did not converge: {self.status()}")
