"""Small helpers shared by the client tests."""

from __future__ import annotations

import threading

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


class Collector:
    """Iterates a subscription in a thread, keeping every pushed message's (queue, offset, body)."""

    def __init__(self, subscription) -> None:
        self.subscription = subscription
        self.messages: list[tuple[int, int, bytes]] = []
        self.batches = 0
        self.failure: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for pushed in self.subscription:
                rows = pushed.batch.to_pydict()
                with self._cond:
                    self.batches += 1
                    self.messages.extend(zip(rows["queueId"], rows["queueOffset"], rows["body"]))
                    self._cond.notify_all()
        except BaseException as exc:
            self.failure = exc

    def wait_for(self, count: int, timeout_s: float = 20) -> list[bytes]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.messages) >= count or self.failure, timeout_s), \
                f"{len(self.messages)} of {count} messages arrived"
        assert self.failure is None, self.failure
        return self.bodies()

    def bodies(self) -> list[bytes]:
        with self._cond:
            return [body for _, _, body in self.messages]

    def close(self) -> None:
        self.subscription.close()
        self._thread.join(10)
        assert not self._thread.is_alive(), "close() did not end the iteration"
