"""Issue 38's items that need hosts: each replica, etcd and the clients on lab hosts of their own.

Each test failed on the code the issue was filed against (main at 0699f1d). Items 1, 3 and 4 are fixed
(branch replication), items 2 and 5 too (branch engine)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from lab import campaign, faults
from lab.campaign import Group
from lab.hosts import Lab

# replicas, etcd and clients on lab hosts through partitions: make test-faults, not the default suite
pytestmark = pytest.mark.faults

TOPIC = "items"


def _client(group: Group, body: str, *, timeout: float = 60) -> dict:
    """Run `body` on the ctl host with `c` a NativeClient given every replica; it sets `out` (JSON)."""
    code = (
        "import json, time\n"
        "from txmq.broker import errors\n"
        "from txmq.broker.client.native_client import NativeClient\n"
        "from txmq.broker.client.types import Message\n"
        f"c = NativeClient({group.endpoints!r}, timeout_s=20)\n"
        "out = {}\n" + body + "\nprint(json.dumps(out))\n"
    )
    return group.ctl_python(code, timeout=timeout)


def _send_numbered(group: Group, n: int, prefix: str = "m") -> int:
    out = _client(group, (
        f"acked = 0\nfor i in range({n}):\n"
        f"    c.send([Message({TOPIC!r}, f'{prefix}{{i}}'.encode())], return_message_ids=False); acked += 1\n"
        "out['acked'] = acked"))
    return out["acked"]


def _bodies(group: Group) -> list[str]:
    out = _client(group, (
        f"cut = c.snapshot_offsets([{TOPIC!r}])[{TOPIC!r}]\nbodies = []\n"
        f"for q, end in sorted(cut.items()):\n"
        f"    for r in c.read_queue({TOPIC!r}, q, 0, end): bodies += [b.decode() for b in r.batch.column('body').to_pylist()]\n"
        "out['bodies'] = bodies"))
    return out["bodies"]


@pytest.fixture
def lab(lab_available):
    with Lab("items") as made:
        yield made


def _group(lab: Lab, **kw) -> Group:
    group = Group(lab, **kw).start()
    group.create_topic(TOPIC)
    return group


def test_a_wiped_replica_starting_first_does_not_erase_its_group(lab):
    group = _group(lab, args=["--replication", "sync", "--min-insync", "1"])
    assert group.wait_in_sync(3)
    acked = _send_numbered(group, 200)
    assert group.wait_in_sync(3)
    for r in group.replicas:  # a power cut of the whole group
        faults.kill9(r)
    first = group.replicas[0]
    faults.wipe_disk(first)  # its disk replaced
    group.start_replica(first)
    time.sleep(4)  # it alone is up, past the old leader's lease
    for r in group.replicas[1:]:
        group.start_replica(r)
    group.wait_leader(timeout_s=60)
    assert group.wait_in_sync(2, 60)
    bodies = _bodies(group)
    assert sorted(set(bodies)) == sorted(f"m{i}" for i in range(acked)), f"{len(set(bodies))} of {acked} survived"


def test_a_commit_retried_after_replication_timeout_publishes_each_message_once(lab):
    group = _group(lab, args=["--replication", "sync", "--min-insync", "1"])
    assert group.wait_in_sync(3)
    prepared = _client(group, (
        f"p = c.prepare('', [Message({TOPIC!r}, b'tx-a'), Message({TOPIC!r}, b'tx-b')], producer_group='lab')\n"
        "out['tx'] = p.transaction_id"))
    leader, _ = group.wait_leader()
    faults.partition(lab, [leader], [r for r in group.replicas if r is not leader])
    first = _client(group, (
        f"try:\n    e = c.end_transaction({prepared['tx']!r}, 'COMMIT'); out['state'] = str(e.state)\n"
        "except errors.TxmqError as exc:\n    out['error'] = type(exc).__name__"))
    # ReplicationTimeout (the COMMIT is in the log, unacknowledged) or NotEnoughReplicas (refused before
    # storing) while the cut-off leader still leads; COMMITTED once it has abdicated and the client's
    # failover reached the new leader. Either way the client retries the COMMIT as the docs advise;
    # tests/cluster/test_commit_retry_after_replication_timeout.py pins the unacknowledged path alone.
    assert "error" in first or first.get("state") == "COMMITTED", first
    faults.heal(lab)
    assert group.wait_in_sync(3, 60)
    _client(group, f"c.end_transaction({prepared['tx']!r}, 'COMMIT')")  # the retry the docs advise
    time.sleep(2)
    bodies = _bodies(group)
    assert sorted(bodies) == ["tx-a", "tx-b"]


def test_a_one_replica_group_with_the_defaults_acknowledges_writes(lab):
    group = _group(lab, replicas=1)
    out = _client(group, (
        "c.timeout_s = 10\nt = time.monotonic()\n"
        f"try:\n    c.send([Message({TOPIC!r}, b'solo')]); out['ok'] = True\n"
        "except errors.TxmqError as exc:\n    out['error'] = type(exc).__name__\n"
        "out['s'] = time.monotonic() - t"))
    assert out.get("ok"), out
    assert _bodies(group) == ["solo"]


def test_a_write_sent_first_to_a_follower_its_leader_cannot_answer_is_acknowledged_by_another_replica_at_once(
        lab, tmp_path):
    # The follower would pass the write to its leader, which stores it, and the answer would vanish:
    # the client would wait until keepalive closed the connection and get an error, unsure whether
    # the write was stored. A follower its leader has not answered for a second refuses client
    # calls unread instead, and the client sends the write to the next replica.
    group = _group(lab)
    assert group.wait_in_sync(3)
    leader, _ = group.wait_leader()
    cut, other = [r for r in group.replicas if r is not leader]
    endpoints = ";".join(Group.endpoint(r) for r in (cut, leader, other))
    go = tmp_path / "go"
    code = (
        "import json, pathlib, sys, time\n"
        "from txmq.broker import errors\n"
        "from txmq.broker.client.native_client import NativeClient\n"
        "from txmq.broker.client.types import Message\n"
        f"c = NativeClient({endpoints!r}, timeout_s=10)\n"
        "c.list_topics()\n"  # connected through `cut` before the fault
        "print('ready', flush=True)\n"
        f"while not pathlib.Path({str(go)!r}).exists():\n    time.sleep(0.01)\n"
        "out, t = {}, time.monotonic()\n"
        f"try:\n    c.send([Message({TOPIC!r}, b'via-cut')]); out['ok'] = True\n"
        "except errors.TxmqError as exc:\n    out['error'] = repr(exc)\n"
        "out['s'], out['target'] = time.monotonic() - t, c.target\n"
        "print(json.dumps(out), flush=True)\n")
    proc = group.ctl.popen([campaign.python(), "-c", code], env=campaign.base_env(), stdout=subprocess.PIPE)
    lines: list[bytes] = []

    def next_line(prefix: bytes) -> bytes:  # the client's stderr comes on the same pipe
        while line := proc.stdout.readline():
            lines.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(b"".join(lines).decode(errors="replace")[-2000:])

    try:
        next_line(b"ready")
        faults.partition(lab, [leader], [cut], one_way=True)  # the leader's packets to `cut` vanish
        time.sleep(1.3)  # past a second of silence, before keepalive closes `cut`'s connection (1.5-2.5 s)
        go.touch()
        out = json.loads(next_line(b"{"))
    finally:
        proc.kill()
    assert out.get("ok") and out["s"] < 1 and out["target"] != Group.endpoint(cut), out
    faults.heal(lab)
    assert _bodies(group) == ["via-cut"]


def test_the_official_python_client_keeps_sending_while_its_lowest_address_cannot_reach_the_leader(lab, tmp_path):
    # The Python client keys its channels by the sorted address set of a queue's route and
    # pick_first connects to the lowest: with every queue listing every replica it sent through that
    # one replica only, and stopped for as long as that replica could not reach its leader.
    if not campaign.OFFICIAL_PYTHON.exists():
        pytest.skip("the official Python client's environment is missing (make interop-venv)")
    group = _group(lab)
    assert group.wait_in_sync(3)
    leader, _ = group.wait_leader()
    lowest = min(group.replicas, key=Group.endpoint)  # the client sorts "host:port" strings
    history, stop = tmp_path / "official.jsonl", tmp_path / "stop"
    proc = lab.host("c1").popen(
        [str(campaign.OFFICIAL_PYTHON), "-m", "lab.workloads", "official", "--endpoints", group.endpoints,
         "--topic", TOPIC, "--history", str(history), "--process", "official", "--duration", "90",
         "--stop-file", str(stop), "--timeout", str(campaign.OFFICIAL_REQUEST_TIMEOUT_S)], env=campaign.base_env())

    def acked() -> list[float]:
        if not history.exists():
            return []
        ops = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
        return [op["time"] for op in ops if op["f"] == "send" and op["type"] == "ok"]

    try:
        assert faults.wait_until(lambda: len(acked()) > 10, 60), "the official client acknowledged nothing"
        start = time.time()
        cut_off = [r for r in group.replicas if r is not leader] if lowest is leader else [lowest]
        faults.partition(lab, [leader], cut_off, one_way=True)  # `lowest` hears no leader
        time.sleep(8)
        faults.heal(lab)
        end = time.time()
        time.sleep(1)
    finally:
        stop.touch()
        proc.wait(30)
    during = [start] + [t for t in acked() if start <= t <= end] + [end]
    longest = max(b - a for a, b in zip(during, during[1:]))
    assert longest < 5, f"no send acknowledged for {longest:.1f}s of the 8 s partition"


@pytest.mark.lab  # ~1 min: run by `make lab`
def test_a_replacement_replica_joins_after_retention_deleted_the_start_of_the_log(lab):
    group = _group(lab, args=["--segment-bytes", str(64 << 10), "--retention", "2s"])
    assert group.wait_in_sync(3)
    victim = next(r for r in group.replicas if r is not group.wait_leader()[0])
    _client(group, (
        f"for i in range(600):\n    c.send([Message({TOPIC!r}, b'x' * 1000)], return_message_ids=False)\n"))
    time.sleep(8)  # retention removes the first segments (the wait also lets the check run)
    _client(group, f"c.send([Message({TOPIC!r}, b'after retention')])")
    faults.kill9(victim)
    faults.wipe_disk(victim)
    group.start_replica(victim)
    assert group.wait_in_sync(3, 40), group.status()


def _failover_campaign(tmp_path) -> campaign.Outcome:
    return campaign.run(tmp_path / "run", ["leader-isolated"], rounds=2, hold_s=8, recover_s=4, writers=1,
                        with_consumer=False, log=lambda *_: None)


@pytest.mark.lab  # ~2 min: run by `make lab`
def test_after_a_silent_drop_partition_of_the_leader_writes_are_acknowledged_within_5s(lab_available, tmp_path):
    outcome = _failover_campaign(tmp_path)
    assert outcome.result.committed > 0 and not outcome.errors, outcome.errors
    assert outcome.partition_failovers() and outcome.failover_ok(), outcome.failover_s
