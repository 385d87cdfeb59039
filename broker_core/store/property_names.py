"""Which message properties are the user's and which are RocketMQ's or txmq's own.

Readers see only user properties; writers may not set system ones (a forged
UNIQ_KEY or REAL_TOPIC would change how the broker treats the message).
"""

from __future__ import annotations

from txmq.broker.store import message as msgmod

# RocketMQ's system property names (MessageConst) that may ride on a record, plus txmq's own.
_ROCKETMQ_SYSTEM_PROPERTIES = frozenset({
    "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
    "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
    "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
    "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY",
    "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "SHARDING_KEY", "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID", "BORN_HOST", "BORN_TIMESTAMP", "TRACE_CONTEXT", "MESSAGE_GROUP",
})


def _txmq_system_properties() -> frozenset[str]:
    names = {value for name, value in vars(msgmod).items() if name.startswith("PROP_") and isinstance(value, str)}
    return frozenset(names)


SYSTEM_PROPERTIES = _ROCKETMQ_SYSTEM_PROPERTIES | _txmq_system_properties()


def is_user_property(name: str) -> bool:
    """User properties are everything that is not a RocketMQ/txmq system property."""
    return name not in SYSTEM_PROPERTIES and not name.startswith("__")


def user_properties(properties: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES and not k.startswith("__")}
