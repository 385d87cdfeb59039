"""failOnDataLoss: offsets deleted by retention fail the read with a clear message, or are skipped.

These tests pin the executor-side read's edge cases (exact ranges, log text) with a
stand-in client; test_data_loss_real_broker.py runs both settings against a
broker whose retention really deleted segments.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
import pytest

from txmq.broker.errors import DataDeleted
from txmq.spark import source
from txmq.spark.options import Connection
from txmq.spark.schema import source_arrow_schema
from txmq.spark.source import TxmqInputPartition, read_queue_range


@dataclass
class _Pull:
    batch: pa.RecordBatch
    next_offset: int


class RetainedFrom:
    """A QueueReader (connector/client_seam.py) whose offsets below `min_offset` were deleted."""

    def __init__(self, min_offset: int) -> None:
        self.min_offset = min_offset

    def read_queue(self, topic, queue, start, end, *, tags=None, sql=None, batch_bytes=0):
        queue_id = queue[1]
        if start < self.min_offset:
            raise DataDeleted(f"offset {start} < min {self.min_offset}", min_offset=self.min_offset)
        rows = [{"topic": topic, "queueId": queue_id, "queueOffset": o, "body": b"m%d" % o} for o in range(start, end)]
        yield _Pull(pa.RecordBatch.from_pylist(rows), end)


@pytest.fixture
def conn(monkeypatch) -> Connection:
    c = Connection("deleted-data-host:1")
    monkeypatch.setitem(source._clients, c, RetainedFrom(5))
    return c


def test_deleted_offsets_fail_the_read_by_default(conn):
    with pytest.raises(DataDeleted, match=r"\[2, 5\).*failOnDataLoss=false"):
        list(read_queue_range(conn, TxmqInputPartition("t", "", 0, 2, 8), tags=None, fail_on_data_loss=True))


def test_deleted_offsets_are_skipped_with_a_warning_when_allowed(conn, caplog):
    with caplog.at_level(logging.WARNING, logger="txmq.spark.source"):
        batches = list(read_queue_range(conn, TxmqInputPartition("t", "", 0, 2, 8), tags=None, fail_on_data_loss=False))
    assert [o for b in batches for o in b.column("queueOffset").to_pylist()] == [5, 6, 7]
    assert all(b.schema.equals(source_arrow_schema()) for b in batches)
    assert "skipping offsets [2, 5)" in caplog.text


def test_a_range_wholly_deleted_yields_nothing_when_allowed(conn):
    assert list(read_queue_range(conn, TxmqInputPartition("t", "", 0, 0, 4), tags=None, fail_on_data_loss=False)) == []
