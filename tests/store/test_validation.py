"""Bad input gets a typed error naming the problem and the limit, and changes nothing on disk."""

from __future__ import annotations

import os

import pytest

from txmq.broker.errors import (
    IllegalPropertyKey,
    IllegalQueue,
    IllegalTopic,
    MessageBodyEmpty,
    MessageBodyTooLarge,
    MessagePropertiesTooLarge,
)
from txmq.broker.store.message import HALF_TOPIC, PROP_CRC32, Message
from tests.store._helpers import msg


def _disk_state(root) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")
            if p.is_file() and p.name not in ("checkpoint",)}


@pytest.mark.parametrize("topic, fragment", [
    ("bad topic", "characters"),
    ("a" * 128, "maximum is 127"),
    ("", "empty"),
    ("t/x", "characters"),
])
def test_illegal_topic_names_are_refused(open_store, topic, fragment) -> None:
    store = open_store()
    with pytest.raises(IllegalTopic, match=fragment):
        store.append([msg(topic=topic)])


def test_topic_name_rules_allow_rocketmq_characters(open_store) -> None:
    store = open_store()
    store.append([msg(topic="%RETRY%grp|a_b-C9"), msg(topic="a" * 127)])


def test_system_topics_are_refused_for_user_writes(open_store) -> None:
    store = open_store()
    with pytest.raises(IllegalTopic, match="system topic"):
        store.append([Message(HALF_TOPIC, b"x")])


def test_empty_body_is_refused(open_store) -> None:
    with pytest.raises(MessageBodyEmpty, match="empty"):
        open_store().append([msg(body=b"")])


def test_body_over_the_limit_is_refused(open_store) -> None:
    store = open_store(max_body_bytes=1000)
    store.append([msg(body=b"x" * 1000)])
    with pytest.raises(MessageBodyTooLarge, match="1001 bytes, the maximum is 1000"):
        store.append([msg(body=b"x" * 1001)])


def test_a_record_larger_than_a_segment_is_refused(open_store) -> None:
    store = open_store(commitlog_segment_bytes=4096)
    with pytest.raises(MessageBodyTooLarge, match="segment"):
        store.append([msg(body=b"x" * 5000)])


def test_properties_over_the_limit_are_refused(open_store) -> None:
    store = open_store()
    with pytest.raises(MessagePropertiesTooLarge, match="maximum is 32767"):
        store.append([msg(big="v" * 33000)])


def test_separator_characters_in_properties_are_refused(open_store) -> None:
    store = open_store()
    with pytest.raises(IllegalPropertyKey, match="separator"):
        store.append([msg(**{"k\x01": "v"})])
    with pytest.raises(IllegalPropertyKey, match="separator"):
        store.append([msg(k="v\x02w")])


@pytest.mark.parametrize("props", [{"UNIQ_KEY": 7}, {"KEYS": b"k"}, {"k": None}])
def test_property_values_that_are_not_str_are_refused_and_write_nothing(open_store, props) -> None:
    store = open_store()
    with pytest.raises(IllegalPropertyKey, match="must be str"):
        store.append([msg(a="ok"), Message("T", b"x", properties=props)])
    assert store.max_offset("T", 0) == 0


def test_the_crc_property_is_reserved(open_store) -> None:
    with pytest.raises(IllegalPropertyKey, match="reserved"):
        open_store().append([Message("T", b"x", properties={PROP_CRC32: "1"})])


def test_negative_queue_id_is_refused(open_store) -> None:
    with pytest.raises(IllegalQueue):
        open_store().append([msg(queue_id=-1)])


def test_a_refused_batch_writes_nothing(open_store, tmp_path) -> None:
    store = open_store()
    store.append([msg(body=b"before")])
    before = _disk_state(tmp_path / "store")
    for bad in ([msg(), msg(body=b"")], [msg(), msg(topic="bad name")], [msg(), msg(big="v" * 40000)]):
        with pytest.raises(Exception):
            store.append(bad)
        with pytest.raises(Exception):
            store.append_group(bad)
    assert _disk_state(tmp_path / "store") == before
    assert store.max_offset("T", 0) == 1
    assert store.append([msg()])[0].queue_offset == 1
    assert os.path.exists(tmp_path / "store" / "abort")


def test_a_batch_refused_after_a_segment_roll_leaves_no_new_segment(open_store, tmp_path) -> None:
    store = open_store(commitlog_segment_bytes=4096)
    store.append([msg(body=b"x" * 3000)])
    before = sorted(os.listdir(tmp_path / "store" / "commitlog"))
    with pytest.raises(MessageBodyTooLarge):
        store.append([msg(body=b"y" * 2000), msg(body=b"z" * 5000)])  # the first one rolls the segment
    assert sorted(os.listdir(tmp_path / "store" / "commitlog")) == before
    r = store.append([msg(body=b"y" * 2000)])[0]
    assert store.read_at(r.physical_offset).body == b"y" * 2000 and r.queue_offset == 1
