"""Crash tests with real processes: a sync-mode writer killed with SIGKILL at random moments.

After each kill the store is recovered and checked: every append that had
returned is present exactly once at the position it was given, nothing else is
readable except the append in flight at the kill (all or nothing if it was a
group), and every ConsumeQueue entry agrees with the CommitLog record it points to.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from txmq.broker.store import MessageStore, StoreConfig
from tests.store._helpers import queue_contents

WRITER = Path(__file__).with_name("_writer.py")
ROOT = Path(__file__).resolve().parents[2]


def _run_writer_and_kill(data_dir: Path, seed: int, run_id: str, rng: random.Random) -> list[str]:
    """Start the writer, let it ack a random number of appends, SIGKILL it; return its output lines."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, str(WRITER), str(data_dir), str(seed), run_id],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    lines: list[str] = []
    acks_wanted = rng.randrange(1, 80)
    acks = 0
    killer = threading.Timer(30, proc.kill)  # never hang the suite
    killer.start()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode())
            if raw.startswith(b"ACK"):
                acks += 1
                if acks >= acks_wanted:
                    time.sleep(rng.random() * 0.01)  # land anywhere in the next append
                    break
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()
        lines.extend(rest.decode().splitlines(keepends=True))
        proc.wait()
    finally:
        killer.cancel()
    assert acks > 0, proc.stderr.read().decode() if proc.stderr else "writer produced no acks"
    proc.stderr.close()
    proc.stdout.close()
    return lines


def _parse(lines: list[str]) -> tuple[dict[str, tuple[str, int, int]], list[str], bool]:
    """(acked message key -> (topic, queue, offset), keys of the append in flight, in-flight is a group).

    A message's key is its body up to the padding dots ("run:seq")."""
    acked: dict[str, tuple[str, int, int]] = {}
    inflight: list[str] = []
    group = False
    for line in lines:
        if not line.endswith("\n"):
            continue  # cut by the kill
        kind, _, rest = line.partition(" ")
        if kind == "BEGIN":
            payload, _, flag = rest.rstrip("\n").rpartition(" ")
            inflight, group = [b.split(".")[0] for b in json.loads(payload)], flag == "1"
        elif kind == "ACK":
            for topic, qid, qoff, body in json.loads(rest):
                acked[body.split(".")[0]] = (topic, qid, qoff)
            inflight = []
    return acked, inflight, group


def _check_recovered(data_dir: Path, acked_total: dict, inflight: list[str], group: bool) -> dict:
    from tests.store._writer import CONFIG
    store = MessageStore(StoreConfig(data_dir, **dict(CONFIG, flush_mode="async")))
    try:
        assert store.recovery.crashed
        contents = queue_contents(store)
        seen: dict[str, tuple[str, int, int]] = {}
        for (topic, qid), bodies in contents.items():
            low = store.min_offset(topic, qid)
            for i, body in enumerate(bodies):
                key = body.split(b".")[0].decode()
                assert key not in seen, f"{key} readable twice"
                seen[key] = (topic, qid, low + i)
        for key, where in acked_total.items():
            assert seen.get(key) == where, f"acknowledged {key} at {where} but found {seen.get(key)}"
        extra = set(seen) - set(acked_total)
        inflight_keys = set(inflight)
        assert extra <= inflight_keys, f"readable but never written or acked: {sorted(extra - inflight_keys)[:5]}"
        if group and extra:
            assert extra == inflight_keys, "an in-flight group survived partially"
        # the survivors of the in-flight append are now as good as acknowledged
        return {k: seen[k] for k in extra}
    finally:
        store.close()


def run_kills(tmp_path: Path, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    data_dir = tmp_path / "store"
    acked_total: dict[str, tuple[str, int, int]] = {}
    for n in range(kills):
        lines = _run_writer_and_kill(data_dir, rng.randrange(1 << 30), f"r{n}", rng)
        acked, inflight, group = _parse(lines)
        acked_total.update(acked)
        acked_total.update(_check_recovered(data_dir, acked_total, inflight, group))


def test_sigkill_during_sync_appends_loses_no_acknowledged_write(tmp_path: Path) -> None:
    run_kills(tmp_path, kills=4, seed=7)


@pytest.mark.torture
def test_sigkill_torture(tmp_path: Path) -> None:
    run_kills(tmp_path, kills=60, seed=2026)
