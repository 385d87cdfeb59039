"""Half messages: how a transactional send is parked, and how COMMIT restores it.

A half is the producer's message moved to `RMQ_SYS_TRANS_HALF_TOPIC` queue 0,
with its real topic and queue kept in properties (REAL_TOPIC, REAL_QID), its
producer group (PGROUP), transaction id and sender, and sysflag
TRANSACTION_PREPARED. Nothing but the transaction engine reads that queue, so a
half is invisible to every consumer of the real topic. On COMMIT the final
record is the half with the real topic/queue restored, sysflag COMMIT and
PREPAREDTRANSACTIONOFFSET pointing at the half.
"""

from __future__ import annotations

import re
from typing import Sequence

from txmq.broker.errors import (
    BadRequest,
    IllegalDeliveryTime,
    IllegalTopic,
    InvalidTransactionId,
)
from txmq.broker.store.message import (
    CHECK_MAX_TIME_TOPIC,
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
    SYSFLAG_GROUP_END,
    SYSFLAG_GROUP_MEMBER,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSTEM_TOPICS,
    Message,
    StoredMessage,
)

from .state import HalfRef

# Engine time of the prepare (ms): the check-back clock survives a restart with it.
PROP_PREPARED_MS = "__TXMQ_PREPARED_MS"
DELAY_PROPERTIES = (PROP_DELAY_LEVEL, PROP_DELIVER_TIME_MS, PROP_TIMER_DELIVER_MS)
# Properties that exist only while a message is a half.
HALF_ONLY_PROPERTIES = (PROP_REAL_TOPIC, PROP_REAL_QUEUE_ID, PROP_PREPARED_MS, PROP_CRC32)
_TX_ID = re.compile(r"[\x21-\x7e]{1,256}")
_GROUP_BITS = SYSFLAG_GROUP_MEMBER | SYSFLAG_GROUP_END


def check_transaction_id(transaction_id: str) -> str:
    """Ids are printable ASCII without spaces, 1..256 chars: they travel in properties and logs."""
    if not isinstance(transaction_id, str) or not _TX_ID.fullmatch(transaction_id):
        raise InvalidTransactionId(
            f"transaction id {transaction_id!r} is invalid: 1..256 printable ASCII characters, no spaces")
    return transaction_id


def check_transactional(messages: Sequence[Message]) -> None:
    """Refuse what a transactional message may not carry, before anything is written."""
    if not messages:
        raise BadRequest("a transactional send needs at least one message")
    for m in messages:
        if m.topic in SYSTEM_TOPICS:
            raise IllegalTopic(f"topic {m.topic!r} is a system topic: transactional sends go to user topics")
        for prop in DELAY_PROPERTIES:
            if prop in m.properties:
                raise IllegalDeliveryTime(
                    f"transactional message to {m.topic!r} carries delivery property {prop}="
                    f"{m.properties[prop]!r}: delay levels and delivery times are refused on transactions")
        immunity = m.properties.get(PROP_CHECK_IMMUNITY_SECONDS)
        if immunity is not None and not _is_non_negative_int(immunity):
            raise BadRequest(f"{PROP_CHECK_IMMUNITY_SECONDS}={immunity!r} is not a non-negative integer")


def _is_non_negative_int(text: str) -> bool:
    return text.isascii() and text.isdigit()


def build_half(message: Message, *, transaction_id: str, producer_group: str, sender: str,
               prepared_ms: int) -> Message:
    """The half record for one producer message (the input is not modified)."""
    props = dict(message.properties)
    props.pop(PROP_CRC32, None)
    props[PROP_REAL_TOPIC] = message.topic
    props[PROP_REAL_QUEUE_ID] = str(message.queue_id)
    props[PROP_TRANSACTION_ID] = transaction_id
    props[PROP_TRAN_MSG] = "true"
    props[PROP_PRODUCER_GROUP] = producer_group
    props[PROP_TX_SENDER] = sender
    props[PROP_PREPARED_MS] = str(prepared_ms)
    return Message(
        topic=HALF_TOPIC,
        body=message.body,
        queue_id=0,
        properties=props,
        flag=message.flag,
        sys_flag=_with_tx_type(message.sys_flag, SYSFLAG_TRANSACTION_PREPARED),
        born_timestamp=message.born_timestamp,
        born_host=message.born_host,
        reconsume_times=message.reconsume_times,
    )


def build_final(half: Message, half_physical_offset: int) -> Message:
    """The committed record: the half with its real topic/queue back, sysflag COMMIT."""
    props = {k: v for k, v in half.properties.items() if k not in HALF_ONLY_PROPERTIES}
    return Message(
        topic=half.properties[PROP_REAL_TOPIC],
        body=half.body,
        queue_id=int(half.properties[PROP_REAL_QUEUE_ID]),
        properties=props,
        flag=half.flag,
        sys_flag=_with_tx_type(half.sys_flag, SYSFLAG_TRANSACTION_COMMIT),
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half_physical_offset,
    )


def build_discard_copy(half: Message, half_physical_offset: int) -> Message:
    """The copy kept in TRANS_CHECK_MAX_TIME_TOPIC for an admin (RocketMQ's discard destination)."""
    props = {k: v for k, v in half.properties.items() if k != PROP_CRC32}
    return Message(
        topic=CHECK_MAX_TIME_TOPIC,
        body=half.body,
        queue_id=0,
        properties=props,
        flag=half.flag,
        sys_flag=_with_tx_type(half.sys_flag, SYSFLAG_TRANSACTION_NOT_TYPE),
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half_physical_offset,
    )


def half_ref(half: Message, *, physical_offset: int, size: int, half_queue_offset: int,
             cache: bool) -> HalfRef:
    """The table's reference to a half (from the appended message or one read back)."""
    return HalfRef(
        physical_offset=physical_offset,
        size=size,
        half_queue_offset=half_queue_offset,
        real_topic=half.properties[PROP_REAL_TOPIC],
        real_queue_id=int(half.properties[PROP_REAL_QUEUE_ID]),
        sender=half.properties.get(PROP_TX_SENDER, ""),
        cached=half if cache else None,
    )


def half_ref_from_stored(stored: StoredMessage) -> HalfRef:
    return half_ref(stored, physical_offset=stored.physical_offset, size=stored.size,
                    half_queue_offset=stored.queue_offset, cache=False)


def prepared_ms(half: Message) -> int:
    raw = half.properties.get(PROP_PREPARED_MS, "")
    return int(raw) if raw.isdigit() else half.born_timestamp


def immunity_ms(half: Message, default_s: float, cap_s: float) -> int:
    """The check-back immunity of one half: its CHECK_IMMUNITY_TIME_IN_SECONDS or the default, capped."""
    raw = half.properties.get(PROP_CHECK_IMMUNITY_SECONDS)
    seconds = float(raw) if raw is not None and _is_non_negative_int(raw) else default_s
    return int(min(seconds, cap_s) * 1000)


def _with_tx_type(sys_flag: int, tx_type: int) -> int:
    return (sys_flag & ~SYSFLAG_TRANSACTION_MASK & ~_GROUP_BITS) | tx_type
