"""The broker half of shared-memory pulls: who may receive a payload that way, and the files it writes."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import time
from types import SimpleNamespace

import pyarrow as pa

from tests.support.broker_process import BrokerProcess
from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.protocol.shared_memory import SHM_DIR_ENV
from txmq.broker.server import pull_shm
from txmq.broker.server.native_pull import pull_response_payload
from txmq.broker.server.pull_shm import (SharedMemoryLimits, SharedMemoryPayloads, remove_orphaned_payloads,
                                         sweep_stale_payloads)

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


def _accepting(directory, limits: SharedMemoryLimits = SharedMemoryLimits()) -> SharedMemoryPayloads:
    shared = SharedMemoryPayloads(directory, limits)
    assert shared.accepts(_probe(directory), TOKEN)
    return shared


def _kib_batch(kib: int) -> pa.RecordBatch:
    return pa.record_batch({"body": [b"x" * 1024] * kib})


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    return int(child.stdout)


def test_a_payload_file_is_created_for_the_owner_only_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        path, _ = SharedMemoryPayloads(tmp_path).write(_kib_batch(1))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_pull_goes_inline_when_uncollected_payloads_would_pass_the_cap(tmp_path):
    shared = SharedMemoryPayloads(tmp_path, SharedMemoryLimits(max_pending_bytes=100 << 10))
    assert shared.write(_kib_batch(60)) is not None
    assert shared.write(_kib_batch(60)) is None
    assert len(os.listdir(tmp_path)) == 1


def test_a_picked_up_payload_frees_its_bytes_for_later_pulls(tmp_path):
    shared = SharedMemoryPayloads(tmp_path, SharedMemoryLimits(max_pending_bytes=100 << 10))
    path, _ = shared.write(_kib_batch(60))
    os.unlink(path)  # what the client does once it has mapped the file
    assert shared.write(_kib_batch(60)) is not None


def test_a_cap_of_zero_sends_every_pull_inline(tmp_path):
    assert SharedMemoryPayloads(tmp_path, SharedMemoryLimits(max_pending_bytes=0)).write(_kib_batch(1)) is None


def test_a_pull_goes_inline_when_the_write_would_leave_the_directory_too_full(tmp_path, monkeypatch):
    nearly_full = SimpleNamespace(total=100 << 20, used=89 << 20, free=11 << 20)
    monkeypatch.setattr(pull_shm.shutil, "disk_usage", lambda _path: nearly_full)
    shared = SharedMemoryPayloads(tmp_path, SharedMemoryLimits(max_used_ratio=0.9))
    assert shared.write(_kib_batch(2048)) is None
    assert os.listdir(tmp_path) == []


def test_a_write_that_fails_goes_inline_leaving_no_file_and_counting_nothing(tmp_path, monkeypatch):
    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pull_shm.pa, "OSFile", no_space)
    shared = SharedMemoryPayloads(tmp_path)
    assert shared.write(_kib_batch(1)) is None
    assert os.listdir(tmp_path) == [] and shared.pending_bytes == 0


def test_a_missing_directory_sends_pulls_inline(tmp_path):
    assert SharedMemoryPayloads(tmp_path / "removed meanwhile").write(_kib_batch(1)) is None


def test_a_pull_without_room_in_shared_memory_is_answered_inline(tmp_path):
    shared = _accepting(tmp_path, SharedMemoryLimits(max_pending_bytes=0))
    batch = _kib_batch(1)
    payload = pull_response_payload(batch, pb.SharedMemoryOffer(probe_token=TOKEN), shared)
    assert set(payload) == {"arrow_ipc"}
    assert pa.ipc.open_stream(payload["arrow_ipc"]).read_all().to_batches()[0].equals(batch)


def test_start_up_removes_payload_files_of_broker_processes_that_died(tmp_path):
    orphan = tmp_path / f"txmq-pull-{_dead_pid()}-{'a' * 32}"
    orphan.write_bytes(b"x")
    assert remove_orphaned_payloads(tmp_path) == 1
    assert not orphan.exists()


def test_start_up_removes_payload_files_left_under_its_own_pid(tmp_path):
    orphan = tmp_path / f"txmq-pull-{os.getpid()}-{'a' * 32}"
    orphan.write_bytes(b"x")
    remove_orphaned_payloads(tmp_path)
    assert not orphan.exists()


def test_start_up_keeps_payload_files_of_live_processes_and_other_files(tmp_path):
    live = tmp_path / f"txmq-pull-{os.getppid()}-{'a' * 32}"
    other = tmp_path / f"txmq-probe-{_dead_pid()}-{'a' * 32}"
    for path in (live, other):
        path.write_bytes(b"x")
    assert remove_orphaned_payloads(tmp_path) == 0
    assert live.exists() and other.exists()


def test_a_starting_broker_removes_payload_files_a_crashed_broker_left(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    orphan = shm / f"txmq-pull-{_dead_pid()}-{'a' * 32}"
    orphan.write_bytes(b"x")
    with BrokerProcess(tmp_path / "data", flush="async", env={SHM_DIR_ENV: str(shm)}):
        assert not orphan.exists()
