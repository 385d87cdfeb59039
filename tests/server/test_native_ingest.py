"""Decoding written rows (a Flight put's Arrow batch): the plain-rows path (topic/body columns only) must behave exactly
like the general one: same queues, same refusals, unique message ids."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txmq.broker.errors import BadRequest, MessageBodyEmpty
from txmq.broker.server.native_ingest import MessageIdGenerator, PlainRows, QueueSelector, decode_rows
from txmq.broker.store.message import PROP_UNIQ_KEY


def arrow_batch(columns: dict, default_topic: str = "") -> tuple[str, pa.Table]:
    return default_topic, pa.table(columns)


def decode_batch(batch: tuple[str, pa.Table], queue_count, selector: QueueSelector) -> list:
    rows = decode_rows(*batch, (), queue_count, selector)
    return rows.messages() if isinstance(rows, PlainRows) else rows


def test_plain_rows_take_the_queues_of_message_by_message_round_robin():
    topics = ["a", "b", "a", "a", "b", None]
    batch = arrow_batch({"topic": pa.array(topics, pa.string()), "body": pa.array([b"x"] * 6, pa.binary())},
                        default_topic="a")
    decoded = decode_batch(batch, lambda topic: 3, QueueSelector())
    reference = QueueSelector()
    expected = [reference.select(t or "a", 3, None) for t in topics]
    assert [(m.topic, m.queue_id) for m in decoded] == list(zip([t or "a" for t in topics], expected))


def test_plain_rows_continue_the_round_robin_of_earlier_batches():
    selector = QueueSelector()
    batch = arrow_batch({"body": pa.array([b"x"] * 3, pa.binary())}, default_topic="t")
    first = [m.queue_id for m in decode_batch(batch, lambda topic: 4, selector)]
    second = [m.queue_id for m in decode_batch(batch, lambda topic: 4, selector)]
    assert first + second == [0, 1, 2, 3, 0, 1]


def test_plain_row_with_an_empty_body_is_refused_naming_the_row():
    batch = arrow_batch({"body": pa.array([b"x", b"x", b""], pa.binary())}, default_topic="t")
    with pytest.raises(MessageBodyEmpty, match="message 2"):
        decode_batch(batch, lambda topic: 4, QueueSelector())


def test_plain_row_without_a_topic_is_refused_naming_the_row():
    batch = arrow_batch({"topic": pa.array(["t", None], pa.string()), "body": pa.array([b"x", b"y"], pa.binary())})
    with pytest.raises(BadRequest, match="message 1 has no topic"):
        decode_batch(batch, lambda topic: 4, QueueSelector())


def test_message_ids_are_unique_across_batches_and_given_ids_are_kept():
    ids = MessageIdGenerator()
    batch = arrow_batch({"body": pa.array([b"x"] * 3, pa.binary()),
                         "messageId": pa.array([None, "mine", None], pa.string())}, default_topic="t")
    first = decode_batch(batch, lambda topic: 1, QueueSelector())
    second = decode_batch(batch, lambda topic: 1, QueueSelector())
    assigned = ids.assign(first) + ids.assign(second)
    assert assigned[1] == assigned[4] == "mine"
    fresh = [assigned[i] for i in (0, 2, 3, 5)]
    assert len(set(fresh)) == 4 and all(len(mid) == 32 for mid in fresh)
    assert [m.properties[PROP_UNIQ_KEY] for m in first] == assigned[:3]


def test_topic_and_body_rows_are_decoded_as_columns_and_others_as_messages():
    plain = arrow_batch({"body": pa.array([b"x", b"y"], pa.binary())}, default_topic="t")
    rows = decode_rows(*plain, (), lambda topic: 4, QueueSelector())
    assert isinstance(rows, PlainRows)
    assert (rows.topics, rows.bodies, rows.queue_ids) == (["t", "t"], [b"x", b"y"], [0, 1])
    tagged = arrow_batch({"body": pa.array([b"x"], pa.binary()), "tag": pa.array(["a"], pa.string())},
                         default_topic="t")
    messages = decode_rows(*tagged, (), lambda topic: 4, QueueSelector())
    assert [(m.topic, m.tags) for m in messages] == [("t", "a")]
