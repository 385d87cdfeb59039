"""Small helpers shared by the client tests."""

from __future__ import annotations

import pyarrow as pa

from txmq.broker.client import NativeClient


def bodies_batch(n: int, prefix: str = "m", **columns) -> pa.Table:
    """A send batch of n messages with bodies prefix0..prefix{n-1} and optional extra columns."""
    data = {"body": pa.array([f"{prefix}{i}".encode() for i in range(n)], pa.binary())}
    data.update(columns)
    return pa.table(data)


def read_all(client: NativeClient, topic: str) -> pa.Table:
    """Every visible message of a topic, read up to a consistent cut."""
    cut = client.snapshot_offsets([topic])[topic]
    batches = []
    for queue_id, end in cut.items():
        start = client.min_offsets([topic])[topic].get(queue_id, 0)
        while start < end:
            result = client.pull_arrow(topic, queue_id, start, end)
            batches.append(result.batch)
            start = result.next_offset
    if not batches:
        from txmq.broker.protocol.native_arrow import PULL_SCHEMA

        return PULL_SCHEMA.empty_table()
    return pa.Table.from_batches(batches)


def bodies(table: pa.Table) -> list[bytes]:
    return sorted(table.column("body").to_pylist())
