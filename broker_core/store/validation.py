"""Checks on what producers hand the store, done before anything is written.

A refused batch must change nothing on disk, so every message of a batch is
checked (and its properties encoded) before the first byte is written. Each
refusal is a typed error whose message names the problem and the limit, because
that message is what a user sees in a failed Spark job or CLI call.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Sequence

from txmq.broker.errors import (
    BadRequest,
    IllegalPropertyKey,
    IllegalQueue,
    IllegalTopic,
    MessageBodyEmpty,
    MessageBodyTooLarge,
    MessagePropertiesTooLarge,
)
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.message import PROP_CRC32, SYSTEM_TOPICS, Message
from txmq.broker.store.record import encode_properties
from txmq.broker.store.record_layout import PROP_NAME_SEP, PROP_SEP

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


def check_columns(batch: BatchColumns, *, max_body_bytes: int, max_properties_bytes: int,
                  allow_system: bool = False) -> BatchColumns:
    """Validate a batch given as columns; fill `body_lens` and `props_raw`; return the batch.

    The append hot path: each rule is checked once for the whole batch (min/max of
    lengths, separator counts of all properties at once). Any doubt sends the batch
    through `_check_sequentially`, which raises the first message's error exactly as
    a message-by-message check would, so the fast path never changes what is refused.
    """
    try:
        ok = _check_fast(batch, max_body_bytes, max_properties_bytes, allow_system)
    except (TypeError, ValueError, AttributeError, UnicodeError):
        ok = False
    if not ok:
        batch.props_raw = _check_sequentially(batch.messages, max_body_bytes=max_body_bytes,
                                              max_properties_bytes=max_properties_bytes, allow_system=allow_system)
        batch.body_lens = list(map(len, batch.bodies))
    return batch


def check_encoded_columns(batch: BatchColumns, *, max_body_bytes: int, max_properties_bytes: int) -> None:
    """The store's own limits for a batch its caller encoded (MessageStore.append_group_encoded):
    bodies are non-empty bytes within max_body_bytes, each property string within
    max_properties_bytes, topics valid names (system topics allowed), queue ids in range.
    Fills `body_lens` of list columns (a RecordBlock has its own). Raises the same typed errors as
    check_columns."""
    for topic in set(batch.topics):
        check_topic_name(topic, allow_system=True)
    if batch.block is not None:  # a block's bodies are bytes by construction (RecordBlock)
        lens = batch.block.body_len
        shortest, longest_body = int(lens.min()), int(lens.max())
        longest_props = int(batch.block.props_len.max())
    else:
        bodies = batch.bodies
        if set(map(type, bodies)) != {bytes}:
            raise BadRequest("message bodies must be bytes")
        lens = batch.body_lens = list(map(len, bodies))
        shortest, longest_body = min(lens), max(lens)
        longest_props = max(map(len, batch.props_crc))
    if shortest <= 0:
        raise MessageBodyEmpty(f"message body of topic {batch.topics[list(lens).index(shortest)]!r} is empty")
    if longest_body > max_body_bytes:
        raise MessageBodyTooLarge(f"message body is {longest_body} bytes, the maximum is {max_body_bytes}")
    if min(batch.queue_ids) < 0 or max(batch.queue_ids) > MAX_QUEUE_ID:
        raise IllegalQueue(f"a queue id is out of range 0..{MAX_QUEUE_ID}")
    longest = longest_props - len(_CRC_NAME_RAW)
    if longest > max_properties_bytes:
        raise MessagePropertiesTooLarge(
            f"properties are {longest} bytes encoded, the maximum is {max_properties_bytes}")


_J1 = PROP_NAME_SEP.join
_J2 = PROP_SEP.join
_CRC_NAME = PROP_CRC32 + PROP_NAME_SEP
_CRC_NAME_RAW = _CRC_NAME.encode()
_EMPTY_NAME_RAW = (PROP_SEP + PROP_NAME_SEP).encode()


def _check_fast(batch: BatchColumns, max_body_bytes: int, max_properties_bytes: int, allow_system: bool) -> bool:
    """True if the whole batch is certainly valid (and its properties encoded); False if unsure."""
    topics = set(batch.topics)
    if not _valid_topics.issuperset(topics):
        for topic in topics.difference(_valid_topics):
            if topic in SYSTEM_TOPICS:
                if not allow_system:
                    return False
                continue
            try:
                check_topic_name(topic)
            except IllegalTopic:
                return False
    bodies = batch.bodies
    if len(set(map(type, bodies))) != 1 or type(bodies[0]) is not bytes:
        return False
    lens = batch.body_lens = list(map(len, bodies))
    if min(lens) <= 0 or max(lens) > max_body_bytes:
        return False
    qids = batch.queue_ids
    if min(qids) < 0 or max(qids) > MAX_QUEUE_ID:
        return False
    props = batch.properties
    names = set(map(tuple, props))
    if len(names) == 1:
        return _check_one_template(batch, *names, max_properties_bytes)
    if len(names) <= MAX_TEMPLATES:
        return _check_few_templates(batch, names, max_properties_bytes)
    raws = batch.props_raw = encode_properties_of(props)
    joined = b"".join(raws)
    if not joined:
        return True
    n = sum(map(len, props))
    # Each property adds exactly one \x01 and one \x02: any other means a separator
    # inside a name or value. A name that is empty shows as \x01 right after a \x02
    # (or at the start); the reserved CRC name as "__CRC32#\x01" (a longer name ending
    # with it is a false alarm the sequential check settles).
    return (joined.count(1) == n and joined.count(2) == n and _CRC_NAME_RAW not in joined
            and _EMPTY_NAME_RAW not in joined and joined[0] != 1 and max(map(len, raws)) <= max_properties_bytes)


def _check_one_template(batch: BatchColumns, names: tuple, max_properties_bytes: int) -> bool:
    """The common case: every message has the same property names in the same order.

    The names are checked once (in `_template_for`), the values all at once: joined
    into one string, they must hold no separator (a value that is not a str makes
    the join fail: the sequential check then encodes it, as str() of it). Each
    message then costs one template format and one encode, which yield the
    record's property string up to the CRC digits (`props_crc`).
    """
    template = _templates.get(names) or _template_for(names)
    if template is None:
        return False
    props = batch.properties
    if not names:
        batch.props_crc = [_CRC_NAME_RAW] * len(props)
        return True
    values = list(map(tuple, map(dict.values, props)))
    joined = "".join(chain.from_iterable(values))
    if PROP_NAME_SEP in joined or PROP_SEP in joined:
        return False
    crcs = batch.props_crc = list(map(str.encode, map(template.__mod__, values)))
    return max(map(len, crcs)) - len(_CRC_NAME_RAW) <= max_properties_bytes


MAX_TEMPLATES = 4  # a batch with more distinct property-name tuples is encoded by joining


def _check_few_templates(batch: BatchColumns, names: set[tuple], max_properties_bytes: int) -> bool:
    """_check_one_template for a batch with a few property-name tuples, one template each.

    A transaction's halves are such a batch (the first half of each prepare call
    carries the prepare time, the others do not), as is a COMMIT's group (final
    records and the op record).
    """
    templates = {}
    for key in names:
        template = _templates.get(key) or _template_for(key)
        if template is None:
            return False
        templates[key] = template
    props = batch.properties
    values = list(map(tuple, map(dict.values, props)))
    joined = "".join(chain.from_iterable(values))
    if PROP_NAME_SEP in joined or PROP_SEP in joined:
        return False
    formats = map(templates.__getitem__, map(tuple, props))
    crcs = batch.props_crc = list(map(str.encode, map(str.__mod__, formats, values)))
    return max(map(len, crcs)) - len(_CRC_NAME_RAW) <= max_properties_bytes


_templates: dict[tuple[str, ...], str] = {}


def _template_for(names: tuple) -> str | None:
    """The %-template `name\x01%s\x02...__CRC32#\x01` of a property-name tuple, or None
    if a name is not certainly valid (not a str, empty, holding a separator, reserved):
    then the sequential check decides (and names the error)."""
    if not all(type(k) is str and k and "\x01" not in k and "\x02" not in k and k != PROP_CRC32 for k in names):
        return None
    if len(_templates) > 4096:
        _templates.clear()
    template = _templates[names] = "".join([k.replace("%", "%%") + "\x01%s\x02" for k in names]) + _CRC_NAME
    return template


def encode_properties_of(props: Sequence[dict[str, str]]) -> list[bytes]:
    """encode_properties() for each message of a batch."""
    # name \x01 value \x02 per property (RocketMQ's property string)
    return [(_J2(map(_J1, p.items())) + PROP_SEP).encode() if p else b"" for p in props]


def _check_sequentially(messages, *, max_body_bytes: int, max_properties_bytes: int,
                        allow_system: bool = False) -> list[bytes]:
    """Validate message by message (raising the first message's error); return encoded properties."""
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
        try:  # `+` (not an f-string) so that a name or value that is not a str raises, not str()s
            raw = "".join([k + "\x01" + v + "\x02" for k, v in props.items()]).encode()
        except TypeError:
            raw = check_message(m, max_body_bytes=max_body_bytes, max_properties_bytes=max_properties_bytes,
                                allow_system=allow_system)
            out.append(raw)
            continue
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
    bad_type = next((k for k, v in props.items() if type(k) is not str or type(v) is not str), None)
    if bad_type is not None:
        # The record would hold str() of it while the index saw the object itself.
        raise IllegalPropertyKey(f"property {bad_type!r}: names and values must be str, "
                                 f"got {type(props[bad_type]).__name__}")
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
