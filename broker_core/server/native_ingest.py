"""Turn written rows (an Arrow batch from a Flight put, or MessageSpecs from a small call) into
store Messages.

The native service accepts many messages per call. This module validates the
payload's shape (columns, types, required body, a topic for every row) and
picks each message's queue: a sharding key always maps to the same queue (so
its order is kept), other messages are spread round-robin. Content rules
(topic names, sizes, reserved properties) are the store's: it refuses a bad
batch as a whole before writing anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
import time
import uuid
import zlib
from typing import Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txmq.broker.errors import (
    BadRequest,
    IllegalMessageKey,
    IllegalMessageTag,
    IllegalPropertyKey,
    MessageBodyEmpty,
    QueueMoved,
    QueueSealed,
)
from txmq.broker.protocol import native_pb2
from txmq.broker.protocol.native_arrow import check_send_schema
from txmq.broker.store.property_names import is_user_property
from txmq.broker.timer.schedule import TIME_PROPERTIES
from txmq.broker.transaction.decision import CROSS_GROUP_PROPERTIES
from txmq.broker.store.message import (
    PROP_KEYS,
    PROP_SHARDING_KEY,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    Message,
)

QueueCountFn = Callable[[str], int]


class QueueSelector:
    """Chooses a queue per message: by sharding key when given, else round-robin per topic; never
    a queue a move to another group sealed here (`sealed(topic)`: their ids)."""

    def __init__(self, sealed: Callable[[str], frozenset[int]] = lambda topic: frozenset(),
                 moved_to: Callable[[str, int], str] = lambda topic, queue_id: "") -> None:
        self._next: dict[str, int] = {}  # per topic: the round-robin position of its next message
        self._lock = threading.Lock()
        self._sealed = sealed
        self._moved_to = moved_to  # the group a sealed queue moved on to ("" while its move is under way)

    def _writable(self, topic: str, queue_count: int) -> list[int] | None:
        """The queue ids that take writes when some are sealed (None: all of 0..count-1)."""
        sealed = self._sealed(topic)
        if not sealed:
            return None
        ids = [q for q in range(queue_count) if q not in sealed]
        if not ids:
            raise QueueSealed(f"every queue of topic {topic!r} on this group moved to another group: "
                              "refresh the routes and send again")
        return ids

    def select(self, topic: str, queue_count: int, sharding_key: str | None) -> int:
        if queue_count <= 0:
            raise BadRequest(f"topic {topic!r} has no writable queues")
        ids = self._writable(topic, queue_count)
        n = queue_count if ids is None else len(ids)
        if sharding_key:
            # crc32 is stable across processes (Python's hash() is salted).
            k = zlib.crc32(sharding_key.encode()) % n
        else:
            k = self._take(topic, 1) % n
        return k if ids is None else ids[k]

    def check(self, topic: str, queue_count: int, queue_id: int) -> int:
        """A queue the sender named: it must exist and take writes."""
        if not 0 <= queue_id < queue_count:
            raise BadRequest(f"topic {topic!r} has no queue {queue_id} on this group (0..{queue_count - 1})")
        if queue_id in self._sealed(topic):
            to = self._moved_to(topic, queue_id)
            if to:
                raise QueueMoved(f"queue {queue_id} of topic {topic!r} moved to group {to}: refresh the routes",
                                 moved_to=to)
            raise QueueSealed(f"queue {queue_id} of topic {topic!r} is moving to another group: refresh the routes")
        return queue_id

    def select_round_robin(self, topic: str, queue_count: int, n: int) -> list[int]:
        """Queues for `n` messages without sharding keys: what `n` calls of `select` would give,
        taken as one run of the topic's positions (no Python step per message)."""
        if queue_count <= 0:
            raise BadRequest(f"topic {topic!r} has no writable queues")
        ids = self._writable(topic, queue_count)
        start = self._take(topic, n)
        positions = np.arange(start, start + n, dtype=np.int64)
        if ids is None:
            return (positions % queue_count).tolist()
        return np.asarray(ids, dtype=np.int64)[positions % len(ids)].tolist()

    def _take(self, topic: str, n: int) -> int:
        """The first of `n` consecutive round-robin positions of `topic`, reserved for the caller."""
        with self._lock:
            start = self._next.get(topic, 0)
            self._next[topic] = start + n
        return start


class MessageIdGenerator:
    """Unique client-style message ids (UNIQ_KEY) for halves that came without one.

    A transactional message keeps its UNIQ_KEY from half to final record, so
    the id a producer gets at prepare time is the id readers see after COMMIT.
    A random per-process prefix plus a counter: unique without per-id entropy.
    """

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:20].upper()
        self._next = 0
        self._lock = threading.Lock()

    def next_id(self) -> str:
        return self.next_ids(1)[0]

    def next_ids(self, n: int) -> list[str]:
        """`n` fresh ids, reserved as one block (one lock round per batch, not per message)."""
        with self._lock:
            start = self._next
            self._next = start + n
        prefix = self._prefix
        return [f"{prefix}{i:012X}" for i in range(start, start + n)]

    def assign(self, messages: list[Message]) -> list[str]:
        """Give every message without a UNIQ_KEY a new one; return all ids in order."""
        missing = [m.properties for m in messages if not m.properties.get(PROP_UNIQ_KEY)]
        for props, mid in zip(missing, self.next_ids(len(missing))):
            props[PROP_UNIQ_KEY] = mid
        return [m.properties[PROP_UNIQ_KEY] for m in messages]


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
        # Arrow map values arrive as a list of (key, value) pairs, protobuf maps as a mapping: update takes both.
        props.update(properties)
        for name in props:
            if not is_user_property(name) and name not in TIME_PROPERTIES and name not in CROSS_GROUP_PROPERTIES:
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


