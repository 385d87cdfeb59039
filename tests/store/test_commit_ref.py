"""The commit record's slots and the record a slot stands for (store/commit_ref.py, issue #42).

The oracle is today's COMMIT: the record `final_record` makes from a half, its queue entry and
its commit record's header must be, byte for byte, the copy the store wrote for that half.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from txmq.broker.errors import StoreError
from txmq.broker.store import Message, MessageStore, StoreConfig
from txmq.broker.store.commit_ref import (
    SLOT_HAS_UNIQ_KEY,
    SLOT_MAGIC,
    SLOT_SCHEDULED,
    SLOT_SIZE,
    CommitHeader,
    Slot,
    decode_body,
    encode_body,
    final_record,
    final_size,
    is_slot,
    read_slot,
    slots_of,
)
from txmq.broker.store.message import HALF_TOPIC
from txmq.broker.store.record_layout import CRC_PREFIX, CRC_SUFFIX_LEN, HEADER_V4_SIZE, STORE_HOST_AT
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine
from txmq.broker.transaction.half import PROP_PREPARED_MS

TOPIC = "orders"


class _Clock:
    def __call__(self) -> float:
        return 1_700_000_000.0


def _committed(path: Path, messages: list[Message]):
    """A store where one transaction committed `messages` by today's copy; yields (half bytes,
    copy bytes, the copy as read) per message."""
    store = MessageStore(StoreConfig(data_dir=path, flush_mode="async"))
    store.topics.create(TOPIC, queue_count=2)
    engine = TransactionEngine(store, TransactionConfig(), clock=_Clock())
    halves = engine.prepare(messages, transaction_id="t", producer_group="g")
    engine.end("t", Resolution.COMMIT)
    engine.close()
    out = []
    for q in (0, 1):
        for m in store.read_queue(TOPIC, q, 0, 100).messages:
            half = store.read_at(m.prepared_transaction_offset)
            out.append((store.commitlog.read(half.physical_offset, half.size),
                        store.commitlog.read(m.physical_offset, m.size), m))
    assert len(out) == len(messages) == len(halves.results)
    return store, out


def _props(record: bytes) -> bytes:
    """A whole record's property string without its CRC property (IPv4 hosts)."""
    body_len = int.from_bytes(record[HEADER_V4_SIZE - 4:HEADER_V4_SIZE], "big")
    tail = HEADER_V4_SIZE + body_len
    return record[tail + 3 + record[tail]:len(record) - len(CRC_PREFIX) - CRC_SUFFIX_LEN]


def _messages() -> list[Message]:
    return [Message(topic=TOPIC, body=b"body-%d" % i * (i + 1), queue_id=i % 2,
                    properties={"TAGS": "ab"[i % 2], "KEYS": f"k{i}", "UNIQ_KEY": f"U{i}", "colour": "red"})
            for i in range(6)] + [Message(topic=TOPIC, body=b"x", queue_id=0, properties={})]


def test_the_record_a_slot_stands_for_is_byte_for_byte_the_copy_a_commit_writes(tmp_path: Path) -> None:
    store, rows = _committed(tmp_path / "data", _messages())
    try:
        for half, copy, m in rows:
            commit = CommitHeader(m.store_timestamp, copy[STORE_HOST_AT:STORE_HOST_AT + 8], m.sys_flag)
            got = final_record(half, topic=m.topic, queue_id=m.queue_id, queue_offset=m.queue_offset,
                               physical_offset=m.physical_offset, commit=commit, drop_properties=(PROP_PREPARED_MS,))
            assert got == copy
    finally:
        store.close()


def test_a_slot_carries_the_size_of_the_copy_it_stands_for(tmp_path: Path) -> None:
    store, rows = _committed(tmp_path / "data", _messages())
    try:
        for half, copy, m in rows:
            assert final_size(len(half), _props(half), HALF_TOPIC, m.topic, (PROP_PREPARED_MS,)) == len(copy)
    finally:
        store.close()


def _slots() -> list[Slot]:
    return [Slot(1000 + 300 * i, 300, 280, ("a", "bb", "a")[i % 3], i, SLOT_HAS_UNIQ_KEY if i % 2 else 0, -i)
            for i in range(5)] + [Slot(9, 10, 10, "rmq_sys_wheel_timer", 0, SLOT_SCHEDULED, 7)]


def test_a_commit_body_gives_back_the_slots_it_was_made_of() -> None:
    assert slots_of(encode_body(_slots(), body_at=HEADER_V4_SIZE)) == _slots()


def test_each_slot_finds_its_commit_record_start_by_its_distance_back() -> None:
    record_at = 5000
    body = encode_body(_slots(), body_at=HEADER_V4_SIZE)
    topics, rows = decode_body(body)
    first = len(body) - len(rows) * SLOT_SIZE
    for k in range(len(rows)):
        slot_address = record_at + HEADER_V4_SIZE + first + k * SLOT_SIZE
        *_, back = read_slot(body, first + k * SLOT_SIZE)
        assert slot_address - back == record_at


def test_a_slot_is_told_from_a_record_by_its_magic(tmp_path: Path) -> None:
    body = encode_body(_slots(), body_at=HEADER_V4_SIZE)
    first = len(body) - len(_slots()) * SLOT_SIZE
    assert is_slot(body, first) and int.from_bytes(body[first + 4:first + 8], "big") == SLOT_MAGIC
    store, rows = _committed(tmp_path / "data", _messages())
    try:
        assert not any(is_slot(copy) or is_slot(half) for half, copy, _ in rows)
    finally:
        store.close()


def test_a_body_whose_slots_lack_the_magic_is_refused() -> None:
    body = bytearray(encode_body(_slots(), body_at=HEADER_V4_SIZE))
    body[-SLOT_SIZE + 4] ^= 0xFF
    with pytest.raises(StoreError, match="slot magic"):
        decode_body(bytes(body))
