"""The executor-side read of one partition: yields in offset order, stops cleanly.

A stand-in client streams batches of at most 3 rows, so a range takes several batches.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import dataclass

import pyarrow as pa

from txmq.spark import source
from txmq.spark.options import Connection
from txmq.spark.source import PULL_BATCH_BYTES, TxmqInputPartition, read_queue_range


@dataclass
class _Pull:
    batch: pa.RecordBatch
    next_offset: int


class ThreeRowPulls:
    """A QueueReader (connector/client_seam.py) streaming each read as batches of up to 3 rows; it records
    where each batch started, in order."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.batch_bytes: list[int] = []
        self.pulled = threading.Condition()

    def read_queue(self, topic, queue, start, end, *, tags=None, sql=None, batch_bytes=0):
        queue_id = queue[1]
        self.batch_bytes.append(batch_bytes)
        while start < end:
            stop = min(end, start + 3)
            rows = [{"topic": topic, "queueId": queue_id, "queueOffset": o, "body": b"m%d" % o}
                    for o in range(start, stop)]
            with self.pulled:
                self.starts.append(start)
                self.pulled.notify_all()
            yield _Pull(pa.RecordBatch.from_pylist(rows), stop)
            start = stop


def _connection(monkeypatch, client) -> Connection:
    conn = Connection(f"stand-in-{id(client)}:1")
    monkeypatch.setitem(source._clients, conn, client)
    return conn


def test_a_partition_is_read_whole_and_in_offset_order(monkeypatch):
    conn = _connection(monkeypatch, ThreeRowPulls())
    batches = list(read_queue_range(conn, TxmqInputPartition("t", "", 0, 2, 12), tags=None, fail_on_data_loss=True))
    assert [o for b in batches for o in b.column("queueOffset").to_pylist()] == list(range(2, 12))


def test_a_partition_abandoned_early_stops_pulling(monkeypatch):
    client = ThreeRowPulls()
    rows = read_queue_range(_connection(monkeypatch, client), TxmqInputPartition("t", "", 0, 0, 300), tags=None,
                            fail_on_data_loss=True)
    next(rows)
    rows.close()
    with client.pulled:
        client.pulled.wait(0.2)
    assert len(client.starts) <= 3


def test_a_partition_is_read_as_one_stream_of_batches_of_the_source_size(monkeypatch):
    client = ThreeRowPulls()
    list(read_queue_range(_connection(monkeypatch, client), TxmqInputPartition("t", "", 0, 0, 6), tags=None,
                          fail_on_data_loss=True))
    assert client.batch_bytes == [PULL_BATCH_BYTES] and client.starts == [0, 3]


_WORKER = """
import gc
import types

freezes = []
freeze = gc.freeze
gc.freeze = lambda: (freezes.append(1), freeze())

import pyarrow as pa

from txmq.spark import source
from txmq.spark.options import Connection


class Pulls:
    def read_queue(self, topic, queue, start, end, *, tags=None, sql=None, batch_bytes=0):
        queue_id = queue[1]
        while start < end:
            stop = min(end, start + 3)
            rows = [{"topic": topic, "queueId": queue_id, "queueOffset": o, "body": b"m"} for o in range(start, stop)]
            yield types.SimpleNamespace(batch=pa.RecordBatch.from_pylist(rows), next_offset=stop)
            start = stop


conn = Connection("stand-in:1")
source._clients[conn] = Pulls()
options = types.SimpleNamespace(connection=conn, tags=None, filter=None, fail_on_data_loss=True)
reads = source.read_in_worker(options, source.TxmqInputPartition("t", "", 0, 0, 9))
next(reads)
first = (len(freezes), gc.get_freeze_count())
rows = sum(b.num_rows for b in reads) + 3
rows += sum(b.num_rows for b in source.read_in_worker(options, source.TxmqInputPartition("t", "", 1, 0, 7)))
print(*first, len(freezes), rows)
"""


def test_a_worker_freezes_its_heap_once_when_its_first_batch_is_decoded():
    """pyspark's worker daemon runs a full gc.collect() after every task; frozen, the decode's
    compiled code and the modules are out of its way (source._freeze_heap_once). Run in a
    process of its own, as a Spark worker is (a freeze is for the life of the process)."""
    done = subprocess.run([sys.executable, "-c", _WORKER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    freezes_at_first, frozen_objects, freezes, rows = map(int, done.stdout.split())
    assert freezes_at_first == 1 and frozen_objects > 10_000  # frozen by the first batch: the modules
    assert freezes == 1  # and never again: objects made later stay collectable
    assert rows == 16