# Arrow columns that need no per-row checks beyond "has a topic, has a body".
PLAIN_COLUMNS = frozenset({"topic", "body"})


@dataclass
class PlainRows:
    """Messages that are only a topic and a body (queues chosen round-robin), as columns: the
    Spark sink's and most producers' rows, which need no Message object per row."""

    topics: list[str]
    body_column: pa.BinaryArray  # non-null, non-empty (checked)
    queue_ids: list[int]
    born_ms: int

    @property
    def bodies(self) -> list[bytes]:
        return self.body_column.to_pylist()

    def messages(self) -> list[Message]:
        return [Message(topic=t, body=b, queue_id=q, properties={}, born_timestamp=self.born_ms)
                for t, b, q in zip(self.topics, self.bodies, self.queue_ids)]


def _plain_rows(table: pa.Table, default_topic: str | None, born_ms: int, queue_count: QueueCountFn,
                selector: QueueSelector) -> PlainRows:
    """The rows of a table with only topic/body columns, checked ("has a topic, has a body": there
    are no properties to check) and given queues, one selector call per topic."""
    column = table.column("body").combine_chunks()
    if not pa.types.is_binary(column.type):
        column = column.cast(pa.binary())
    if "topic" in table.column_names:
        topics = [topic or default_topic for topic in table.column("topic").to_pylist()]
    else:
        topics = [default_topic] * len(column)
    if column.null_count or not all(topics) or (len(column) and pc.min(pc.binary_length(column)).as_py() == 0):
        for row, (topic, body) in enumerate(zip(topics, column.to_pylist())):
            _build_message(topic, body, None, None, None, None, None, born_ms, row)  # raises the typed error
    first = topics[0]
    if topics.count(first) == len(topics):
        queue_ids = selector.select_round_robin(first, queue_count(first), len(topics))
    else:
        queue_ids = [0] * len(topics)
        rows_of: dict[str, list[int]] = {}
        for row, topic in enumerate(topics):
            rows_of.setdefault(topic, []).append(row)
        for topic, rows in rows_of.items():
            for row, queue_id in zip(rows, selector.select_round_robin(topic, queue_count(topic), len(rows))):
                queue_ids[row] = queue_id
    return PlainRows(topics, column, queue_ids, born_ms)


def decode_rows(default_topic: str, table: pa.Table | None, specs: Sequence[native_pb2.MessageSpec],
                queue_count: QueueCountFn, selector: QueueSelector) -> PlainRows | list[Message]:
    """The messages of Arrow rows (`table`, first) and `specs`, queues assigned; rows with only
    topic/body columns come back as PlainRows. BadRequest names a malformed payload."""
    born_ms = int(time.time() * 1000)
    if table is not None:
        check_send_schema(table.schema)
        if not specs and table.num_rows and PLAIN_COLUMNS.issuperset(table.column_names):
            return _plain_rows(table, default_topic or None, born_ms, queue_count, selector)
    return _decode(default_topic or None, table, specs, born_ms, queue_count, selector)


def _decode(default_topic: str | None, table: pa.Table | None, specs: Sequence[native_pb2.MessageSpec],
            born_ms: int, queue_count: QueueCountFn, selector: QueueSelector) -> list[Message]:
    staged: list[tuple[Message, str | None]] = []
    if table is not None:
        rows = table.num_rows
        columns = zip(
            _column(table, "topic", rows), table.column("body").to_pylist(), _column(table, "tag", rows),
            _column(table, "keys", rows), _column(table, "properties", rows),
            _column(table, "shardingKey", rows), _column(table, "messageId", rows),
        )
        for row, (topic, body, tag, keys, props, skey, mid) in enumerate(columns):
            staged.append(_build_message(topic or default_topic, body, tag, keys, props, skey, mid, born_ms, row))
    offset = len(staged)
    fixed: dict[int, int] = {}  # staged index -> the queue its spec names
    for i, spec in enumerate(specs):
        staged.append(_build_message(spec.topic or default_topic, spec.body, spec.tag, spec.keys,
                                     spec.properties, spec.sharding_key, spec.message_id, born_ms, offset + i))
        if spec.HasField("queue_id"):
            fixed[offset + i] = spec.queue_id
    if not staged:
        raise BadRequest("the batch holds no messages")
    counts: dict[str, int] = {}
    for i, (message, sharding_key) in enumerate(staged):
        n = counts.get(message.topic)
        if n is None:
            n = counts[message.topic] = queue_count(message.topic)
        queue_id = fixed.get(i)
        message.queue_id = (selector.select(message.topic, n, sharding_key) if queue_id is None
                            else selector.check(message.topic, n, queue_id))
    return [m for m, _ in staged]
