"""PullConsumer: committed messages as Arrow batches, offsets tracked, group commits."""

from __future__ import annotations

from tests.client.helpers import bodies_batch
from txmq.broker.client import PullConsumer


def _bodies(batches) -> list[bytes]:
    return sorted(b for batch in batches for b in batch.column("body").to_pylist())


def test_poll_returns_committed_messages_only(client, topic):
    client.send_arrow(bodies_batch(3, prefix="n"), topic=topic)
    client.prepare_arrow("", bodies_batch(2, prefix="h"), topic=topic, producer_group="g", sender="s")
    consumer = PullConsumer(client, [topic])
    assert _bodies(consumer.poll(timeout_ms=0)) == [b"n0", b"n1", b"n2"]


def test_poll_advances_past_what_it_returned(client, topic):
    client.send_arrow(bodies_batch(3), topic=topic)
    consumer = PullConsumer(client, [topic])
    consumer.poll(timeout_ms=0)
    assert consumer.poll(timeout_ms=100) == []
    client.send_arrow(bodies_batch(1, prefix="new"), topic=topic)
    assert _bodies(consumer.poll(timeout_ms=5000)) == [b"new0"]


def test_latest_start_skips_existing_messages(client, topic):
    client.send_arrow(bodies_batch(3), topic=topic)
    consumer = PullConsumer(client, [topic], start="latest")
    assert consumer.poll(timeout_ms=0) == []


def test_group_commit_resumes_a_new_consumer_and_reports_lag(client, topic, unique):
    group = f"cg_{unique}"
    client.send_arrow(bodies_batch(4), topic=topic)
    first = PullConsumer(client, [topic], group=group)
    assert len(_bodies(first.poll(timeout_ms=0))) == 4
    first.commit()
    client.send_arrow(bodies_batch(2, prefix="later"), topic=topic)
    lag = client.group_lag(group)
    assert sum(e.lag for e in lag[topic].values()) == 2
    second = PullConsumer(client, [topic], group=group)
    assert _bodies(second.poll(timeout_ms=0)) == [b"later0", b"later1"]


def test_group_lag_of_unknown_group_raises(client, unique):
    import pytest

    from txmq.broker import errors

    with pytest.raises(errors.ConsumerGroupNotFound):
        client.group_lag(f"nobody_{unique}")
