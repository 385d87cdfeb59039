"""append_group_encoded: records rebuilt from records the store already wrote, appended without
re-validating or re-encoding their properties (the transaction engine's COMMIT path)."""

from __future__ import annotations

import dataclasses

import pytest

from txmq.broker.errors import IllegalTopic
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, Message, StoredMessage
from txmq.broker.store.record import CRC_PREFIX, encode_properties
from txmq.broker.store import MessageStore
from tests.store._helpers import msg, small_config

ASSIGNED = ("queue_offset", "physical_offset", "store_timestamp", "msg_id", "born_timestamp")


def batch() -> list[Message]:
    return [msg(body=b"a", **{PROP_UNIQ_KEY: "u1", PROP_TAGS: "t", PROP_KEYS: "k1 k2"}),
            msg(body=b"b", queue_id=1, x="1", y="2"),
            msg(topic="U", body=b"c")]


def without_assigned(m: StoredMessage) -> dict:
    return {k: v for k, v in dataclasses.asdict(m).items() if k not in ASSIGNED}


def test_appends_report_each_records_encoded_properties(open_store) -> None:
    messages = batch()
    results = open_store().append(messages)
    assert results.encoded_properties == [encode_properties(m.properties) + CRC_PREFIX for m in messages]


def test_encoded_group_writes_the_records_append_group_writes(open_store, tmp_path) -> None:
    validated = open_store()
    trusted = MessageStore(small_config(tmp_path / "trusted"))
    messages = batch()
    encoded = trusted.append(messages).encoded_properties
    validated.append(messages)
    slow = validated.append_group(messages)
    fast = trusted.append_group_encoded(messages, encoded)
    assert [r.physical_offset for r in fast] == [r.physical_offset for r in slow]
    try:
        assert ([without_assigned(validated.read_at(r.physical_offset)) for r in slow]
                == [without_assigned(trusted.read_at(r.physical_offset)) for r in fast])
    finally:
        trusted.close()


def test_encoded_group_is_indexed_by_message_id_and_keys(open_store) -> None:
    store = open_store()
    messages = batch()
    encoded = store.append(messages).encoded_properties
    again = [dataclasses.replace(m, topic="V") for m in messages]
    results = store.append_group_encoded(again, encoded)
    assert [m.physical_offset for m in store.query_by_key("V", "k2")] == [results[0].physical_offset]
    assert store.read_queue("V", 1, 0, 10).messages[0].properties == {"x": "1", "y": "2"}


def test_records_without_an_encoding_are_validated(open_store) -> None:
    store = open_store()
    good = msg(body=b"a", x="1")
    encoded = store.append([good]).encoded_properties
    with pytest.raises(IllegalTopic):
        store.append_group_encoded([good, msg(topic="bad topic!")], [encoded[0], None])
    assert store.max_offset("T", 0) == 1  # nothing of the refused group was written


def test_an_encoding_per_record_is_required(open_store) -> None:
    with pytest.raises(ValueError):
        open_store().append_group_encoded([msg(), msg()], [None])
