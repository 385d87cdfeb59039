"""A broker whose disk fills keeps serving: a write that finds no space is refused with an error
naming it, the process never dies of it (writes through a memory map into a page a full disk cannot
allocate are a SIGBUS), and once space frees every acknowledged message is there, by key too."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from txmq.broker import errors
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message

from ..support.broker_process import BrokerProcess

# a broker whose disk fills: make test-faults, not the default suite
pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="mounts a size-limited tmpfs (needs root)"),
              pytest.mark.faults]


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk, leave_bytes: int) -> None:
    with open(disk / "filler", "ab") as f:
        while (free := shutil.disk_usage(disk).free) > leave_bytes:
            try:
                f.write(b"\0" * min(1 << 20, free - leave_bytes))
                f.flush()
            except OSError:
                return


def test_a_broker_whose_disk_fills_refuses_what_it_cannot_store_and_keeps_every_acknowledged_message(small_disk):
    broker = BrokerProcess(small_disk / "data", flush="async").start()
    try:
        with NativeClient(broker.endpoint, timeout_s=10) as client:
            client.create_topic("t", 2)
            acked: dict[str, bytes] = {}

            def send(n: int, tag: str) -> int:
                refused = 0
                for i in range(n):
                    key, body = f"{tag}-{i}-{uuid.uuid4().hex[:6]}", os.urandom(2000)
                    try:
                        client.send([Message("t", body, keys=[key])])
                        acked[key] = body
                    except errors.TxmqError as exc:
                        died = broker.proc.poll()
                        assert died is None, f"the broker died (exit {died}):\n" + "\n".join(list(broker.output)[-30:])
                        assert "No space left" in str(exc), exc
                        refused += 1
                return refused

            send(200, "before")
            fill(small_disk, leave_bytes=64 << 10)
            send(4000, "full")  # through the CommitLog's reserved space, then refused: never a crash
            (small_disk / "filler").unlink()
            assert send(50, "after") == 0
            for key in list(acked)[::97] + list(acked)[-5:]:
                found = client.query_messages("t", key)
                assert [m.body for m in found] == [acked[key]], key
        broker.kill()
        broker.start()
        with NativeClient(broker.endpoint, timeout_s=10) as client:
            ends, bodies = client.snapshot_offsets(["t"])["t"], []
            for q, end in ends.items():
                for part in client.read_queue("t", q, 0, end):
                    bodies += part.batch.column("body").to_pylist()
            assert sorted(bodies) == sorted(acked.values())
    finally:
        broker.kill()
