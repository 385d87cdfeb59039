"""SQL92 filters on the native client's reads: Flight DoGet (read_queue, pull_arrow) and PullConsumer,
against a real broker process."""

from __future__ import annotations

import pytest

from tests.client.test_pull_arrow import SPARK_SCHEMA
from txmq.broker import errors
from txmq.broker.client import Message, PullConsumer


@pytest.fixture
def one_queue_orders(client, topic):
    client.delete_topic(topic)
    client.create_topic(topic, 1)
    client.send([Message(topic=topic, body=f"order-{i}".encode(), tag="paid" if i % 2 else "new",
                         keys=[f"k{i}"], properties={"amount": str(i), "region": "eu" if i % 4 == 0 else "us"})
                 for i in range(200)])
    return topic


def read_bodies(client, topic, **filters) -> list[bytes]:
    return [b for r in client.read_queue(topic, 0, 0, 200, batch_bytes=4096, **filters)
            for b in r.batch.column("body").to_pylist()]


def test_read_queue_with_sql_streams_only_matching_messages(client, one_queue_orders):
    got = read_bodies(client, one_queue_orders, sql="amount >= 190 OR region = 'eu' AND amount < 20")
    assert got == [f"order-{i}".encode() for i in range(200) if i >= 190 or (i % 4 == 0 and i < 20)]


def test_a_filtered_read_reaches_the_end_of_the_range_through_empty_batches(client, one_queue_orders):
    results = list(client.read_queue(one_queue_orders, 0, 0, 200, sql="amount = 199", batch_bytes=4096))
    assert results[-1].next_offset == 200
    assert sum(r.batch.num_rows for r in results) == 1
    assert all(r.batch.schema.equals(SPARK_SCHEMA) for r in results)


def test_sql_and_tags_combine(client, one_queue_orders):
    got = read_bodies(client, one_queue_orders, tags="paid", sql="amount < 10")
    assert got == [f"order-{i}".encode() for i in (1, 3, 5, 7, 9)]


def test_pull_arrow_with_a_bad_sql_expression_raises_illegal_filter_expression(client, one_queue_orders):
    with pytest.raises(errors.IllegalFilterExpression, match="position 9"):
        client.pull_arrow(one_queue_orders, 0, 0, 10, sql="amount >")


def test_a_pull_consumer_with_sql_polls_only_matching_messages(client, one_queue_orders):
    with PullConsumer(client, [one_queue_orders], sql="KEYS = 'k7' OR amount BETWEEN 100 AND 101") as consumer:
        rows = [b for batch in consumer.poll(timeout_ms=0) for b in batch.column("body").to_pylist()]
    assert rows == [b"order-7", b"order-100", b"order-101"]
