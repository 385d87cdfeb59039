"""Topic admin over the native service."""

from __future__ import annotations

import pytest

from txmq.broker import errors


def test_create_topic_reports_its_queues(client, unique):
    info = client.create_topic(f"c_{unique}", 3)
    assert info.name == f"c_{unique}"
    assert info.queue_count == 3
    assert set(info.queues) == {0, 1, 2}
    assert all(r.min_offset == 0 and r.max_offset == 0 for r in info.queues.values())


def test_list_topics_includes_created_topic_and_hides_system_topics(client, topic):
    names = [t.name for t in client.list_topics()]
    assert topic in names
    assert not any(n.startswith("RMQ_SYS_") for n in names)
    assert any(t.name.startswith("RMQ_SYS_") for t in client.list_topics(include_system=True))


def test_describe_topic_shows_max_offsets_after_sends(client, topic):
    client.send_arrow(__import__("pyarrow").table({"body": [b"a", b"b", b"c", b"d"]}), topic=topic)
    info = client.describe_topic(topic)
    assert sum(r.max_offset for r in info.queues.values()) == 4


def test_describe_unknown_topic_raises_topic_not_found(client, unique):
    with pytest.raises(errors.TopicNotFound, match=f"nope_{unique}"):
        client.describe_topic(f"nope_{unique}")


def test_delete_topic_removes_it(client, topic):
    client.delete_topic(topic)
    assert topic not in [t.name for t in client.list_topics()]
    with pytest.raises(errors.TopicNotFound):
        client.describe_topic(topic)


def test_create_topic_with_bad_name_raises_illegal_topic(client):
    with pytest.raises(errors.IllegalTopic):
        client.create_topic("bad topic name!", 4)
