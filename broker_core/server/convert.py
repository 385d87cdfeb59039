"""Protobuf (RocketMQ 5 wire) ⇄ core messages.

A producer's `Message` becomes a store `Message` with RocketMQ's reserved
properties (TAGS, KEYS, UNIQ_KEY, __SHARDINGKEY, ...); a `StoredMessage` becomes
a delivered `Message` with the system properties consumers need (receipt handle,
delivery attempt, queue id/offset, store and born time, body encoding and an
MD5 body digest), field by field as Apache RocketMQ's proxy builds it.
Validation that only the wire can do (type vs properties, reserved user
property names, control characters, the proxy's size limits, digests) happens
here; sizes and names are checked again by the store before anything is written.
"""

from __future__ import annotations

import hashlib
import re
import zlib

from google.protobuf.timestamp_pb2 import Timestamp

from txmq.broker.errors import (BadRequest, IllegalMessageGroup, IllegalMessageId, IllegalMessageKey,
                                IllegalMessageTag, IllegalPropertyKey, IllegalTopic, MessageCorrupted,
                                MessagePropertiesTooLarge, PropertyConflictWithType, Unsupported)
from txmq.broker.protocol import rocketmq_v2_pb2 as pb
from txmq.broker.store.message import (PROP_BORN_HOST, PROP_TIMER_DELIVER_MS, PROP_KEYS, PROP_SHARDING_KEY, PROP_TAGS,
                                       PROP_TRAN_MSG, PROP_TRANSACTION_ID, PROP_UNIQ_KEY, SYSFLAG_COMPRESSED,
                                       SYSTEM_TOPICS, Message, StoredMessage)

TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
GROUP_RE = re.compile(r"^[%|a-zA-Z0-9_-]{1,255}$")
PROP_TRACE_CONTEXT = "__TRACE_CONTEXT"
PROP_DLQ_ORIGIN_TOPIC = "ORIGIN_TOPIC"  # set by pop.py on a message it moves to a dead-letter topic
PROP_MESSAGE_TYPE = "__MSG_TYPE"
# Property names RocketMQ reserves for itself: a user property may not use them.
RESERVED_PROPERTIES = frozenset({
    PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, PROP_TRANSACTION_ID, PROP_SHARDING_KEY, PROP_BORN_HOST,
    "TRAN_MSG", "REAL_TOPIC", "REAL_QID", "PGROUP", "DELAY", "WAIT", "RETRY_TOPIC", "MIN_OFFSET",
    "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG",
    "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
    "__STARTDELIVERTIME", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "TRANSACTION_CHECK_TIMES", "INNER_NUM", "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET", "__CRC32#", PROP_TRACE_CONTEXT, PROP_MESSAGE_TYPE,
})
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")
# The proxy's limits on what a producer sets (ProxyConfig's defaults).
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_BYTES = 16 * 1024  # user properties, tag and keys together
MAX_MESSAGE_GROUP_BYTES = 63  # the proxy refuses a group of 64 bytes or more
# Reserved properties the proxy still hands consumers among the user properties (they are not in
# RocketMQ's list of hidden ones): the FIFO group and the transaction id.
DELIVERED_SYSTEM_PROPERTIES = frozenset({PROP_SHARDING_KEY, PROP_TRANSACTION_ID})


_CHECKED_TOPICS: set[str] = set()  # names that passed check_topic: most calls reuse a few topics
_CHECKED_TOPICS_MAX = 4096


def check_topic(name: str) -> str:
    if name in _CHECKED_TOPICS:
        return name
    if not name:
        raise IllegalTopic("topic name is empty")
    if name in SYSTEM_TOPICS:
        raise IllegalTopic(f"topic {name!r} is a system topic and cannot be used by clients")
    if not TOPIC_RE.match(name):
        raise IllegalTopic(f"topic name {name[:200]!r} must match ^[%|a-zA-Z0-9_-]+$ and have at most 127 characters")
    if len(_CHECKED_TOPICS) < _CHECKED_TOPICS_MAX:
        _CHECKED_TOPICS.add(name)
    return name


def check_group(name: str) -> str:
    from txmq.broker.errors import IllegalConsumerGroup
    if not name:
        raise IllegalConsumerGroup("consumer group name is empty")
    if not GROUP_RE.match(name):
        raise IllegalConsumerGroup(
            f"consumer group {name[:200]!r} must match ^[%|a-zA-Z0-9_-]+$ and have at most 255 characters")
    return name


def _has_control(value: str) -> bool:
    """A character the proxy refuses in tags, keys, groups and properties (Java's ISO control range)."""
    return _CONTROL_RE.search(value) is not None


