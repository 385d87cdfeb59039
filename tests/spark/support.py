"""Helpers for the Spark tests: put messages on the broker, read topics back."""

from __future__ import annotations

import uuid

import pyarrow as pa


def send_plain(client, topic: str, bodies: list[bytes], **columns) -> None:
    client.send_arrow(pa.record_batch({"body": bodies, **columns}), topic=topic)


def send_transaction(client, topic: str, bodies: list[bytes], resolution: str | None = "COMMIT",
                     tx_id: str | None = None, **columns) -> str:
    """Prepare `bodies` as halves of one transaction (spread over the queues) and end it (None: leave pending)."""
    tx = tx_id or f"test-{uuid.uuid4().hex[:12]}"
    client.prepare_arrow(tx, pa.record_batch({"body": bodies, **columns}), topic=topic,
                         producer_group="tests", sender="s")
    if resolution is not None:
        client.end_transaction(tx, resolution, producer_group="tests")
    return tx


def topic_bodies(client, topic: str) -> list[bytes]:
    """Every visible message body of `topic` (all queues), in queue order."""
    cut = client.snapshot_offsets([topic])[topic]
    out = []
    for q, end in sorted(cut.items()):
        for r in client.read_queue(topic, q, 0, end):
            out.extend(r.batch.column("body").to_pylist())
    return out

