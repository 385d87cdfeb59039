"""Local reads across a broker crash: the client keeps its maps of the CommitLog segments while
the broker is killed (SIGKILL) mid-write and recovers; what it read before is read again the
same, and every acknowledged message is there exactly once."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from tests.client.helpers import bodies_batch
from tests.support.broker_process import BrokerProcess
from txmq.broker import errors
from txmq.broker.client import NativeClient
from txmq.broker.client import local_read as lr
from txmq.broker.protocol.shared_memory import shm_dir_from_env

pytestmark = [
    pytest.mark.usefixtures("decode_path"),  # the client decodes with each decode (tests/conftest.py)
    pytest.mark.skipif(shm_dir_from_env() is None, reason="no shared-memory directory on this host"),
]

TOPIC = "crash"


def _read_locally(client: NativeClient, start: int, end: int) -> list[tuple[int, bytes]]:
    rows, pos = [], start
    while pos < end:
        result = client.pull_arrow(TOPIC, 0, pos, end, max_bytes=64 << 10)
        offsets = result.batch.column("queueOffset").to_pylist()
        rows.extend(zip(offsets, result.batch.column("body").to_pylist()))
        pos = result.next_offset
    return rows


def _send_until_killed(endpoint: str, acknowledged: list[bytes], stop: threading.Event) -> None:
    with NativeClient(endpoint, timeout_s=5, retry_unavailable_s=0) as sender:
        batch_no = 0
        while not stop.is_set():
            batch = bodies_batch(50, prefix=f"b{batch_no}-")
            try:
                sender.send_arrow(batch, topic=TOPIC)
            except errors.TxmqError:
                return  # the broker is gone: what was in flight may or may not have landed
            acknowledged.extend(batch.column("body").to_pylist())
            batch_no += 1


@pytest.mark.parametrize("seed", [1, 2])
def test_local_reads_see_every_acknowledged_message_once_across_a_broker_kill(tmp_path, seed, monkeypatch):
    planned = Counter()
    original = lr.LocalSegments.batch

    def counting(self, plan, topic, queue_id):
        planned["plans"] += 1
        return original(self, plan, topic, queue_id)

    monkeypatch.setattr(lr.LocalSegments, "batch", counting)
    with BrokerProcess(tmp_path / "data", flush="sync", extra_args=["--segment-bytes", str(256 << 10)]) as broker:
        reader = NativeClient(broker.endpoint, timeout_s=30)
        reader.create_topic(TOPIC, 1)
        acknowledged: list[bytes] = []
        stop = threading.Event()
        sender = threading.Thread(target=_send_until_killed, args=(broker.endpoint, acknowledged, stop))
        sender.start()
        before: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + random.Random(seed).uniform(0.5, 1.5)
        while time.monotonic() < deadline:  # read behind the writer, locally
            end = reader.snapshot_offsets([TOPIC])[TOPIC][0]
            before.extend(_read_locally(reader, len(before), end))
        broker.kill()
        stop.set()
        sender.join(30)
        plans_before_kill = planned["plans"]
        broker.restart()
        end = reader.snapshot_offsets([TOPIC])[TOPIC][0]
        after = _read_locally(reader, 0, end)
        reader.close()
    assert plans_before_kill > 0 and planned["plans"] > plans_before_kill, "read locally before and after"
    assert after[:len(before)] == before, "what was read before the crash reads the same after it"
    assert [offset for offset, _ in after] == list(range(end)), "one record per queue offset"
    counts = Counter(body for _, body in after)
    assert all(counts[body] == 1 for body in acknowledged), "every acknowledged message exactly once"
    assert max(counts.values()) == 1
