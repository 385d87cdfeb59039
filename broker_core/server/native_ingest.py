"""Turn a native `MessageBatch` (Arrow rows and/or MessageSpec rows) into store Messages.

The native service accepts many messages per call. This module validates the
payload's shape (columns, types, required body, a topic for every row) and
picks each message's queue: a sharding key always maps to the same queue (so
its order is kept), other messages are spread round-robin. Content rules
(topic names, sizes, reserved properties) are the store's: it refuses a bad
batch as a whole before writing anything.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
import zlib
from typing import Callable, Iterable

import pyarrow as pa

from txmq.broker.errors import (
    BadRequest,
    IllegalMessageKey,
    IllegalMessageTag,
    IllegalPropertyKey,
    MessageBodyEmpty,
)
from txmq.broker.protocol import native_pb2
from txmq.broker.protocol.native_arrow import check_send_schema, table_from_ipc
from txmq.broker.server.property_names import is_user_property
from txmq.broker.store.message import (
    PROP_KEYS,
    PROP_SHARDING_KEY,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    Message,
)

QueueCountFn = Callable[[str], int]


class QueueSelector:
    """Chooses a queue per message: by sharding key when given, else round-robin per topic."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count] = {}
        self._lock = threading.Lock()

    def select(self, topic: str, queue_count: int, sharding_key: str | None) -> int:
        if queue_count <= 0:
            raise BadRequest(f"topic {topic!r} has no writable queues")
        if sharding_key:
            # crc32 is stable across processes (Python's hash() is salted).
            return zlib.crc32(sharding_key.encode()) % queue_count
        counter = self._counters.get(topic)
        if counter is None:
            with self._lock:
                counter = self._counters.setdefault(topic, itertools.count())
        return next(counter) % queue_count


class MessageIdGenerator:
    """Unique client-style message ids (UNIQ_KEY) for halves that came without one.

    A transactional message keeps its UNIQ_KEY from half to final record, so
    the id a producer gets at prepare time is the id readers see after COMMIT.
    A random per-process prefix plus a counter: unique without per-id entropy.
    """

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:20].upper()
        self._counter = itertools.count()

    def next_id(self) -> str:
        return f"{self._prefix}{next(self._counter):012X}"

    def assign(self, messages: list[Message]) -> list[str]:
        """Give every message without a UNIQ_KEY a new one; return all ids in order."""
        ids = []
        for m in messages:
            mid = m.properties.get(PROP_UNIQ_KEY)
            if not mid:
                mid = m.properties[PROP_UNIQ_KEY] = self.next_id()
            ids.append(mid)
        return ids


def _column(table: pa.Table, name: str, rows: int) -> list:
    if name in table.column_names:
        return table.column(name).to_pylist()
    return [None] * rows


def _build_message(topic: str | None, body: bytes | None, tag: str | None, keys: Iterable[str] | None,
                   properties, sharding_key: str | None, message_id: str | None, born_ms: int,
                   row: int) -> tuple[Message, str | None]:
    if not topic:
        raise BadRequest(f"message {row} has no topic (set the topic column or the request's default topic)")
    if not body:
        raise MessageBodyEmpty(f"message {row} to topic {topic!r} has an empty body")
    props: dict[str, str] = {}
    if properties:
        # Arrow map values arrive as a list of (key, value) pairs, protobuf maps as a mapping.
        props.update(properties.items() if hasattr(properties, "items") else properties)
        for name in props:
            if not is_user_property(name):
                raise IllegalPropertyKey(f"message {row}: property {name!r} is reserved by the broker "
                                         "(use tag/keys/shardingKey/messageId columns instead)")
    if tag:
        if "|" in tag or "\x01" in tag or "\x02" in tag:
            raise IllegalMessageTag(f"message {row}: tag {tag[:100]!r} contains '|' or a separator character")
        props[PROP_TAGS] = tag
    if keys:
        for key in keys:
            if not key or " " in key or "\x01" in key or "\x02" in key:
                raise IllegalMessageKey(f"message {row}: key {key[:100]!r} is empty or contains a space "
                                        "(keys are stored space-separated)")
        props[PROP_KEYS] = " ".join(keys)
    if sharding_key:
        props[PROP_SHARDING_KEY] = sharding_key
    if message_id:
        props[PROP_UNIQ_KEY] = message_id
    return Message(topic=topic, body=bytes(body), properties=props, born_timestamp=born_ms), sharding_key or None


def decode_batch(batch: native_pb2.MessageBatch, queue_count: QueueCountFn,
                 selector: QueueSelector) -> list[Message]:
    """All messages of a MessageBatch with queues assigned; BadRequest on a malformed payload."""
    born_ms = int(time.time() * 1000)
    staged: list[tuple[Message, str | None]] = []
    default_topic = batch.default_topic or None
    if batch.arrow_ipc:
        table = table_from_ipc(batch.arrow_ipc)
        check_send_schema(table.schema)
        rows = table.num_rows
        columns = zip(
            _column(table, "topic", rows), table.column("body").to_pylist(), _column(table, "tag", rows),
            _column(table, "keys", rows), _column(table, "properties", rows),
            _column(table, "shardingKey", rows), _column(table, "messageId", rows),
        )
        for row, (topic, body, tag, keys, props, skey, mid) in enumerate(columns):
            staged.append(_build_message(topic or default_topic, body, tag, keys, props, skey, mid, born_ms, row))
    offset = len(staged)
    for i, spec in enumerate(batch.messages):
        staged.append(_build_message(spec.topic or default_topic, spec.body, spec.tag, spec.keys,
                                     spec.properties, spec.sharding_key, spec.message_id, born_ms, offset + i))
    if not staged:
        raise BadRequest("the batch holds no messages (give arrow_ipc rows or messages)")
    counts: dict[str, int] = {}
    for message, sharding_key in staged:
        n = counts.get(message.topic)
        if n is None:
            n = counts[message.topic] = queue_count(message.topic)
        message.queue_id = selector.select(message.topic, n, sharding_key)
    return [m for m, _ in staged]
