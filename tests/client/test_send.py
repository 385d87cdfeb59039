"""Sending many messages per RPC (Arrow and protobuf forms), and refusals of bad payloads."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.client.helpers import bodies, bodies_batch, read_all
from txmq.broker import errors
from txmq.broker.client import Message
from txmq.broker.protocol import native_pb2 as pb


def test_send_arrow_stores_every_row(client, topic):
    summary = client.send_arrow(bodies_batch(100), topic=topic)
    assert summary.count == 100
    assert sum(s.count for s in summary.slices) == 100
    assert bodies(read_all(client, topic)) == sorted(f"m{i}".encode() for i in range(100))


def test_send_arrow_spreads_messages_over_queues(client, topic):
    summary = client.send_arrow(bodies_batch(40), topic=topic)
    assert {s.queue_id for s in summary.slices} == {0, 1, 2, 3}


@pytest.mark.parametrize("form", ["arrow", "protobuf"])
def test_send_slices_name_exactly_where_the_messages_landed(client, topic, form):
    client.send_arrow(bodies_batch(7), topic=topic)  # queues do not start at offset 0 for the second send
    if form == "arrow":
        summary = client.send_arrow(pa.RecordBatch.from_pydict({"body": [b"s%d" % i for i in range(22)]}),
                                    topic=topic)
    else:
        summary = client.send([Message(topic=topic, body=b"s%d" % i, keys=["k"]) for i in range(22)])
    landed = {}
    for s in summary.slices:
        for i in range(s.count):
            result = client.pull_arrow(topic, s.queue_id, s.first_offset + i, s.first_offset + i + 1)
            landed[(s.queue_id, s.first_offset + i)] = result.batch.column("body")[0].as_py()
    assert sorted(landed.values()) == sorted(b"s%d" % i for i in range(22))


def test_same_sharding_key_lands_in_one_queue_in_order(client, topic):
    batch = bodies_batch(30, shardingKey=pa.array(["order-7"] * 30))
    client.send_arrow(batch, topic=topic)
    table = read_all(client, topic)
    assert len(set(table.column("queueId").to_pylist())) == 1
    rows = sorted(table.to_pylist(), key=lambda r: r["queueOffset"])
    assert [r["body"] for r in rows] == [f"m{i}".encode() for i in range(30)]


def test_send_arrow_with_per_row_topics(client, topic, unique):
    other = f"o_{unique}"
    client.create_topic(other, 2)
    batch = bodies_batch(4, topic=pa.array([topic, other, topic, other]))
    client.send_arrow(batch)
    assert len(read_all(client, topic)) == 2
    assert len(read_all(client, other)) == 2


def test_send_protobuf_form_returns_message_ids(client, topic):
    summary = client.send([Message(topic=topic, body=b"x", tag="t1", keys=["k"]),
                           Message(topic=None, body=b"y")], topic=topic)
    assert summary.count == 2 and len(summary.message_ids) == 2
    got = client.get_message(summary.message_ids[0])
    assert got.body == b"x" and got.tag == "t1" and got.keys == ("k",)


def test_send_auto_creates_unknown_topic(client, unique):
    client.send_arrow(bodies_batch(2), topic=f"auto_{unique}")
    assert client.describe_topic(f"auto_{unique}").queue_count == 4


def test_batch_without_body_column_is_refused(client, topic):
    with pytest.raises(errors.BadRequest, match="'body'"):
        client.send_arrow(pa.table({"tag": ["a"]}), topic=topic)


def test_body_column_of_wrong_type_is_refused(client, topic):
    with pytest.raises(errors.BadRequest, match="body"):
        client.send_arrow(pa.table({"body": [1, 2]}), topic=topic)


def test_unknown_column_is_refused_by_name(client, topic):
    with pytest.raises(errors.BadRequest, match="tags"):
        client.send_arrow(bodies_batch(1, tags=pa.array(["x"])), topic=topic)


def test_empty_body_is_refused_and_nothing_of_the_batch_is_written(client, topic):
    with pytest.raises(errors.MessageBodyEmpty):
        client.send_arrow(pa.table({"body": pa.array([b"ok", b""], pa.binary())}), topic=topic)
    assert len(read_all(client, topic)) == 0


def test_row_without_any_topic_is_refused(client):
    with pytest.raises(errors.BadRequest, match="no topic"):
        client.send_arrow(bodies_batch(1))


def test_reserved_property_is_refused(client, topic):
    with pytest.raises(errors.BadRequest):
        client.send([Message(topic=topic, body=b"x", properties={"UNIQ_KEY": "forged"})])


def test_key_with_a_space_is_refused(client, topic):
    with pytest.raises(errors.IllegalMessageKey, match="space"):
        client.send([Message(topic=topic, body=b"x", keys=["two words"])])


def test_tag_with_a_bar_is_refused(client, topic):
    with pytest.raises(errors.IllegalMessageTag):
        client.send([Message(topic=topic, body=b"x", tag="a|b")])
