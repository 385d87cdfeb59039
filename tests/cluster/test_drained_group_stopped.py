"""A drained group stopped for good (docs/cluster.md, "Moving queues"): a client that knew it
finds transactions without waiting on it. Real etcd, real broker processes, the real drain."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from txmq.broker import errors
from txmq.broker.cli import main as txmq_main
from txmq.broker.client.cluster_client import GROUP_UNREACHABLE_S, ClusterClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup

# groups drained and stopped for good under readers: make test-faults, not the default suite
pytestmark = [pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed (make etcd)"),
              pytest.mark.faults]

FAST = ["--transaction-timeout", "2s", "--check-interval", "1s"]


@pytest.fixture
def drained(tmp_path, capsys):
    """Groups a and b holding topic "t"; `drain()` drains a (its queues move to b) and returns a."""
    etcd = EtcdProcess(tmp_path / "etcd").start()
    a, b = (LocalGroup(tmp_path, etcd, n, replicas=1, args=["--replication", "async", *FAST]).start() for n in "ab")

    def drain() -> LocalGroup:
        assert txmq_main(["--broker", b.endpoints.split(";")[0], "group", "drain", "a", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["retired"] == "a"
        return a

    try:
        with ClusterClient(b.endpoints) as client:
            client.create_topic("t", 4)
        yield a, b, drain
    finally:
        b.stop()
        a.stop()
        etcd.kill()


def test_an_unknown_transaction_is_answered_at_once_after_the_drained_group_stopped(drained):
    a, b, drain = drained
    with ClusterClient(f"{a.endpoints};{b.endpoints}") as client:
        assert set(client.routes(refresh=True).groups) == {"a", "b"}, "the client knows both groups"
        drain()
        deadline = time.monotonic() + 5
        while "a" not in client.routes(refresh=True).retired:  # as its periodic refresh does
            assert time.monotonic() < deadline, "the routes never showed the drain"
            time.sleep(0.2)
        a.stop()  # its leader is in the client's routes until their next refresh
        for i, participants in enumerate([(), ("b",), ("b",)]):  # the sink's probe names its one group
            started = time.monotonic()
            with pytest.raises(errors.UnknownTransaction):
                client.get_transaction(f"never-begun-{i}", participants=participants)
            took = time.monotonic() - started
            assert took < GROUP_UNREACHABLE_S / 5, f"lookup {i} took {took:.1f}s: it waited on the stopped group"


def test_a_transaction_committed_on_a_drained_group_is_found_while_that_group_runs(drained):
    a, b, drain = drained
    with ClusterClient(b.endpoints) as client:
        on_a = client.group("a")  # as a batch whose participants were (a,) before the drain
        on_a.prepare("on-a-0", [Message("t", b"x")], producer_group="p", sender="s")
        on_a.end_transaction("on-a-0", "COMMIT", producer_group="p")
    drain()
    with ClusterClient(b.endpoints) as fresh:  # pins nothing: it hashes the id onto b, then asks a
        assert fresh.transaction_group("on-a-0") == "b"
        assert fresh.get_transaction("on-a-0").state == "COMMITTED"



def test_a_reader_with_routes_from_before_the_drain_reads_the_history_copied_off_the_stopped_group(drained):
    a, b, drain = drained
    with ClusterClient(b.endpoints, route_ttl_s=600) as reader:  # its routes stay as they were
        reader.send([Message("t", b"warm-up")], topic="t")
        on_a = [q.key for q in reader.queues("t") if q.group == "a"]
        for i in range(10):
            reader.group("a").send([Message("t", f"on-a-{i}".encode())], topic="t")
        ends = {q: reader.group("a").snapshot_offsets(["t"])["t"].get(q[1], 0) for q in on_a}
        drain().stop()
        assert not next(q for q in reader.queues("t") if q.group == "a").moves, "its routes are from before the drain"
        bodies = [body for q in on_a for r in reader.read_queue("t", q, 0, ends[q])
                  for body in r.batch.column("body").to_pylist()]
    assert sorted(b for b in bodies if b.startswith(b"on-a-")) == sorted(f"on-a-{i}".encode() for i in range(10))
