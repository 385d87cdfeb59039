"""The executor-side read of one partition: pulls ahead, yields in offset order, stops cleanly.

A stand-in client answers pulls of at most 3 rows, so a range takes several pulls.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pyarrow as pa
import pytest

from txmq.spark import source
from txmq.spark.options import Connection
from txmq.spark.source import PULL_MAX_BYTES, PULL_MAX_BYTES_SHARED_MEMORY, TxmqInputPartition, read_queue_range


@dataclass
class _Pull:
    batch: pa.RecordBatch
    next_offset: int


class ThreeRowPulls:
    """Answers each pull with up to 3 rows and records which offsets were asked for, in order."""

    def __init__(self, shared_memory: bool = False) -> None:
        self.starts: list[int] = []
        self.max_bytes: list[int] = []
        self.pulled = threading.Condition()
        self.pulls_through_shared_memory = shared_memory

    def pull_arrow(self, topic, queue_id, start, end, tags=None, max_bytes=None):
        stop = min(end, start + 3)
        rows = [{"topic": topic, "queueId": queue_id, "queueOffset": o, "body": b"m%d" % o} for o in range(start, stop)]
        with self.pulled:
            self.starts.append(start)
            self.max_bytes.append(max_bytes)
            self.pulled.notify_all()
        return _Pull(pa.RecordBatch.from_pylist(rows), stop)


def _connection(monkeypatch, client) -> Connection:
    conn = Connection(f"stand-in-{id(client)}:1")
    monkeypatch.setitem(source._clients, conn, client)
    return conn


def test_a_partition_is_read_whole_and_in_offset_order(monkeypatch):
    conn = _connection(monkeypatch, ThreeRowPulls())
    batches = list(read_queue_range(conn, TxmqInputPartition("t", 0, 2, 12), tags=None, fail_on_data_loss=True))
    assert [o for b in batches for o in b.column("queueOffset").to_pylist()] == list(range(2, 12))


def test_the_next_pull_is_in_flight_while_the_current_batch_is_consumed(monkeypatch):
    client = ThreeRowPulls()
    rows = read_queue_range(_connection(monkeypatch, client), TxmqInputPartition("t", 0, 0, 9), tags=None,
                            fail_on_data_loss=True)
    first = next(rows)
    with client.pulled:
        assert client.pulled.wait_for(lambda: len(client.starts) >= 2, timeout=10)
    assert first.column("queueOffset").to_pylist() == [0, 1, 2] and client.starts[:2] == [0, 3]
    rows.close()


def test_a_partition_abandoned_early_stops_pulling(monkeypatch):
    client = ThreeRowPulls()
    rows = read_queue_range(_connection(monkeypatch, client), TxmqInputPartition("t", 0, 0, 300), tags=None,
                            fail_on_data_loss=True)
    next(rows)
    rows.close()
    with client.pulled:
        client.pulled.wait(0.2)
    assert len(client.starts) <= 3


@pytest.mark.parametrize(("shared_memory", "expected"), [(False, PULL_MAX_BYTES), (True, PULL_MAX_BYTES_SHARED_MEMORY)])
def test_pulls_are_larger_through_shared_memory(monkeypatch, shared_memory, expected):
    client = ThreeRowPulls(shared_memory)
    list(read_queue_range(_connection(monkeypatch, client), TxmqInputPartition("t", 0, 0, 6), tags=None,
                          fail_on_data_loss=True))
    assert set(client.max_bytes) == {expected}
