"""What makes a message a timer message, and how it is stored until due.

A message is scheduled when it carries a delivery time: RocketMQ 5's
`TIMER_DELIVER_MS` (the gRPC `delivery_timestamp`), the older
`__STARTDELIVERTIME`, a relative `TIMER_DELAY_SEC` / `TIMER_DELAY_MS`, or
RocketMQ 4's delay level `DELAY` (1..18). A scheduled message is stored in the
system topic TIMER_TOPIC (queue 0) with its real topic and queue in properties,
as RocketMQ stores it; the timer service (service.py) puts a copy in the real
topic when it is due.
"""

from __future__ import annotations

from copy import copy
from typing import Sequence

from txmq.broker.errors import IllegalDeliveryTime
from txmq.broker.store.message import (
    PROP_DELAY_LEVEL,
    PROP_DELIVER_TIME_MS,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TIMER_DELIVER_MS,
    TIMER_TOPIC,
    Message,
)

PROP_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROP_TIMER_DELAY_MS = "TIMER_DELAY_MS"

# RocketMQ 4's messageDelayLevel default: level n (1-based) waits DELAY_LEVELS_S[n - 1] seconds.
DELAY_LEVELS_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)

DEFAULT_MAX_DELAY_S = 24 * 3600.0  # RocketMQ 5 proxy's maxDelayTimeMills default (its broker allows 3 days)

TIME_PROPERTIES = _TIME_PROPERTIES = (PROP_TIMER_DELIVER_MS, PROP_DELIVER_TIME_MS, PROP_TIMER_DELAY_SEC, PROP_TIMER_DELAY_MS,
                    PROP_DELAY_LEVEL)


def has_delivery_time(properties: dict[str, str]) -> bool:
    return any(name in properties for name in _TIME_PROPERTIES)


def _int(properties: dict[str, str], name: str) -> int:
    raw = properties[name]
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise IllegalDeliveryTime(f"{name} must be an integer, got {str(raw)[:40]!r}") from None


def deliver_ms_of(properties: dict[str, str], now_ms: int) -> int | None:
    """The delivery time (epoch ms) a message's properties ask for, or None for none."""
    if PROP_TIMER_DELIVER_MS in properties:
        return _int(properties, PROP_TIMER_DELIVER_MS)
    if PROP_DELIVER_TIME_MS in properties:
        return _int(properties, PROP_DELIVER_TIME_MS)
    if PROP_TIMER_DELAY_SEC in properties:
        return now_ms + 1000 * _int(properties, PROP_TIMER_DELAY_SEC)
    if PROP_TIMER_DELAY_MS in properties:
        return now_ms + _int(properties, PROP_TIMER_DELAY_MS)
    if PROP_DELAY_LEVEL in properties:
        level = _int(properties, PROP_DELAY_LEVEL)
        if level <= 0:  # RocketMQ treats level 0 as "no delay"
            return None
        if level > len(DELAY_LEVELS_S):
            raise IllegalDeliveryTime(f"delay level {level} is not one of 1..{len(DELAY_LEVELS_S)}")
        return now_ms + 1000 * DELAY_LEVELS_S[level - 1]
    return None


def check_deliver_ms(deliver_ms: int, now_ms: int, max_delay_ms: int) -> None:
    """Refuse a delivery time past the horizon (RocketMQ's timerMaxDelaySec)."""
    if deliver_ms - now_ms > max_delay_ms:
        # the proxy's text first (users match on it), then what this broker's setting is called
        raise IllegalDeliveryTime(
            f"the max delay time of message is too large, max is {max_delay_ms}: delivery time {deliver_ms} is "
            f"{(deliver_ms - now_ms) / 1000:.0f}s away (timer_max_delay)")


def _schedule_in_place(m: Message, deliver_ms: int) -> None:
    # REAL_TOPIC first: TIMER_DELIVER_MS is never the first property, so the timer finds it in
    # the raw record after a separator (TimerService._deliver_times)
    props = {PROP_REAL_TOPIC: m.topic, PROP_REAL_QUEUE_ID: str(m.queue_id), **m.properties}
    for name in _TIME_PROPERTIES:
        props.pop(name, None)
    props[PROP_TIMER_DELIVER_MS] = str(deliver_ms)
    m.topic, m.queue_id, m.properties = TIMER_TOPIC, 0, props


def scheduled(message: Message, deliver_ms: int) -> Message:
    """The record stored in TIMER_TOPIC for `message` (its real topic and queue kept in properties)."""
    m = copy(message)
    _schedule_in_place(m, deliver_ms)
    return m


def schedule_all(messages: Sequence[Message], now_ms: int, max_delay_ms: int) -> Sequence[Message]:
    """Turn, in place, every message of `messages` that asks for a future delivery time into its
    scheduled record; one asking for a time already past is written to its topic at once, keeping
    that time as TIMER_DELIVER_MS (RocketMQ's broker keeps it too: consumers see a DELAY message
    with its delivery_timestamp). The caller owns the messages (a send's freshly decoded ones). Raises
    IllegalDeliveryTime, changing nothing, when any asks for more than the horizon."""
    plan = []
    for m in messages:
        props = m.properties
        if not props or props.keys().isdisjoint(_TIME_PROPERTIES):
            continue
        deliver_ms = deliver_ms_of(props, now_ms)
        if deliver_ms is not None and deliver_ms > now_ms:
            check_deliver_ms(deliver_ms, now_ms, max_delay_ms)
        plan.append((m, deliver_ms))
    for m, deliver_ms in plan:  # every message checked: now change them
        if deliver_ms is None or deliver_ms <= now_ms:
            m.properties = {k: v for k, v in m.properties.items() if k not in _TIME_PROPERTIES}
            if deliver_ms is not None:
                m.properties[PROP_TIMER_DELIVER_MS] = str(deliver_ms)
        else:
            _schedule_in_place(m, deliver_ms)
    return messages
