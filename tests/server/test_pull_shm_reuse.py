"""The broker writes a pull's payload over a payload file the client offers to reuse, and only over one it may."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa

from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.server.native_pull import pull_response_payload
from txmq.broker.server.pull_shm import SharedMemoryLimits, SharedMemoryPayloads

TOKEN = b"0123456789abcdef"


def _accepting(directory, limits: SharedMemoryLimits = SharedMemoryLimits()) -> SharedMemoryPayloads:
    probe = directory / "txmq-probe-1-a"
    probe.write_bytes(TOKEN)
    shared = SharedMemoryPayloads(directory, limits)
    assert shared.accepts(str(probe), TOKEN)
    return shared


def _client_file(directory, content: bytes = b"", name: str = "txmq-pull-1-reuse"):
    path = directory / name
    path.write_bytes(content)
    os.chmod(path, 0o600)
    return path


def _batch(rows: int) -> pa.RecordBatch:
    return pa.record_batch({"body": [b"x%d" % i for i in range(rows)]})


def _read(path) -> pa.RecordBatch:
    return pa.ipc.open_stream(pa.memory_map(str(path))).read_all().to_batches()[0]


def test_a_reusable_file_is_overwritten_in_place_and_cut_to_the_payload(tmp_path):
    reuse = _client_file(tmp_path, b"\xff" * (1 << 20))  # a larger previous payload
    inode = os.stat(reuse).st_ino
    path, size = _accepting(tmp_path).write(_batch(3), str(reuse))
    assert path == str(reuse) and os.stat(reuse).st_ino == inode
    assert os.path.getsize(reuse) == size
    assert _read(reuse).equals(_batch(3))


def test_a_reusable_file_grows_to_a_larger_payload(tmp_path):
    reuse = _client_file(tmp_path, b"\xff" * 10)
    path, size = _accepting(tmp_path).write(_batch(5000), str(reuse))
    assert path == str(reuse) and os.path.getsize(reuse) == size
    assert _read(reuse).equals(_batch(5000))


def test_a_reused_file_is_the_clients_and_not_counted_as_pending(tmp_path):
    shared = _accepting(tmp_path, SharedMemoryLimits(max_pending_bytes=1 << 20))
    shared.write(_batch(3), str(_client_file(tmp_path)))
    assert shared.pending_bytes == 0


def test_a_reuse_path_outside_the_directory_or_not_a_payload_name_gets_a_new_file(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shared = _accepting(tmp_path)
    for refused in (_client_file(elsewhere), _client_file(tmp_path, name="txmq-probe-1-b")):
        path, _ = shared.write(_batch(2), str(refused))
        assert path != str(refused) and os.path.getsize(refused) == 0
        assert _read(path).equals(_batch(2))


def test_a_reuse_path_that_is_a_symbolic_link_is_not_followed(tmp_path):
    target = _client_file(tmp_path, name="precious")
    link = tmp_path / "txmq-pull-1-link"
    link.symlink_to(target)
    path, _ = _accepting(tmp_path).write(_batch(2), str(link))
    assert path != str(link) and os.path.getsize(target) == 0


def test_a_reuse_file_with_another_link_is_not_written(tmp_path):
    reuse = _client_file(tmp_path)
    os.link(reuse, tmp_path / "second-name")
    path, _ = _accepting(tmp_path).write(_batch(2), str(reuse))
    assert path != str(reuse) and os.path.getsize(reuse) == 0


def test_a_reuse_file_that_is_gone_gets_a_new_file(tmp_path):
    path, _ = _accepting(tmp_path).write(_batch(2), str(tmp_path / "txmq-pull-1-swept"))
    assert os.path.basename(path) != "txmq-pull-1-swept"
    assert _read(path).equals(_batch(2))


def test_a_pull_offering_a_file_to_reuse_is_answered_with_that_file(tmp_path):
    reuse = _client_file(tmp_path)
    offer = pb.SharedMemoryOffer(probe_token=TOKEN, reuse_path=str(reuse))
    payload = pull_response_payload(_batch(4), offer, _accepting(tmp_path))
    assert payload == {"shared_memory_path": str(reuse), "shared_memory_size": os.path.getsize(reuse)}
    assert _read(reuse).equals(_batch(4))


def test_a_reuse_offer_of_an_unverified_client_is_answered_inline(tmp_path):
    reuse = _client_file(tmp_path)
    offer = pb.SharedMemoryOffer(probe_token=b"never verified", reuse_path=str(reuse))
    payload = pull_response_payload(_batch(1), offer, _accepting(tmp_path))
    assert set(payload) == {"arrow_ipc"} and os.path.getsize(reuse) == 0


def test_a_broker_writing_payloads_removes_the_kept_files_of_clients_that_died(tmp_path):
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    dead = _client_file(tmp_path, b"x", name=f"txmq-pull-{int(child.stdout)}-{'a' * 32}")
    live = _client_file(tmp_path, b"x", name=f"txmq-pull-{os.getppid()}-{'a' * 32}")
    ours = _client_file(tmp_path, b"x", name=f"txmq-pull-{os.getpid()}-{'a' * 32}")
    _accepting(tmp_path).write(_batch(1))  # the first write of a broker sweeps
    assert not dead.exists() and live.exists() and ours.exists()
