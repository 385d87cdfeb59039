"""TransactionEngine.prepare_bodies: topic-and-body messages given as columns (the Spark sink's
rows) become exactly the halves, and after COMMIT the final records, that prepare() makes of
the same messages."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest

from txmq.broker.errors import BadRequest, IllegalTopic, MessageBodyEmpty, MessageBodyTooLarge
from txmq.broker.store import Message, MessageStore, StoreConfig
from txmq.broker.store.message import HALF_TOPIC, PROP_UNIQ_KEY
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine

from .conftest import FakeClock

BORN = 1_700_000_000_123
TOPICS = ["orders", "orders", "audit", "orders"]
BODIES = [b"a", b"bb", b"c" * 300, b"d"]
QUEUES = [0, 1, 2, 1]
IDS = ["ID%030d" % i for i in range(4)]


def records(store: MessageStore, topic: str, queue_id: int) -> list[dict]:
    return [{k: v for k, v in dataclasses.asdict(m).items() if k != "store_timestamp"}
            for m in store.read_queue(topic, queue_id, 0, 100).messages]


def prepared_and_committed(tmp_path: Path, name: str, *, columns: bool, ids: list[str] | None = IDS,
                           bodies=BODIES) -> tuple[list[dict], list[dict]]:
    store = MessageStore(StoreConfig(tmp_path / name, flush_mode="async"))
    try:
        engine = TransactionEngine(store, TransactionConfig(), clock=FakeClock())
        for sender in ("s1", "s2"):
            if columns:
                engine.prepare_bodies(TOPICS, bodies, QUEUES, ids, born_timestamp=BORN, transaction_id="t",
                                      producer_group="g", sender=sender)
            else:
                props = [{PROP_UNIQ_KEY: i} for i in ids] if ids is not None else [{} for _ in TOPICS]
                engine.prepare([Message(t, b, q, p, born_timestamp=BORN)
                                for t, b, q, p in zip(TOPICS, BODIES, QUEUES, props)],
                               transaction_id="t", producer_group="g", sender=sender)
        halves = records(store, HALF_TOPIC, 0)
        engine.end("t", Resolution.COMMIT, include_senders=["s2"])
        finals = [r for topic in ("orders", "audit") for q in range(3) for r in records(store, topic, q)]
        return halves, finals
    finally:
        store.close()


@pytest.mark.parametrize("ids", [IDS, None], ids=["with-message-ids", "without"])
def test_prepare_bodies_stores_the_halves_and_finals_of_prepare(tmp_path, ids):
    halves, finals = prepared_and_committed(tmp_path, "columns", columns=True, ids=ids)
    ref_halves, ref_finals = prepared_and_committed(tmp_path, "messages", columns=False, ids=ids)
    assert len(halves) == 8 and len(finals) == 4
    assert halves == ref_halves
    assert finals == ref_finals
    assert all((PROP_UNIQ_KEY in r["properties"]) == (ids is not None) for r in halves + finals)


def test_prepare_bodies_reads_an_arrow_body_column_in_place(tmp_path):
    # a column that starts inside its buffers (a slice of what a Flight stream delivered)
    column = pa.array([b"zz", *BODIES, b"zzz"], type=pa.binary()).slice(1, len(BODIES))
    halves, finals = prepared_and_committed(tmp_path, "arrow", columns=True, bodies=column)
    ref_halves, ref_finals = prepared_and_committed(tmp_path, "messages", columns=False)
    assert [r["body"] for r in halves[:4]] == BODIES
    assert halves == ref_halves
    assert finals == ref_finals


@pytest.fixture
def engine(tmp_path):
    store = MessageStore(StoreConfig(tmp_path / "s", flush_mode="async", max_body_bytes=1000))
    yield TransactionEngine(store, TransactionConfig(), clock=FakeClock())
    store.close()


def test_prepare_bodies_refuses_a_system_topic(engine):
    with pytest.raises(IllegalTopic, match="system topic"):
        engine.prepare_bodies([HALF_TOPIC], [b"x"], [0], ["I"], born_timestamp=BORN, producer_group="g")
    assert engine.store.max_offset(HALF_TOPIC, 0) == 0


@pytest.mark.parametrize("bodies, error", [([b"ok", b""], MessageBodyEmpty), ([b"ok", b"x" * 1001], MessageBodyTooLarge)])
def test_prepare_bodies_refuses_bad_bodies_and_writes_nothing(engine, bodies, error):
    with pytest.raises(error):
        engine.prepare_bodies(["orders"] * 2, bodies, [0, 0], ["I1", "I2"], born_timestamp=BORN,
                              transaction_id="t", producer_group="g")
    assert engine.store.max_offset(HALF_TOPIC, 0) == 0
    assert engine.transactions() == []


def test_prepare_bodies_refuses_a_sender_holding_a_property_separator(engine):
    with pytest.raises(BadRequest, match="sender"):
        engine.prepare_bodies(["orders"], [b"x"], [0], ["I"], born_timestamp=BORN, producer_group="g",
                              sender="a\x01b")
    assert engine.store.max_offset(HALF_TOPIC, 0) == 0
