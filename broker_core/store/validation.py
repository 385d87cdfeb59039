"""Checks on what producers hand the store, done before anything is written.

A refused batch must change nothing on disk, so every message of a batch is
checked (and its properties encoded) before the first byte is written. Each
refusal is a typed error whose message names the problem and the limit, because
that message is what a user sees in a failed Spark job or CLI call.
"""

from __future__ import annotations

import re

from txmq.broker.errors import (
    IllegalPropertyKey,
    IllegalQueue,
    IllegalTopic,
    MessageBodyEmpty,
    MessageBodyTooLarge,
    MessagePropertiesTooLarge,
)
from txmq.broker.store.message import PROP_CRC32, SYSTEM_TOPICS, Message
from txmq.broker.store.record import encode_properties

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_TOPIC_LENGTH = 127
MAX_QUEUE_ID = (1 << 31) - 1

_valid_topics: set[str] = set()


def check_topic_name(topic: str, *, allow_system: bool = False) -> None:
    """RocketMQ's topic rules: ^[%|a-zA-Z0-9_-]+$, at most 127 characters, not a system topic."""
    if topic in _valid_topics:
        return
    if topic in SYSTEM_TOPICS:
        if allow_system:
            return
        raise IllegalTopic(f"topic {topic!r} is a system topic and cannot be written by clients")
    if not isinstance(topic, str) or not topic:
        raise IllegalTopic("topic name is empty")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise IllegalTopic(f"topic name has {len(topic)} characters, the maximum is {MAX_TOPIC_LENGTH}")
    if not TOPIC_PATTERN.match(topic):
        raise IllegalTopic(f"topic name {topic!r} contains characters outside ^[%|a-zA-Z0-9_-]+$")
    if len(_valid_topics) < 100_000:
        _valid_topics.add(topic)


def check_batch(messages, *, max_body_bytes: int, max_properties_bytes: int, allow_system: bool = False) -> list[bytes]:
    """Validate a batch; return each message's encoded properties.

    The loop is the append hot path, so the common case is checked inline and
    anything unusual is handed to check_message, which names the problem.
    """
    out: list[bytes] = []
    valid = _valid_topics
    for m in messages:
        props = m.properties
        body = m.body
        if (m.topic not in valid or type(body) is not bytes or not 0 < len(body) <= max_body_bytes
                or not 0 <= m.queue_id <= MAX_QUEUE_ID or (props and PROP_CRC32 in props)):
            out.append(check_message(m, max_body_bytes=max_body_bytes, max_properties_bytes=max_properties_bytes,
                                     allow_system=allow_system))
            continue
        if not props:
            out.append(b"")
            continue
        raw = "".join([f"{k}\x01{v}\x02" for k, v in props.items()]).encode()
        n = len(props)
        if raw.count(1) != n or raw.count(2) != n or len(raw) > max_properties_bytes or "" in props:
            raw = check_message(m, max_body_bytes=max_body_bytes, max_properties_bytes=max_properties_bytes,
                                allow_system=allow_system)
        out.append(raw)
    return out


def check_message(msg: Message, *, max_body_bytes: int, max_properties_bytes: int,
                  allow_system: bool = False) -> bytes:
    """Validate one message; return its encoded properties (reused by the encoder)."""
    check_topic_name(msg.topic, allow_system=allow_system)
    body = msg.body
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise MessageBodyEmpty(f"message body must be bytes, got {type(body).__name__}")
    if not body:
        raise MessageBodyEmpty(f"message body of topic {msg.topic!r} is empty")
    if len(body) > max_body_bytes:
        raise MessageBodyTooLarge(f"message body is {len(body)} bytes, the maximum is {max_body_bytes}")
    if not 0 <= msg.queue_id <= MAX_QUEUE_ID:
        raise IllegalQueue(f"queue id {msg.queue_id} is out of range 0..{MAX_QUEUE_ID}")
    props = msg.properties
    if not props:
        return b""
    if PROP_CRC32 in props:
        raise IllegalPropertyKey(f"property {PROP_CRC32!r} is reserved for the store's record CRC")
    raw = encode_properties(props)
    # Each property contributes exactly one \x01 and one \x02; any extra means a
    # name or value contains a separator and the encoding would be ambiguous.
    if raw.count(1) != len(props) or raw.count(2) != len(props):
        bad = next(k for k, v in props.items() if "\x01" in k + v or "\x02" in k + v)
        raise IllegalPropertyKey(f"property {bad!r} contains a reserved separator character (\\x01 or \\x02)")
    if not all(props):
        raise IllegalPropertyKey("a property name is empty")
    if len(raw) > max_properties_bytes:
        raise MessagePropertiesTooLarge(
            f"encoded properties are {len(raw)} bytes, the maximum is {max_properties_bytes}")
    return raw
