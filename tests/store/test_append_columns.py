"""MessageStore.append_columns: topic-and-body messages given as columns (BatchColumns.of_bodies)
are validated and written exactly like the same Messages through append()."""

from __future__ import annotations

import dataclasses

import pytest

from txmq.broker.errors import IllegalTopic, MessageBodyEmpty, MessageBodyTooLarge
from txmq.broker.store import Message
from txmq.broker.store.batch import BatchColumns

BORN = 1_700_000_000_000


def contents(store, topic: str, queue_id: int) -> list[dict]:
    return [{k: v for k, v in dataclasses.asdict(m).items() if k != "store_timestamp"}
            for m in store.read_queue(topic, queue_id, 0, 100).messages]


def test_columns_are_written_like_messages(open_store, tmp_path):
    topics, bodies, queues = ["A", "B", "A"], [b"1", b"22", b"333"], [0, 1, 0]
    store = open_store()
    store.append_columns(BatchColumns.of_bodies(topics, bodies, queues, BORN))
    store.append([Message(t, b, q, born_timestamp=BORN) for t, b, q in zip(topics, bodies, queues)])
    written = contents(store, "A", 0)
    assert [m["body"] for m in written] == [b"1", b"333", b"1", b"333"]
    columns, messages = written[:2], written[2:]
    for c, m in zip(columns, messages):
        assert {k: v for k, v in c.items() if k not in ("queue_offset", "physical_offset", "msg_id")} == \
            {k: v for k, v in m.items() if k not in ("queue_offset", "physical_offset", "msg_id")}


@pytest.mark.parametrize("topics, bodies, error", [
    (["A", "bad topic!"], [b"1", b"2"], IllegalTopic),
    (["A", "A"], [b"1", b""], MessageBodyEmpty),
    (["A", "A"], [b"1", b"x" * 5000], MessageBodyTooLarge),
])
def test_bad_columns_are_refused_like_messages_and_nothing_is_written(open_store, topics, bodies, error):
    store = open_store(max_body_bytes=4096)
    with pytest.raises(error):
        store.append_columns(BatchColumns.of_bodies(topics, bodies, [0, 0], BORN))
    with pytest.raises(error):
        store.append([Message(t, b, 0, born_timestamp=BORN) for t, b in zip(topics, bodies)])
    assert store.commitlog.write_end == 0
