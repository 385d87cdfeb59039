"""The broker half of shared-memory pulls: who may receive a payload that way, and the files it writes."""

from __future__ import annotations

import os
import stat
import time

import pyarrow as pa

from txmq.broker.server.pull_shm import SharedMemoryPayloads, sweep_stale_payloads

TOKEN = b"0123456789abcdef"


def _probe(directory, token: bytes = TOKEN, name: str = "txmq-probe-1-a") -> str:
    path = directory / name
    path.write_bytes(token)
    return str(path)


def test_a_probe_holding_the_token_is_accepted(tmp_path):
    assert SharedMemoryPayloads(tmp_path).accepts(_probe(tmp_path), TOKEN)


def test_a_probe_holding_another_token_is_refused(tmp_path):
    assert not SharedMemoryPayloads(tmp_path).accepts(_probe(tmp_path, b"something else"), TOKEN)


def test_a_missing_probe_is_refused(tmp_path):
    assert not SharedMemoryPayloads(tmp_path).accepts(str(tmp_path / "txmq-probe-1-missing"), TOKEN)


def test_a_probe_outside_the_directory_or_misnamed_is_never_read(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shared = SharedMemoryPayloads(tmp_path)
    assert not shared.accepts(_probe(elsewhere), TOKEN)
    assert not shared.accepts(_probe(tmp_path, name="not-a-probe"), TOKEN)


def test_a_verified_token_needs_no_probe_afterwards(tmp_path):
    shared = SharedMemoryPayloads(tmp_path)
    path = _probe(tmp_path)
    assert shared.accepts(path, TOKEN)
    os.unlink(path)
    assert shared.accepts("", TOKEN)
    assert not shared.accepts("", b"never verified")


def test_without_a_directory_nothing_is_accepted(tmp_path):
    assert not SharedMemoryPayloads(None).accepts(_probe(tmp_path), TOKEN)


def test_a_payload_file_holds_the_batch_as_one_ipc_stream_for_the_owner_only(tmp_path):
    batch = pa.record_batch({"body": [b"a", b"bc"]})
    path, size = SharedMemoryPayloads(tmp_path).write(batch)
    assert os.path.getsize(path) == size
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert pa.ipc.open_stream(pa.memory_map(path)).read_all().to_batches()[0].equals(batch)


def test_the_sweep_removes_payload_files_never_picked_up_and_keeps_fresh_ones(tmp_path):
    old, fresh, other = tmp_path / "txmq-pull-1-old", tmp_path / "txmq-pull-1-fresh", tmp_path / "other"
    for path in (old, fresh, other):
        path.write_bytes(b"x")
    long_ago = time.time() - 3600
    os.utime(old, (long_ago, long_ago))
    os.utime(other, (long_ago, long_ago))
    assert sweep_stale_payloads(tmp_path) == 1
    assert not old.exists() and fresh.exists() and other.exists()
