"""Pulling a queue range as one Arrow batch in exactly the Spark source's schema."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from tests.client.helpers import bodies_batch, read_all
from txmq.broker import errors
from txmq.broker.client import Message

SPARK_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queueId", pa.int32()), ("queueOffset", pa.int64()), ("messageId", pa.string()),
    ("tag", pa.string()), ("keys", pa.list_(pa.string())), ("body", pa.binary()),
    ("properties", pa.map_(pa.string(), pa.string())), ("bornTimestamp", pa.timestamp("us", tz="UTC")),
    ("storeTimestamp", pa.timestamp("us", tz="UTC")), ("transactionId", pa.string()),
])


def _one_queue(client, topic) -> None:
    client.delete_topic(topic)
    client.create_topic(topic, 1)


def test_pull_batch_has_exactly_the_spark_schema(client, topic):
    client.send_arrow(bodies_batch(3), topic=topic)
    result = client.pull_arrow(topic, 0, 0, 1)
    assert result.batch.schema.equals(SPARK_SCHEMA)


def test_empty_pull_still_has_the_spark_schema(client, topic):
    result = client.pull_arrow(topic, 0, 0, 0)
    assert result.batch.num_rows == 0 and result.batch.schema.equals(SPARK_SCHEMA)
    assert result.next_offset == 0


def test_pull_row_values_round_trip(client, topic):
    _one_queue(client, topic)
    before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)
    client.send([Message(topic=topic, body=b"\x00\x01bin", tag="tagA", keys=["k1", "k2"],
                         properties={"color": "red"}, message_id="client-id-1")])
    row = client.pull_arrow(topic, 0, 0, 1).batch.to_pylist()[0]
    assert (row["topic"], row["queueId"], row["queueOffset"]) == (topic, 0, 0)
    assert row["messageId"] == "client-id-1"
    assert (row["tag"], row["keys"], row["body"]) == ("tagA", ["k1", "k2"], b"\x00\x01bin")
    assert row["properties"] == [("color", "red")]
    assert row["bornTimestamp"] >= before and row["storeTimestamp"] >= row["bornTimestamp"] - dt.timedelta(seconds=1)
    assert row["transactionId"] is None


def test_message_id_falls_back_to_the_offset_id(client, topic):
    _one_queue(client, topic)
    summary = client.send([Message(topic=topic, body=b"x")])
    row = client.pull_arrow(topic, 0, 0, 1).batch.to_pylist()[0]
    assert row["messageId"] == summary.message_ids[0]


def test_system_properties_never_reach_readers(client, topic):
    _one_queue(client, topic)
    prep = client.prepare("", [Message(topic=topic, body=b"x", properties={"u": "1"})], producer_group="g",
                          sender="s")
    client.end_transaction(prep.transaction_id, "COMMIT")
    row = client.pull_arrow(topic, 0, 0, 1).batch.to_pylist()[0]
    assert row["properties"] == [("u", "1")]
    assert row["transactionId"] == prep.transaction_id


def test_pull_range_end_is_exclusive_and_next_offset_follows(client, topic):
    _one_queue(client, topic)
    client.send_arrow(bodies_batch(10), topic=topic)
    result = client.pull_arrow(topic, 0, 2, 5)
    assert result.batch.column("queueOffset").to_pylist() == [2, 3, 4]
    assert result.next_offset == 5 and result.max_offset == 10


def test_max_bytes_stops_a_pull_early(client, topic):
    _one_queue(client, topic)
    client.send_arrow(pa.table({"body": [b"x" * 1000] * 20}), topic=topic)
    result = client.pull_arrow(topic, 0, 0, 20, max_bytes=5000)
    assert 0 < result.batch.num_rows < 20
    assert result.next_offset == result.batch.num_rows


def test_a_range_is_read_as_one_stream_of_batches_in_offset_order(client, topic):
    _one_queue(client, topic)
    client.send_arrow(pa.table({"body": [b"x" * 1000] * 50}), topic=topic)
    results = list(client.read_queue(topic, 0, 3, 50, batch_bytes=5000))
    assert len(results) > 1 and all(r.batch.num_rows for r in results)
    offsets = [o for r in results for o in r.batch.column("queueOffset").to_pylist()]
    assert offsets == list(range(3, 50))
    assert [r.next_offset for r in results][-1] == 50


def test_a_pull_ending_beyond_the_queue_is_refused_naming_its_end(client, topic):
    _one_queue(client, topic)
    client.send_arrow(bodies_batch(3), topic=topic)
    with pytest.raises(errors.IllegalOffset, match="beyond .*last offset 3"):
        client.pull_arrow(topic, 0, 0, 4)


def test_tag_filter_returns_matching_messages_only(client, topic):
    _one_queue(client, topic)
    client.send_arrow(bodies_batch(6, tag=pa.array(["a", "b", "c", "a", "b", "c"])), topic=topic)
    result = client.pull_arrow(topic, 0, 0, 6, tags="a||c")
    assert result.batch.column("tag").to_pylist() == ["a", "c", "a", "c"]
    assert result.next_offset == 6


def test_pull_beyond_the_queue_end_raises_illegal_offset(client, topic):
    with pytest.raises(errors.IllegalOffset):
        client.pull_arrow(topic, 0, 50, 60)


def test_pull_of_unknown_topic_raises_topic_not_found(client, unique):
    with pytest.raises(errors.TopicNotFound):
        client.pull_arrow(f"none_{unique}", 0, 0, 1)


def test_get_and_query_messages(client, topic):
    summary = client.send([Message(topic=topic, body=b"find me", keys=["order-42"])])
    assert client.get_message(summary.message_ids[0]).body == b"find me"
    found = client.query_messages(topic, "order-42")
    assert [m.body for m in found] == [b"find me"]


def test_get_unknown_message_raises_message_not_found(client):
    with pytest.raises(errors.MessageNotFound):
        client.get_message("7F0000010000000000000000DEADBEEF")


def test_read_all_helper_sees_every_committed_message(client, topic):
    client.send_arrow(bodies_batch(7), topic=topic)
    assert len(read_all(client, topic)) == 7
