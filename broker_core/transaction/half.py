"""Half messages: how a transactional send is parked, and how COMMIT restores it.

A half is the producer's message moved to `RMQ_SYS_TRANS_HALF_TOPIC` queue 0,
with its real topic and queue kept in properties (REAL_TOPIC, REAL_QID), its
producer group (PGROUP), transaction id and sender, and sysflag
TRANSACTION_PREPARED. Nothing but the transaction engine reads that queue, so a
half is invisible to every consumer of the real topic. On COMMIT the final
record is the half with the real topic/queue restored, sysflag COMMIT and
PREPAREDTRANSACTIONOFFSET pointing at the half (the engine has the store copy
the half's record: MessageStore.append_group_copies).

A half may carry an absolute delivery time (TIMER_DELIVER_MS: the native
client's `deliver_at_ms`, the Spark sink's `deliverAt`): COMMIT then copies it
into the timer's system topic instead (engine.SCHEDULED), so nothing is
scheduled before the COMMIT and a rolled-back transaction never delivers.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa

from txmq.broker.errors import (
    BadRequest,
    IllegalDeliveryTime,
    IllegalTopic,
    InvalidTransactionId,
)
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.record_block import RecordBlock
from txmq.broker.store.message import (
    HALF_TOPIC,
    PROP_CHECK_IMMUNITY_SECONDS,
    PROP_CRC32,
    PROP_DELAY_LEVEL,
    PROP_DELIVER_TIME_MS,
    PROP_PRODUCER_GROUP,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TIMER_DELIVER_MS,
    PROP_TRAN_MSG,
    PROP_TRANSACTION_ID,
    PROP_TX_SENDER,
    PROP_UNIQ_KEY,
    SYSFLAG_GROUP_BITS,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSTEM_TOPICS,
    Message,
    StoredMessage,
)
from txmq.broker.store.record import encode_host
from txmq.broker.timer.schedule import PROP_TIMER_DELAY_MS, PROP_TIMER_DELAY_SEC, check_deliver_ms

from .state import HalfRef

_DEFAULT_BORN_HOST_RAW = encode_host(Message.__dataclass_fields__["born_host"].default)[0]

# Engine time of the prepare (ms): the check-back clock survives a restart with it.
PROP_PREPARED_MS = "__TXMQ_PREPARED_MS"
# Delivery properties a transactional message may not carry: delay levels and relative delays would
# be ambiguous (counted from the prepare or from the COMMIT?); an absolute time is taken in the one
# spelling the timer reads, TIMER_DELIVER_MS, and scheduled only by the COMMIT (seed 001).
REFUSED_DELAY_PROPERTIES = (PROP_DELAY_LEVEL, PROP_DELIVER_TIME_MS, PROP_TIMER_DELAY_SEC, PROP_TIMER_DELAY_MS)
_TX_ID = re.compile(r"[\x21-\x7e]{1,256}")


def check_transaction_id(transaction_id: str) -> str:
    """Ids are printable ASCII without spaces, 1..256 chars: they travel in properties and logs."""
    if not isinstance(transaction_id, str) or not _TX_ID.fullmatch(transaction_id):
        raise InvalidTransactionId(
            f"transaction id {transaction_id!r} is invalid: 1..256 printable ASCII characters, no spaces")
    return transaction_id


def check_transactional_topics(topics: Sequence[str]) -> None:
    """A transactional send has at least one message, and only to user topics."""
    if not topics:
        raise BadRequest("a transactional send needs at least one message")
    for topic in set(topics):
        if topic in SYSTEM_TOPICS:
            raise IllegalTopic(f"topic {topic!r} is a system topic: transactional sends go to user topics")


def check_transactional(messages: Sequence[Message], *, now_ms: int, max_delay_ms: int) -> int | None:
    """Refuse what a transactional message may not carry, before anything is written: a delay
    level or relative delay, or a TIMER_DELIVER_MS that is not an integer or lies past the
    horizon (`max_delay_ms` from `now_ms`, the timer's rule); the error names the message.

    Returns the largest CHECK_IMMUNITY_TIME_IN_SECONDS among the messages (None if none has one).
    """
    check_transactional_topics([m.topic for m in messages])
    immunity: int | None = None
    for row, m in enumerate(messages):
        props = m.properties
        if not props:
            continue
        for prop in REFUSED_DELAY_PROPERTIES:
            if prop in props:
                raise IllegalDeliveryTime(
                    f"transactional message {row} to {m.topic!r} carries delivery property {prop}="
                    f"{props[prop]!r}: delay levels and relative delays are refused on transactions "
                    f"(give an absolute {PROP_TIMER_DELIVER_MS}, epoch ms)")
        raw_time = props.get(PROP_TIMER_DELIVER_MS)
        if raw_time is not None:
            _check_delivery_time(row, m.topic, raw_time, now_ms, max_delay_ms)
        raw = props.get(PROP_CHECK_IMMUNITY_SECONDS)
        if raw is not None:
            if not _is_non_negative_int(raw):
                raise BadRequest(f"{PROP_CHECK_IMMUNITY_SECONDS}={raw!r} is not a non-negative integer")
            immunity = max(immunity or 0, int(raw))
    return immunity


def _check_delivery_time(row: int, topic: str, raw: str, now_ms: int, max_delay_ms: int) -> None:
    if not (raw.isascii() and raw.isdigit()):
        raise IllegalDeliveryTime(f"transactional message {row} to {topic!r}: {PROP_TIMER_DELIVER_MS}="
                                  f"{raw[:40]!r} is not a delivery time in epoch milliseconds")
    try:
        check_deliver_ms(int(raw), now_ms, max_delay_ms)
    except IllegalDeliveryTime as e:
        raise IllegalDeliveryTime(f"transactional message {row} to {topic!r}: {PROP_TIMER_DELIVER_MS}={raw}: {e}") \
            from None


def _is_non_negative_int(text: str) -> bool:
    return text.isascii() and text.isdigit()


def build_halves(messages: Sequence[Message], *, transaction_id: str, producer_group: str, sender: str,
                 prepared_ms: int) -> list[Message]:
    """The half records for one prepare call (the inputs are not modified).

    Only the first half of a call carries the prepare time: a call's halves are
    one store group, so recovery always meets that half first.
    """
    halves = []
    extra = {PROP_TRANSACTION_ID: transaction_id, PROP_TRAN_MSG: "true", PROP_PRODUCER_GROUP: producer_group}
    if sender:  # no sender property means the empty sender: one property less per record
        extra[PROP_TX_SENDER] = sender
    prepared: str | None = str(prepared_ms)
    prepared_flag = _with_tx_type(0, SYSFLAG_TRANSACTION_PREPARED)
    for m in messages:
        props = {**m.properties, PROP_REAL_TOPIC: m.topic, PROP_REAL_QUEUE_ID: str(m.queue_id), **extra}
        if PROP_TIMER_DELIVER_MS in props:
            # last, never first: the timer finds it in a scheduled copy's raw bytes after a separator
            props[PROP_TIMER_DELIVER_MS] = props.pop(PROP_TIMER_DELIVER_MS)
        if prepared is not None:
            props[PROP_PREPARED_MS] = prepared
            prepared = None
        if PROP_CRC32 in props:
            del props[PROP_CRC32]
        flag = prepared_flag if not m.sys_flag else _with_tx_type(m.sys_flag, SYSFLAG_TRANSACTION_PREPARED)
        halves.append(Message(HALF_TOPIC, m.body, 0, props, m.flag, flag, m.born_timestamp, m.born_host,
                              m.reconsume_times))
    return halves


def build_half_columns(topics: Sequence[str], bodies: pa.BinaryArray | Sequence[bytes], queue_ids: Sequence[int],
                       unique_keys: Sequence[str] | None, *, born_timestamp: int, transaction_id: str,
                       producer_group: str, sender: str, prepared_ms: int,
                       extra: Mapping[str, str] | None = None) -> BatchColumns:
    """build_halves for messages that are a topic, a body, a queue and a UNIQ_KEY (None: no
    UNIQ_KEY, as a plain send's row over the native service has none), as an encoded batch (for
    MessageStore.append_group_encoded): the same records, as a RecordBlock over the bodies
    (an Arrow column is read in place), each half's property string made from one %-template
    instead of a property dict per half."""
    for what, value in (("producer group", producer_group), ("sender", sender)):
        if "\x01" in value or "\x02" in value:
            raise BadRequest(f"{what} {value[:100]!r} contains a property separator (\\x01 or \\x02)")
    if not isinstance(bodies, pa.Array):
        if set(map(type, bodies)) != {bytes}:
            raise BadRequest("message bodies must be bytes")
        bodies = pa.array(bodies, type=pa.binary())
    n = len(topics)
    assert len(bodies) == n == len(queue_ids), (len(bodies), n, len(queue_ids))
    fixed = {PROP_TRANSACTION_ID: transaction_id, PROP_TRAN_MSG: "true", PROP_PRODUCER_GROUP: producer_group}
    if sender:
        fixed[PROP_TX_SENDER] = sender
    fixed.update(extra or {})  # a cross-group transaction's coordinator and participants (decision.py)
    tail = "".join(f"{k}\x01{v}\x02" for k, v in fixed.items()).replace("%", "%%")
    template = f"{PROP_REAL_TOPIC}\x01%s\x02{PROP_REAL_QUEUE_ID}\x01%d\x02{tail}"
    columns: list[Sequence] = [topics, queue_ids]
    if unique_keys is not None:
        template = f"{PROP_UNIQ_KEY}\x01%s\x02" + template
        columns.insert(0, unique_keys)
    crc_name = PROP_CRC32 + "\x01"
    if unique_keys is None:
        # a half's properties then depend on its (topic, queue) alone: one string per distinct pair
        props, which = _props_per_queue(template + crc_name, topics, queue_ids)
    else:
        props = list(map(str.encode, map((template + crc_name).__mod__, zip(*columns))))
        which = np.arange(n, dtype=np.int64)
    # the first half of a call carries the prepare time (recovery meets it first: one group)
    props.append(((template % tuple(c[0] for c in columns))
                  + f"{PROP_PREPARED_MS}\x01{prepared_ms}\x02{crc_name}").encode())
    which[0] = len(props) - 1
    block = RecordBlock.of_new_records(bodies, props, which, born_ts=born_timestamp, born_host=_DEFAULT_BORN_HOST_RAW)
    return BatchColumns.of_block(block, topics=[HALF_TOPIC] * n, queue_ids=[0] * n,
                                 sys_flags=[_with_tx_type(0, SYSFLAG_TRANSACTION_PREPARED)] * n, tags=[None] * n,
                                 uniq_keys=list(unique_keys) if unique_keys is not None else [None] * n,
                                 keys=[None] * n)


def _props_per_queue(template: str, topics: Sequence[str], queue_ids: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
    """template % (topic, queue id) encoded, once per distinct (topic, queue) (a Spark task's rows
    go to one topic's few queues), and which of them each half takes."""
    n = len(topics)
    if n and topics.count(topics[0]) == n:
        topic = topics[0]
        distinct, which = np.unique(np.asarray(queue_ids, dtype=np.int64), return_inverse=True)
        return [(template % (topic, q)).encode() for q in distinct.tolist()], which.astype(np.int64).reshape(-1)
    pairs = list(zip(topics, queue_ids))
    index: dict[tuple[str, int], int] = {}
    which = np.fromiter((index.setdefault(pair, len(index)) for pair in pairs), dtype=np.int64, count=n)
    return [(template % pair).encode() for pair in index], which


def half_ref_from_stored(stored: StoredMessage) -> HalfRef:
    """The table's reference to a half read back from the half queue (recovery)."""
    props = stored.properties
    return HalfRef(stored.physical_offset, stored.size, stored.queue_offset, props[PROP_REAL_TOPIC],
                   int(props[PROP_REAL_QUEUE_ID]), props.get(PROP_TX_SENDER, ""))


def prepared_ms(half: Message) -> int | None:
    """The engine time of the prepare call, carried by the first half of each call."""
    raw = half.properties.get(PROP_PREPARED_MS, "")
    return int(raw) if raw.isdigit() else None


def immunity_ms(override_s: int | None, default_s: float, cap_s: float) -> int:
    """Check-back immunity: CHECK_IMMUNITY_TIME_IN_SECONDS when given, else the default; capped."""
    seconds = override_s if override_s is not None else default_s
    return int(min(seconds, cap_s) * 1000)


def stored_immunity_s(half: Message) -> int | None:
    raw = half.properties.get(PROP_CHECK_IMMUNITY_SECONDS)
    return int(raw) if raw is not None and _is_non_negative_int(raw) else None


def _with_tx_type(sys_flag: int, tx_type: int) -> int:
    return (sys_flag & ~SYSFLAG_TRANSACTION_MASK & ~SYSFLAG_GROUP_BITS) | tx_type
