"""COMMIT of halves that carry a delivery time: their copies are scheduled (written to the timer's
queue in the COMMIT's own store group), never before the COMMIT, never on ROLLBACK."""

from __future__ import annotations

import pytest

from txmq.broker.errors import IllegalDeliveryTime, UnknownTransaction
from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import (
    OP_HALF_TOPIC,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TIMER_DELIVER_MS,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    TIMER_TOPIC,
    Message,
)
from txmq.broker.store.message_store import MessageStore
from txmq.broker.store.record_copy import COLUMNAR_MIN_SLOTS
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine

from .conftest import msg

COMMIT, ROLLBACK = Resolution.COMMIT, Resolution.ROLLBACK


def later(clock, seconds: float = 5.0) -> str:
    return str(int((clock.now + seconds) * 1000))


def test_a_delayed_half_is_copied_into_the_timer_queue_at_commit_with_its_real_destination(engine, memory_store,
                                                                                            clock):
    at = later(clock)
    engine.prepare([msg("orders", b"now", 1), msg("orders", b"later", 2, **{PROP_TIMER_DELIVER_MS: at})],
                   transaction_id="t")
    engine.end("t", COMMIT)
    assert [m.body for m in memory_store.visible("orders", 1)] == [b"now"]
    assert memory_store.visible("orders", 2) == []
    [scheduled] = memory_store.visible(TIMER_TOPIC, 0)
    assert scheduled.body == b"later"
    assert (scheduled.properties[PROP_REAL_TOPIC], scheduled.properties[PROP_REAL_QUEUE_ID]) == ("orders", "2")
    assert scheduled.properties[PROP_TIMER_DELIVER_MS] == at
    assert scheduled.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT


def test_nothing_is_scheduled_before_the_commit(engine, memory_store, clock):
    engine.prepare([msg("orders", b"later", **{PROP_TIMER_DELIVER_MS: later(clock)})], transaction_id="t")
    assert memory_store.visible(TIMER_TOPIC, 0) == []


def test_a_rolled_back_transaction_schedules_nothing(engine, memory_store, clock):
    engine.prepare([msg("orders", b"later", **{PROP_TIMER_DELIVER_MS: later(clock)})], transaction_id="t")
    engine.end("t", ROLLBACK)
    assert memory_store.visible(TIMER_TOPIC, 0) == [] and memory_store.visible("orders", 0) == []


def test_a_scheduled_commit_is_one_store_group_with_its_op_record(engine, memory_store, clock):
    engine.prepare([msg("orders", b"now"), msg("orders", b"later", **{PROP_TIMER_DELIVER_MS: later(clock)})],
                   transaction_id="t")
    before = memory_store.appends
    engine.end("t", COMMIT)
    assert memory_store.appends == before + 1
    assert len(memory_store.visible(OP_HALF_TOPIC, 0)) == 1


def test_only_the_included_senders_delayed_halves_are_scheduled(engine, memory_store, clock):
    engine.prepare([msg("orders", b"kept", **{PROP_TIMER_DELIVER_MS: later(clock)})], transaction_id="t", sender="a")
    engine.prepare([msg("orders", b"dropped", **{PROP_TIMER_DELIVER_MS: later(clock)})], transaction_id="t",
                   sender="b")
    engine.end("t", COMMIT, include_senders=["a"])
    assert [m.body for m in memory_store.visible(TIMER_TOPIC, 0)] == [b"kept"]


def test_a_delivery_time_past_the_horizon_is_refused_naming_the_message_and_writes_nothing(memory_store, clock):
    engine = TransactionEngine(memory_store, TransactionConfig(timer_max_delay_s=10), clock=clock)
    far = later(clock, 20)
    with pytest.raises(IllegalDeliveryTime, match=rf"message 1 to 'orders': TIMER_DELIVER_MS={far}"):
        engine.prepare([msg("orders", b"ok", **{PROP_TIMER_DELIVER_MS: later(clock, 5)}),
                        msg("orders", b"far", **{PROP_TIMER_DELIVER_MS: far})], transaction_id="t")
    assert memory_store.appends == 0
    with pytest.raises(UnknownTransaction):
        engine.get("t")


def test_a_delivery_time_that_is_not_epoch_milliseconds_is_refused(engine, memory_store):
    with pytest.raises(IllegalDeliveryTime, match="epoch milliseconds"):
        engine.prepare([msg("orders", b"x", **{PROP_TIMER_DELIVER_MS: "soon"})], transaction_id="t")
    assert memory_store.appends == 0


@pytest.mark.parametrize("prop", ["DELAY", "__STARTDELIVERTIME", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"])
def test_delay_levels_and_relative_delays_stay_refused_on_transactions(engine, memory_store, prop):
    with pytest.raises(IllegalDeliveryTime, match="refused on transactions"):
        engine.prepare([msg(), msg(**{prop: "3"})], transaction_id="t")
    assert memory_store.appends == 0


def test_the_delivery_time_is_never_the_first_property_of_a_half(engine, memory_store, clock):
    # the timer finds TIMER_DELIVER_MS in a scheduled copy's raw bytes after a property separator
    engine.prepare([msg("orders", b"x", **{PROP_TIMER_DELIVER_MS: later(clock)})], transaction_id="t")
    [half] = memory_store.visible("RMQ_SYS_TRANS_HALF_TOPIC", 0)
    assert next(iter(half.properties)) != PROP_TIMER_DELIVER_MS


@pytest.mark.parametrize("count", [COLUMNAR_MIN_SLOTS - 10, COLUMNAR_MIN_SLOTS + 10], ids=["per-record", "compiled"])
def test_the_real_store_schedules_exactly_the_delayed_halves(tmp_path, count):
    store = MessageStore(StoreConfig(data_dir=tmp_path / "data"))
    try:
        store.topics.create("orders", 4)
        engine = TransactionEngine(store, TransactionConfig())
        at = str(engine.now_ms() + 60_000)
        messages = [Message(topic="orders", body=b"m%d" % i, queue_id=i % 4,
                            properties={PROP_TIMER_DELIVER_MS: at} if i % 3 == 0 else {"k": "v"})
                    for i in range(count)]
        engine.prepare(messages, transaction_id="t")
        engine.end("t", COMMIT)
        scheduled = store.read_queue(TIMER_TOPIC, 0, 0, count).messages
        assert sorted(m.body for m in scheduled) == sorted(m.body for m in messages[::3])
        assert all(m.properties[PROP_REAL_QUEUE_ID] == str(int(m.body[1:]) % 4) for m in scheduled)
        visible = [m.body for q in range(4) for m in store.read_queue("orders", q, 0, count).messages]
        assert sorted(visible) == sorted(m.body for i, m in enumerate(messages) if i % 3)
        engine.close()
    finally:
        store.close()