def _check_text(kind: str, value: str, error: type[Exception], *, allow_space: bool = True,
                max_bytes: int | None = None) -> None:
    """The proxy's checks of a tag, key or group: not blank, no control character; tags and keys
    have no size of their own (they count towards MAX_USER_PROPERTY_BYTES), groups do."""
    if not value or not value.strip():
        raise error(f"{kind} is empty or blank")
    if _has_control(value) or (not allow_space and " " in value):
        raise error(f"{kind} {value[:100]!r} contains a control or separator character")
    size = len(value.encode())
    if max_bytes is not None and size > max_bytes:
        raise error(f"{kind} has {size} bytes, the maximum is {max_bytes}")


def _ms(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def _ts(ms: int) -> Timestamp:
    t = Timestamp()
    t.seconds, rem = divmod(int(ms), 1000)
    t.nanos = rem * 1_000_000
    return t


def verify_digest(msg: pb.Message) -> None:
    if not msg.system_properties.HasField("body_digest"):
        return
    digest = msg.system_properties.body_digest
    if digest.type == pb.DIGEST_TYPE_UNSPECIFIED or not digest.checksum:
        return
    body = msg.body
    if digest.type == pb.CRC32:
        # clients write the CRC32 in hex with or without leading zeros (Java's is unpadded)
        crc = zlib.crc32(body) & 0xFFFFFFFF
        try:
            if int(digest.checksum, 16) == crc:
                return
        except ValueError:
            pass
        expected = format(crc, "X")
    elif digest.type == pb.MD5:
        expected = hashlib.md5(body).hexdigest()
    elif digest.type == pb.SHA1:
        expected = hashlib.sha1(body).hexdigest()
    else:
        raise BadRequest(f"unknown body digest type {digest.type}")
    if digest.checksum.lower() != expected.lower():
        raise MessageCorrupted(f"body digest {digest.checksum!r} does not match the body ({expected})")


def to_store_message(msg: pb.Message, *, born_host_fallback: str = "") -> Message:
    """The store message for one published message; raises the typed error for what is wrong."""
    topic = check_topic(msg.topic.name)
    sp = msg.system_properties
    mtype = sp.message_type or pb.NORMAL
    if mtype == pb.PRIORITY or sp.HasField("priority"):
        raise Unsupported("PRIORITY messages are not supported by txmq")
    if mtype == pb.LITE or sp.HasField("lite_topic"):
        raise Unsupported("LITE messages (lite topics) are not supported by txmq")
    if mtype not in (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION):
        raise BadRequest(f"unknown message type {mtype}")
    has_group = sp.HasField("message_group") and sp.message_group != ""
    has_delivery = sp.HasField("delivery_timestamp")
    if mtype == pb.FIFO and not has_group:
        raise PropertyConflictWithType("a FIFO message needs a message_group")
    if mtype != pb.FIFO and has_group:
        raise PropertyConflictWithType(
            f"message_group is only allowed on FIFO messages, not on {pb.MessageType.Name(mtype)}")
    if mtype == pb.DELAY and not has_delivery:
        raise PropertyConflictWithType("a DELAY message needs a delivery_timestamp")
    if mtype != pb.DELAY and has_delivery and mtype != pb.TRANSACTION:
        raise PropertyConflictWithType(
            f"delivery_timestamp is only allowed on DELAY messages, not on {pb.MessageType.Name(mtype)}")
    verify_digest(msg)
    props: dict[str, str] = {}
    user_bytes = 0
    if len(msg.user_properties) > MAX_USER_PROPERTIES:
        raise MessagePropertiesTooLarge(
            f"{len(msg.user_properties)} user properties, the maximum is {MAX_USER_PROPERTIES}")
    for key, value in (msg.user_properties.items() if msg.user_properties else ()):
        if not key or key in RESERVED_PROPERTIES or _has_control(key) or _has_control(value):
            raise IllegalPropertyKey(f"user property {key[:100]!r} is reserved or contains a control character")
        user_bytes += len(key.encode()) + len(value.encode())
        props[key] = value
    if sp.HasField("tag"):
        _check_text("tag", sp.tag, IllegalMessageTag)
        if "|" in sp.tag:
            raise IllegalMessageTag(f"tag {sp.tag[:100]!r} contains '|', which filter expressions reserve")
        user_bytes += len(sp.tag.encode())
        props[PROP_TAGS] = sp.tag
    if sp.keys:
        for k in sp.keys:
            _check_text("message key", k, IllegalMessageKey, allow_space=False)
            user_bytes += len(k.encode())
        props[PROP_KEYS] = " ".join(sp.keys)
    if user_bytes > MAX_USER_PROPERTY_BYTES:
        raise MessagePropertiesTooLarge(
            f"user properties, tag and keys take {user_bytes} bytes, the maximum is {MAX_USER_PROPERTY_BYTES}")
    if not sp.message_id.strip():
        raise IllegalMessageId("message id cannot be empty: RocketMQ 5 producers set system_properties.message_id")
    if len(sp.message_id) > 128 or _has_control(sp.message_id):
        raise IllegalMessageId(f"message id {sp.message_id[:100]!r} is too long or has control characters")
    props[PROP_UNIQ_KEY] = sp.message_id
    if has_group:
        _check_text("message group", sp.message_group, IllegalMessageGroup, max_bytes=MAX_MESSAGE_GROUP_BYTES)
        props[PROP_SHARDING_KEY] = sp.message_group
    if sp.HasField("trace_context") and sp.trace_context:
        props[PROP_TRACE_CONTEXT] = sp.trace_context
    if mtype == pb.FIFO:
        props[PROP_MESSAGE_TYPE] = "FIFO"
    sys_flag = SYSFLAG_COMPRESSED if sp.body_encoding == pb.GZIP else 0
    born_ms = _ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
    if born_ms < 0:
        born_ms = 0
    born_host = sp.born_host or born_host_fallback
    if born_host:
        props[PROP_BORN_HOST] = born_host[:128]
    return Message(topic=topic, body=bytes(msg.body), properties=props, sys_flag=sys_flag,
                   born_timestamp=born_ms)


def delivery_timestamp_ms(msg: pb.Message) -> int | None:
    sp = msg.system_properties
    return _ms(sp.delivery_timestamp) if sp.HasField("delivery_timestamp") else None


def message_type_of(msg: pb.Message) -> int:
    return msg.system_properties.message_type or pb.NORMAL


def to_wire_message(m: StoredMessage | Message, *, topic: str | None = None, receipt_handle: str | None = None,
                    delivery_attempt: int | None = None, invisible_ms: int | None = None,
                    transaction: bool = False, listen_port: int = 0) -> pb.Message:
    """A stored message as RocketMQ 5 consumers (and check-back handlers) expect it."""
    props = m.properties
    out = pb.Message(body=m.body)
    out.topic.name = topic or m.topic
    sp = out.system_properties
    for key, value in props.items():
        if key in DELIVERED_SYSTEM_PROPERTIES or (
                key not in RESERVED_PROPERTIES and not key.startswith("__TXMQ") and key not in (
                PROP_DLQ_ORIGIN_TOPIC, "RETRY_TIMES")):
            out.user_properties[key] = value
    tag = props.get(PROP_TAGS)
    if tag:
        sp.tag = tag
    keys = props.get(PROP_KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(" ") if k)
    stored = m if isinstance(m, StoredMessage) else None  # a half in the engine's cache has no place yet
    sp.message_id = props.get(PROP_UNIQ_KEY) or (stored.msg_id if stored is not None else "")
    # MD5 in upper-case hex as the proxy sends it: the Java client compares a CRC32 digest with an
    # unpadded hex string, so a zero-padded CRC32 marks one message in sixteen corrupted
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(m.body).hexdigest().upper()
    sp.body_encoding = pb.GZIP if m.sys_flag & SYSFLAG_COMPRESSED else pb.IDENTITY
    group = props.get(PROP_SHARDING_KEY)
    if group:  # a committed FIFO transactional message keeps its group, as in RocketMQ
        sp.message_group = group
    if transaction or props.get(PROP_TRAN_MSG) == "true":
        sp.message_type = pb.TRANSACTION
    elif group:
        sp.message_type = pb.FIFO
    elif PROP_TIMER_DELIVER_MS in props:  # a timer message put in its topic when due
        sp.message_type = pb.DELAY
        sp.delivery_timestamp.CopyFrom(_ts(int(props[PROP_TIMER_DELIVER_MS])))
    else:
        sp.message_type = pb.NORMAL
    store_ts = stored.store_timestamp if stored is not None else 0
    born = m.born_timestamp or store_ts
    sp.born_timestamp.CopyFrom(_ts(born))
    sp.born_host = props.get(PROP_BORN_HOST) or f"{m.born_host[0]}"
    if store_ts:
        sp.store_timestamp.CopyFrom(_ts(store_ts))
    if stored is not None:
        # a broker asked for port 0 stores before it knows its port: the port it listens on is the one
        host, port = stored.store_host
        sp.store_host = f"{host}:{port or listen_port}"
        sp.queue_offset = stored.queue_offset
    sp.queue_id = m.queue_id
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if delivery_attempt is not None:
        sp.delivery_attempt = delivery_attempt
    if invisible_ms is not None:
        sp.invisible_duration.seconds, rem = divmod(invisible_ms, 1000)
        sp.invisible_duration.nanos = rem * 1_000_000
    trace = props.get(PROP_TRACE_CONTEXT)
    if trace:
        sp.trace_context = trace
    origin = props.get(PROP_DLQ_ORIGIN_TOPIC)
    if origin and sp.message_id:  # read from a %DLQ% topic: where it came from, as the proxy tells it
        sp.dead_letter_queue.topic = origin
        sp.dead_letter_queue.message_id = sp.message_id
    return out
