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



def start_sending(endpoints: str, topic: str, prefix: str, acked: list[bytes], *, first: int = 0):
    """Plain sends of numbered bodies (`prefix`-i) to `topic` through a ClusterClient, in a thread,
    every acknowledged body appended to `acked`, until the returned function is called (which waits
    for the thread; calling it again does nothing)."""
    import threading
    import time

    from txmq.broker import errors
    from txmq.broker.client.cluster_client import ClusterClient
    from txmq.broker.client.types import Message

    stop = threading.Event()

    def produce() -> None:
        with ClusterClient(endpoints) as client:
            i = first
            while not stop.is_set():
                body = f"{prefix}-{i}".encode()
                try:
                    client.send([Message(topic, body)], topic=topic)
                    acked.append(body)
                except errors.TxmqError:
                    time.sleep(0.05)
                i += 1
                time.sleep(0.02)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()

    def stop_sending() -> None:
        stop.set()
        thread.join(30)

    return stop_sending


def two_groups_with_a_queue_to_move(group_factory, names: tuple[str, str], args: list[str], src: str,
                                    dst: str) -> tuple[str, tuple[str, int]]:
    """Two one-replica groups `names` holding topics `src` and `dst` of 4 queues each (spread over both):
    the groups' endpoints, and the key of one of `dst`'s queues on the first group (the one to move)."""
    from txmq.broker.client.cluster_client import ClusterClient

    first, second = (group_factory(name, replicas=1, args=args) for name in names)
    endpoints = f"{first.endpoints};{second.endpoints}"
    with ClusterClient(endpoints) as client:
        client.create_topic(src, 4)
        client.create_topic(dst, 4)
        assert {q.group for q in client.queues(dst)} == set(names)
        moving = next(q.key for q in client.queues(dst) if q.group == names[0])
    return endpoints, moving
