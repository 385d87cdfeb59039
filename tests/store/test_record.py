"""The record codec: RocketMQ's layout round-trips, and any damage is detected."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.store.message import PROP_CRC32, SYSFLAG_BORNHOST_V6, Message
from txmq.broker.store.record_layout import MAGIC_CODE
from txmq.broker.store.record import (
    RecordCorrupted,
    decode_record,
    encode_messages_standalone,
    encode_properties,
    message_id,
    verify_record,
    without_property,
)

prop_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                    min_size=1, max_size=12)
topics = st.from_regex(r"[%|a-zA-Z0-9_-]{1,40}", fullmatch=True)
hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    st.tuples(st.ip_addresses(v=6).map(str), st.integers(0, 65535)),
)
messages = st.builds(
    Message,
    topic=topics,
    body=st.binary(min_size=1, max_size=300),
    queue_id=st.integers(0, 1000),
    # the CRC property name is reserved (validation refuses it): a generated one would be dropped on decode
    properties=st.dictionaries(prop_text.filter(lambda k: k != PROP_CRC32), prop_text, max_size=5),
    flag=st.integers(-(2**31), 2**31 - 1),
    sys_flag=st.sampled_from([0, 0x4, 0x8, 0x1 << 16, 0x1 << 17]),
    born_timestamp=st.integers(1, 2**62),
    born_host=hosts,
    reconsume_times=st.integers(0, 100),
    prepared_transaction_offset=st.integers(0, 2**62),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=4), st.integers(0, 2**40))
def test_records_round_trip(batch: list[Message], first_offset: int) -> None:
    raw = encode_messages_standalone(batch, first_offset, store_timestamp=1234)
    off = 0
    for m in batch:
        size = verify_record(raw, off)[0]
        got = decode_record(raw, off, verify=True)
        assert (got.topic, got.body, got.queue_id, got.properties, got.flag) == (
            m.topic, m.body, m.queue_id, m.properties, m.flag)
        assert got.sys_flag & ~SYSFLAG_BORNHOST_V6 == m.sys_flag
        assert (got.born_timestamp, got.reconsume_times, got.prepared_transaction_offset) == (
            m.born_timestamp, m.reconsume_times, m.prepared_transaction_offset)
        assert got.born_host[1] == m.born_host[1]
        assert got.physical_offset == first_offset + off and got.size == size
        assert got.store_timestamp == 1234
        assert got.msg_id == message_id(bytes.fromhex("7F00000100002A9F"), first_offset + off)
        assert PROP_CRC32 not in got.properties
        off += size
    assert off == len(raw)


def test_layout_is_rocketmq_v1_with_crc_as_last_property() -> None:
    raw = encode_messages_standalone([Message("TopicA", b"body", 3, {"KEYS": "k"})], 100)
    total, magic, body_crc, queue_id = struct.unpack_from(">IIIi", raw)
    assert total == len(raw) and magic == MAGIC_CODE and body_crc == zlib.crc32(b"body") and queue_id == 3
    assert struct.unpack_from(">q", raw, 28)[0] == 100  # PHYSICALOFFSET
    assert raw[84:88] == (4).to_bytes(4, "big") and raw[88:92] == b"body"
    assert raw[92] == 6 and raw[93:99] == b"TopicA"
    assert raw.endswith(b"\x02") and raw[-20:-11] == b"__CRC32#\x01" and raw[-11:-1].isdigit()


@settings(max_examples=300, deadline=None)
@given(messages, st.data())
def test_any_flipped_byte_is_detected(m: Message, data) -> None:
    raw = bytearray(encode_messages_standalone([m], 0))
    pos = data.draw(st.integers(0, len(raw) - 1))
    flip = data.draw(st.integers(1, 255))
    raw[pos] ^= flip
    with pytest.raises(RecordCorrupted):
        verify_record(bytes(raw), 0)


@settings(max_examples=200, deadline=None)
@given(messages, st.data())
def test_any_truncation_is_detected(m: Message, data) -> None:
    raw = encode_messages_standalone([m], 0)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(RecordCorrupted):
        verify_record(raw[:cut], 0)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=400))
def test_random_bytes_are_rejected(garbage: bytes) -> None:
    with pytest.raises(RecordCorrupted):
        verify_record(garbage, 0)


@given(st.dictionaries(prop_text, prop_text, max_size=5), prop_text, st.booleans())
@settings(max_examples=200, deadline=None)
def test_without_property_drops_exactly_the_named_property(props: dict[str, str], name: str, present: bool) -> None:
    props = {"x" + name: name, **props}  # a longer name ending in the name, before it
    if present:
        props[name] = "value"
    kept = {k: v for k, v in props.items() if k != name}
    assert without_property(encode_properties(props), name.encode()) == encode_properties(kept)
