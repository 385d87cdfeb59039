"""Topics and consumer offsets persist across restarts; system topics exist implicitly."""

from __future__ import annotations

import json

import pytest

from txmq.broker.errors import IllegalQueue, IllegalTopic, OffsetNotFound, TopicNotFound
from txmq.broker.store.message import HALF_TOPIC
from tests.store._helpers import msg


def test_topics_persist_across_restart(open_store) -> None:
    store = open_store()
    store.topics.create("Orders", queue_count=8, permission=4)
    store.close()
    topic = open_store().topics.get("Orders")
    assert (topic.queue_count, topic.permission, topic.readable, topic.writable) == (8, 4, True, False)


def test_system_topics_exist_with_one_queue(open_store) -> None:
    store = open_store()
    assert store.topics.get(HALF_TOPIC).queue_count == 1
    assert HALF_TOPIC not in [t.name for t in store.topics.list()]
    assert HALF_TOPIC in [t.name for t in store.topics.list(include_system=True)]
    with pytest.raises(IllegalTopic):
        store.topics.delete(HALF_TOPIC)


def test_topic_validation(open_store) -> None:
    store = open_store()
    with pytest.raises(IllegalTopic):
        store.topics.create("bad name")
    with pytest.raises(IllegalQueue):
        store.topics.create("Good", queue_count=0)
    with pytest.raises(TopicNotFound):
        store.topics.get("Missing")


def test_deleting_a_topic_drops_its_queues_and_offsets(open_store) -> None:
    store = open_store()
    store.topics.create("Gone")
    store.append([msg(topic="Gone")])
    store.offsets.commit("g", "Gone", 0, 1)
    store.topics.delete("Gone")
    assert store.max_offset("Gone", 0) == 0
    with pytest.raises(OffsetNotFound):
        store.offsets.get("g", "Gone", 0)


def test_consumer_offsets_persist_across_restart(open_store, tmp_path) -> None:
    store = open_store()
    store.offsets.commit_many("g1", {("T", 0): 5, ("T", 1): 7})
    store.offsets.commit("g2", "U", 3, 9)
    store.close()
    store = open_store()
    assert store.offsets.group("g1") == {("T", 0): 5, ("T", 1): 7}
    assert store.offsets.get("g2", "U", 3) == 9
    assert store.offsets.groups() == ["g1", "g2"]
    assert json.loads((tmp_path / "store" / "offsets.json").read_text())["g1"]["T"]["1"] == 7
    assert not (tmp_path / "store" / "offsets.json.tmp").exists()
