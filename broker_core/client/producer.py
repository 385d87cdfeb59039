"""Producer: send normal messages, one or many per RPC."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from txmq.broker.client._connection import client_for
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message, SendSummary


class Producer:
    """Sends normal (non-transactional) messages through the native service."""

    def __init__(self, broker: NativeClient | str, *, topic: str | None = None, **client_kwargs: Any) -> None:
        self.client, self._owned = client_for(broker, **client_kwargs)
        self.topic = topic

    def send(self, body: bytes | Message, *, topic: str | None = None, tag: str | None = None,
             keys: Sequence[str] = (), properties: Mapping[str, str] | None = None,
             sharding_key: str | None = None) -> str:
        """Send one message; returns its message id."""
        message = body if isinstance(body, Message) else Message(
            topic=topic, body=body, tag=tag, keys=keys, properties=properties or {}, sharding_key=sharding_key)
        summary = self.client.send([message], topic=topic or self.topic)
        return summary.message_ids[0]

    def send_batch(self, messages: Iterable[Message | Mapping | bytes] | pa.RecordBatch | pa.Table, *,
                   topic: str | None = None) -> SendSummary:
        """Send many messages in one Flight stream (Arrow batches)."""
        return self.client.send_arrow(messages, topic=topic or self.topic)

    def close(self) -> None:
        if self._owned:
            self.client.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
