"""The commit record's slots and the record a slot stands for (store/commit_ref.py, issue #42).

The oracle is today's COMMIT: the record `final_record` makes from a half, its queue entry and
its commit record's header must be, byte for byte, the copy the store wrote for that half.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txmq.broker.errors import StoreError
from txmq.broker.store import Message, MessageStore, StoreConfig
from txmq.broker.store.commit_ref import (
    SLOT_HAS_KEYS,
    SLOT_HAS_UNIQ_KEY,
    SLOT_MAGIC,
    SLOT_SCHEDULED,
    SLOT_SIZE,
    CommitHeader,
    Slot,
    decode_body,
    encode_body,
    encode_rows,
    final_record,
    final_size,
    is_slot,
    read_slot,
    slots_of,
)
from txmq.broker.store.message import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROP_CHECK_IMMUNITY_SECONDS,
    PROP_TIMER_DELIVER_MS,
    SYSFLAG_TRANSACTION_COMMIT,
)
from txmq.broker.store.record_layout import CRC_PREFIX, CRC_SUFFIX_LEN, HEADER_V4_SIZE, STORE_HOST_AT
from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine
from txmq.broker.transaction.half import PROP_PREPARED_MS, REFUSED_DELAY_PROPERTIES

TOPIC = "orders"


class _Clock:
    def __call__(self) -> float:
        return 1_700_000_000.0


def _copy_as_a_commit_did(store: MessageStore, engine: TransactionEngine):
    """The oracle: transaction "t"'s halves copied into their topics as COMMIT did before it went
    by reference (append_group_copies of the copies it made); returns those RecordCopies."""
    from txmq.broker.transaction.engine import SCHEDULED, _copies_of

    copies = _copies_of(engine._table["t"].halves, None, None, SYSFLAG_TRANSACTION_COMMIT, SCHEDULED)
    engine.close()
    store.append_group_copies(copies, [Message(topic=OP_HALF_TOPIC, body=b"op")])  # the op record ended the group
    return copies


def _committed(path: Path, messages: list[Message]):
    """A store where one transaction's `messages` were copied as COMMIT copied them; yields (half bytes,
    copy bytes, the copy as read) per message."""
    store = MessageStore(StoreConfig(data_dir=path, flush_mode="async"))
    store.topics.create(TOPIC, queue_count=2)
    engine = TransactionEngine(store, TransactionConfig(), clock=_Clock())
    halves = engine.prepare(messages, transaction_id="t", producer_group="g")
    _copy_as_a_commit_did(store, engine)
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


def _halves_committed(path: Path, count: int):
    """A store where `count` halves (tags, keys and ids on some, a deliverAt on one) were copied by
    today's COMMIT; returns (store, the RecordCopies the COMMIT made, the copies' queue entries
    by half offset)."""
    from txmq.broker.store.message import PROP_TIMER_DELIVER_MS, TIMER_TOPIC
    from txmq.broker.transaction.engine import SCHEDULED, _copies_of

    store = MessageStore(StoreConfig(data_dir=path, flush_mode="async"))
    store.topics.create(TOPIC, queue_count=2)
    engine = TransactionEngine(store, TransactionConfig(), clock=_Clock())
    messages = [Message(topic=TOPIC, body=b"b%d" % i, queue_id=i % 2,
                        properties={**({"TAGS": "t%d" % (i % 3)} if i % 4 else {}),
                                    **({"UNIQ_KEY": f"U{i}"} if i % 5 else {}), **({"KEYS": f"k{i}"} if i % 7 else {}),
                                    **({PROP_TIMER_DELIVER_MS: str(1_700_000_000_000 + 3_600_000)} if i == 3 else {})})
                for i in range(count)]
    engine.prepare(messages, transaction_id="t", producer_group="g")
    copies = _copy_as_a_commit_did(store, engine)
    entries = {}
    for topic, qids in ((TOPIC, (0, 1)), (TIMER_TOPIC, (0,))):
        for q in qids:
            for e in store.read_queue_entries(topic, q, 0, count + 10):
                entries[store.read_at(e.physical_offset, e.size).prepared_transaction_offset] = (topic, q, e)
    assert len(entries) == count
    return store, copies, entries


@pytest.mark.parametrize("count", [40, 2100], ids=["record by record", "column-wise"])
def test_the_slots_of_a_commit_say_what_its_copies_queue_entries_say(tmp_path: Path, count: int) -> None:
    from txmq.broker.store.record_copy import reference_slots

    store, copies, entries = _halves_committed(tmp_path / "data", count)
    try:
        topics, rows, *_ = reference_slots(store, copies)
        slots = slots_of(encode_rows(topics, rows, body_at=HEADER_V4_SIZE))
        assert len(slots) == count
        for slot in slots:
            topic, q, e = entries[slot.half_phys]
            assert (slot.topic, slot.queue_id, slot.final_size, slot.tag_hash) == (topic, q, e.size, e.tag_hash)
            held = store.read_at(e.physical_offset, e.size)
            assert bool(slot.flags & SLOT_HAS_UNIQ_KEY) == ("UNIQ_KEY" in held.properties)
            assert bool(slot.flags & SLOT_HAS_KEYS) == ("KEYS" in held.properties)
            assert bool(slot.flags & SLOT_SCHEDULED) == (topic != TOPIC)
    finally:
        store.close()


def test_a_slot_in_a_commit_record_resolves_to_the_copy_it_replaces(tmp_path: Path) -> None:
    """A commit record written after the halves, its slots filled as the write would fill them:
    resolving each slot's address from the log alone gives the copy's bytes, but for where it is."""
    from txmq.broker.store.commit_ref import COMMIT_REF_TOPIC, resolve
    from txmq.broker.store.record import encode_record, record_size

    store, rows = _committed(tmp_path / "data", _messages())
    try:
        _, copy0, m0 = rows[0]
        store_raw = copy0[STORE_HOST_AT:STORE_HOST_AT + 8]
        record_at = store.commitlog.write_end + 4096
        slots = [Slot(m.prepared_transaction_offset, len(half), len(copy), m.topic, m.queue_id, 0, 0, m.queue_offset)
                 for half, copy, m in rows]
        body = encode_body(slots, body_at=HEADER_V4_SIZE, drop_properties=(PROP_PREPARED_MS,))
        first = len(body) - len(slots) * SLOT_SIZE
        out: list = []
        topic_raw = COMMIT_REF_TOPIC.encode()
        encode_record(out, Message(topic=COMMIT_REF_TOPIC, body=body, queue_id=0), topic_raw, b"",
                      record_size(len(body), len(topic_raw), 0), m0.sys_flag, 0, record_at, m0.store_timestamp,
                      (store_raw, False))
        commit_record = b"".join(out)

        def read(offset: int, size: int) -> bytes:
            if offset >= record_at:
                return commit_record[offset - record_at:offset - record_at + size]
            return store.commitlog.read(offset, size)

        for k, (_, copy, m) in enumerate(rows):
            address = record_at + HEADER_V4_SIZE + first + k * SLOT_SIZE
            want = final_record(read(m.prepared_transaction_offset, len(rows[k][0])), topic=m.topic,
                                queue_id=m.queue_id, queue_offset=m.queue_offset, physical_offset=address,
                                commit=CommitHeader(m0.store_timestamp, store_raw, m0.sys_flag),
                                drop_properties=(PROP_PREPARED_MS,))
            got = resolve(read, address)
            assert got == want
            # the copy, but for its own place in the log (and the CRC that covers it)
            assert got[:28] == copy[:28] and got[36:-11] == copy[36:-11]
    finally:
        store.close()


def test_a_commit_record_dispatches_the_queue_entries_of_the_copies_it_replaces_at_its_slots() -> None:
    from txmq.broker.store.commit_ref import slot_entries

    slots = _slots()
    body_address = 7000 + HEADER_V4_SIZE
    body = encode_body(slots, body_at=HEADER_V4_SIZE)
    got = slot_entries(body, body_address)
    first = body_address + len(body) - len(slots) * SLOT_SIZE
    assert [(got.topics[t], q, a, n, h, f) for t, q, a, n, h, f in zip(
        got.topic_index.tolist(), got.queue_id.tolist(), got.address.tolist(), got.size.tolist(),
        got.tag_hash.tolist(), got.flags.tolist())] == [
        (s.topic, s.queue_id, first + k * SLOT_SIZE, s.final_size, s.tag_hash, s.flags) for k, s in enumerate(slots)]
    for k, address in enumerate(got.address.tolist()):  # each entry's address is its slot, found by BACK
        *_, back = read_slot(body, address - body_address)
        assert address - back == body_address - HEADER_V4_SIZE


def test_the_record_at_a_slot_address_is_the_committed_message_it_stands_for(tmp_path: Path) -> None:
    """A commit record appended to a real store (its slots' queue offsets filled as the write will
    fill them): read_at, and a lookup by offset id, at a slot's address give the message the copy
    gave, but for its physical offset and message id."""
    from txmq.broker.store.commit_ref import COMMIT_REF_TOPIC

    store, rows = _committed(tmp_path / "data", _messages())
    try:
        slots = [Slot(m.prepared_transaction_offset, len(half), len(copy), m.topic, m.queue_id, 0, 0, m.queue_offset)
                 for half, copy, m in rows]
        body = encode_body(slots, body_at=HEADER_V4_SIZE, drop_properties=(PROP_PREPARED_MS,))
        # a member of its group, as a COMMIT's commit records are (the op record ends the group)
        record = store.append_group([Message(topic=COMMIT_REF_TOPIC, body=body, sys_flag=SYSFLAG_TRANSACTION_COMMIT),
                                     Message(topic=COMMIT_REF_TOPIC, body=b"end", sys_flag=SYSFLAG_TRANSACTION_COMMIT)],
                                    allow_system=True)[0]
        first = record.physical_offset + HEADER_V4_SIZE + len(body) - len(slots) * SLOT_SIZE
        for k, (_, copy, m) in enumerate(rows):
            got = store.read_at(first + k * SLOT_SIZE, m.size)
            assert (got.physical_offset, got.size) == (first + k * SLOT_SIZE, m.size)
            assert got == store.read_at(first + k * SLOT_SIZE)  # without a size: a slot says its own
            for name in ("topic", "body", "queue_id", "queue_offset", "properties", "flag", "sys_flag",
                         "born_timestamp", "born_host", "reconsume_times", "prepared_transaction_offset",
                         "store_host", "body_crc"):
                assert getattr(got, name) == getattr(m, name), name
            assert store.get_by_message_id(got.msg_id) == got
    finally:
        store.close()


def test_a_slot_that_does_not_lie_in_a_commit_record_is_refused() -> None:
    from txmq.broker.store.commit_ref import resolve

    body = bytearray(encode_body(_slots(), body_at=HEADER_V4_SIZE))
    first = len(body) - len(_slots()) * SLOT_SIZE
    log = bytes(HEADER_V4_SIZE) + bytes(body)  # a slot's BACK leads to zeros, not a record header

    def read(offset: int, size: int) -> bytes:
        return log[offset:offset + size]

    with pytest.raises(StoreError, match="does not lie in a commit record"):
        resolve(read, HEADER_V4_SIZE + first)


def _prepared_with_commit_record(path: Path):
    """A store holding `_messages()` as halves and, after them, a commit record whose slots publish
    them to TOPIC's queues (queue offsets filled as the write fills them) in a group the op record
    ends: what a COMMIT by reference leaves in the log. Returns (store, the halves' results)."""
    from txmq.broker.store.commit_ref import COMMIT_REF_TOPIC
    from txmq.broker.store.record_copy import reference_slots
    from txmq.broker.transaction.engine import SCHEDULED, _copies_of

    store = MessageStore(StoreConfig(data_dir=path, flush_mode="async"))
    store.topics.create(TOPIC, queue_count=2)
    engine = TransactionEngine(store, TransactionConfig(), clock=_Clock())
    halves = engine.prepare(_messages(), transaction_id="t", producer_group="g").results
    copies = _copies_of(engine._table["t"].halves, None, None, SYSFLAG_TRANSACTION_COMMIT, SCHEDULED)
    topics, rows, *_ = reference_slots(store, copies)
    next_offset = {0: 0, 1: 0}
    for r in rows:
        r["queue_offset"] = next_offset[int(r["queue_id"])]
        next_offset[int(r["queue_id"])] += 1
    body = encode_rows(topics, rows, body_at=HEADER_V4_SIZE, drop_properties=(PROP_PREPARED_MS,))
    store.append_group([Message(topic=COMMIT_REF_TOPIC, body=body, sys_flag=SYSFLAG_TRANSACTION_COMMIT),
                        Message(topic=OP_HALF_TOPIC, body=b"op", sys_flag=SYSFLAG_TRANSACTION_COMMIT)],
                       allow_system=True)
    return store, halves


def test_recovery_dispatches_a_commit_record_into_the_queue_entries_of_its_slots(tmp_path: Path) -> None:
    """Replay turns a commit record into one queue entry per slot (and index entries for the
    flagged halves' UNIQ_KEY and KEYS), so a crash before dispatch gives the queues a COMMIT
    by reference publishes."""
    from tests.store._helpers import crash

    store, halves = _prepared_with_commit_record(tmp_path / "data")
    crash(store)
    store = MessageStore(StoreConfig(data_dir=tmp_path / "data", flush_mode="async"))
    try:
        got = [m for q in (0, 1) for m in store.read_queue(TOPIC, q, 0, 100).messages]
        assert sorted(m.body for m in got) == sorted(m.body for m in _messages())
        for m in got:
            assert store.get_by_message_id(m.msg_id) == m  # the offset id: the slot's address
            if m.unique_key:
                assert store.get_by_message_id(m.unique_key) == m  # the index entry at the slot
            for key in m.keys:
                assert store.query_by_key(TOPIC, key) == [m]
            assert PROP_PREPARED_MS not in m.properties
    finally:
        store.close()


def test_a_columnar_read_gives_the_records_its_slots_stand_for(tmp_path: Path) -> None:
    """read_queue_bytes (the pull kernel's and Flight's read) of a queue published by reference
    yields, at each entry, the bytes of the record its slot stands for; no local-read plan names
    a slot (a client decoding the segment itself could not follow it)."""
    from tests.store._helpers import crash
    from txmq.broker.store.columnar_read import plan_queue_read, read_queue_bytes
    from txmq.broker.store.record import decode_record

    store, _ = _prepared_with_commit_record(tmp_path / "data")
    crash(store)
    store = MessageStore(StoreConfig(data_dir=tmp_path / "data", flush_mode="async"))
    try:
        for q in (0, 1):
            read = read_queue_bytes(store, TOPIC, q, 0, 100)
            assert len(read.phys) == store.max_offset(TOPIC, q) > 0
            got = [decode_record(bytes(read.data), int(at)) for at in read.record_at]
            assert got == store.read_queue(TOPIC, q, 0, 100).messages
            assert plan_queue_read(store, TOPIC, q, 0, 100) is None
    finally:
        store.close()


@pytest.mark.parametrize("expression", [{"tags": "a"}, {"sql": "colour = 'red' AND TAGS = 'b'"}], ids=["tag", "sql92"])
def test_a_filter_reads_messages_committed_by_reference_by_their_halves_properties(
        tmp_path: Path, expression: dict) -> None:
    from tests.store._helpers import crash
    from txmq.broker.store.message_filter import MessageFilter

    store, _ = _prepared_with_commit_record(tmp_path / "data")
    crash(store)
    store = MessageStore(StoreConfig(data_dir=tmp_path / "data", flush_mode="async"))
    try:
        wanted = "a" if "tags" in expression else "b"
        got = [m.body for q in (0, 1)
               for m in store.read_queue(TOPIC, q, 0, 100, tag_filter=MessageFilter.parse(**expression)).messages]
        assert sorted(got) == sorted(m.body for m in _messages() if m.properties.get("TAGS") == wanted)
    finally:
        store.close()


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"), max_size=10)


# properties a prepare checks and refuses with a bad value (tests/transaction covers them): any text would not do
_CHECKED_NAMES = frozenset((*REFUSED_DELAY_PROPERTIES, PROP_TIMER_DELIVER_MS, PROP_CHECK_IMMUNITY_SECONDS))


@st.composite
def _transaction(draw) -> list[Message]:
    """One transaction's messages: any body, any properties (the engine's own and the dropped one among them)."""
    out = []
    for _ in range(draw(st.integers(1, 8))):
        props = draw(st.dictionaries(_text.filter(lambda k: k and not k.startswith("__") and k not in _CHECKED_NAMES),
                                     _text, max_size=4))
        for prop in ("TAGS", "KEYS", "UNIQ_KEY"):
            if draw(st.booleans()):
                props[prop] = draw(_text)
        born = draw(st.sampled_from([("10.1.2.3", 5555), ("::1", 40000)]))
        out.append(Message(topic=draw(st.sampled_from([TOPIC, "parcels"])), body=draw(st.binary(min_size=1, max_size=700)),
                           queue_id=draw(st.integers(0, 1)), properties=props, born_host=born))
    return out


@contextmanager
def _committed_in_shuffled_order(transactions, order, store_host, segment_bytes) -> Iterator[MessageStore]:
    """A store on `segment_bytes` segments whose `transactions` (on two topics of two queues) were
    prepared in turn and committed in `order`'s shuffle."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = MessageStore(StoreConfig(data_dir=Path(tmp), flush_mode="async", store_host=store_host,
                                         commitlog_segment_bytes=segment_bytes))
        try:
            for topic in (TOPIC, "parcels"):
                store.topics.create(topic, queue_count=2)
            engine = TransactionEngine(store, TransactionConfig(), clock=_Clock())
            for k, messages in enumerate(transactions):
                engine.prepare(messages, transaction_id=f"t{k}", producer_group="g")
            ids = [f"t{k}" for k in range(len(transactions))]
            order.shuffle(ids)
            for tx in ids:
                engine.end(tx, Resolution.COMMIT)
            yield store
            engine.close()
        finally:
            store.close()


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(transactions=st.lists(_transaction(), min_size=1, max_size=4), order=st.randoms(use_true_random=False),
       store_host=st.sampled_from([("127.0.0.1", 10911), ("::1", 10911)]),
       first=st.integers(0, 3), segment_bytes=st.sampled_from([4096, 1 << 20]))
def test_a_pulls_records_written_in_one_compiled_pass_are_the_ones_resolve_makes_one_at_a_time(
        monkeypatch, transactions, order, store_host, first, segment_bytes) -> None:
    """read_queue_bytes of queues published by reference (commit_ref.final_records, compiled) gives,
    byte for byte, what resolve_many makes a slot at a time (the twin the copy's oracle tests check),
    across segments, transactions committed in another order than prepared, IPv4 and IPv6 hosts;
    with IPv4 hosts only, no record falls back to the twin."""
    from txmq.broker.store import columnar_read
    from txmq.broker.store.commit_ref import resolve_many

    fallbacks = []
    one_by_one = columnar_read._resolved_one_by_one
    monkeypatch.setattr(columnar_read, "_resolved_one_by_one", lambda *a: fallbacks.append(1) or one_by_one(*a))
    with _committed_in_shuffled_order(transactions, order, store_host, segment_bytes) as store:
        for topic in (TOPIC, "parcels"):
            for q in (0, 1):
                start = min(first, store.max_offset(topic, q))
                read = columnar_read.read_queue_bytes(store, topic, q, start, 100)
                got = [bytes(read.data[at:at + n]) for at, n in zip(read.record_at.tolist(), read.sizes.tolist())]
                assert got == resolve_many(store.commitlog.read, read.phys.tolist())
    v4_only = store_host[0] != "::1" and all(m.born_host[0] != "::1" for t in transactions for m in t)
    assert not (v4_only and fallbacks)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(transactions=st.lists(_transaction(), min_size=1, max_size=4), order=st.randoms(use_true_random=False),
       store_host=st.sampled_from([("127.0.0.1", 10911), ("::1", 10911)]),
       first=st.integers(0, 3), segment_bytes=st.sampled_from([4096, 1 << 20]))
def test_a_pull_that_decodes_the_halves_in_place_gives_the_batch_of_the_records_their_slots_stand_for(
        transactions, order, store_host, first, segment_bytes) -> None:
    """A pull's read `in_place` (the halves as they lie, the slots' columns overriding: queue id and
    offset, store time and host, the slot's address in the offset message id) decodes to the very
    batch the final records decode to, across segments, transactions committed in another order
    than prepared, IPv4 and IPv6 hosts; no pull of them writes a final record."""
    from txmq.broker.store import columnar_read
    from txmq.broker.store.pull_decode import decode_pull_batch
    from txmq.broker.store.pull_decode_kernel import pull_batch_compiled

    with _committed_in_shuffled_order(transactions, order, store_host, segment_bytes) as store:
        for topic in (TOPIC, "parcels"):
            for q in (0, 1):
                start = min(first, store.max_offset(topic, q))
                if start == store.max_offset(topic, q):
                    continue
                read = columnar_read.read_queue_bytes(store, topic, q, start, 100, one_kind=True, in_place=True)
                assert read.refs is not None
                in_place = pull_batch_compiled(read.data, read.record_at, read.phys, read.sizes, topic, read.refs)
                finals = columnar_read.read_queue_bytes(store, topic, q, start, 100, one_kind=True)
                assert finals.refs is None
                assert in_place is not None
                assert in_place.equals(decode_pull_batch(finals.data, finals.record_at, finals.phys, finals.sizes,
                                                         topic, q))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(transactions=st.lists(_transaction(), min_size=1, max_size=4), order=st.randoms(use_true_random=False),
       store_host=st.sampled_from([("127.0.0.1", 10911), ("::1", 10911)]),
       segment_bytes=st.sampled_from([4096, 1 << 20]))
def test_a_pull_of_one_or_two_messages_committed_by_reference_gives_the_columnar_pulls_batch(
        monkeypatch, transactions, order, store_host, segment_bytes) -> None:
    """The smallest pulls (a subscriber tailing a queue) decode their messages one by one
    (native_pull.OBJECT_PATH_MAX_COUNT): the batch and offsets are the columnar path's, message
    ids, store hosts and times of slots included."""
    from txmq.broker.server import native_pull

    with _committed_in_shuffled_order(transactions, order, store_host, segment_bytes) as store:
        for topic in (TOPIC, "parcels"):
            for q in (0, 1):
                for start in range(store.max_offset(topic, q)):
                    for count in (1, 2):
                        small = native_pull.pull_batch(store, topic, q, start, count)
                        monkeypatch.setattr(native_pull, "OBJECT_PATH_MAX_COUNT", 0)
                        columnar = native_pull.pull_batch(store, topic, q, start, count)
                        monkeypatch.undo()
                        assert small.batch.equals(columnar.batch), (topic, q, start, count)
                        assert (small.next_offset, small.min_offset, small.max_offset) == \
                            (columnar.next_offset, columnar.min_offset, columnar.max_offset)


def test_a_pull_in_place_whose_entry_disagrees_with_its_half_raises_as_the_records_read_does(tmp_path: Path) -> None:
    """A queue entry whose size is not its half's less what the record drops is not decoded in
    place: the pull takes the final records, and their decode names the mismatch."""
    from tests.store._helpers import crash
    from txmq.broker.store import columnar_read
    from txmq.broker.store.pull_decode import decode_pull_batch
    from txmq.broker.store.pull_decode_kernel import pull_batch_compiled

    store, _ = _prepared_with_commit_record(tmp_path / "data")
    crash(store)  # recovery dispatches the commit record into its slots' queue entries
    store = MessageStore(StoreConfig(data_dir=tmp_path / "data", flush_mode="async"))
    try:
        read = columnar_read.read_queue_bytes(store, TOPIC, 0, 0, 100, one_kind=True, in_place=True)
        assert read.refs is not None
        sizes = read.sizes.copy()
        sizes[-1] += 1
        assert pull_batch_compiled(read.data, read.record_at, read.phys, sizes, TOPIC, read.refs) is None
        with pytest.raises(StoreError):
            decode_pull_batch(read.data, read.record_at, read.phys, sizes, TOPIC, 0, read.refs)
    finally:
        store.close()


@pytest.mark.parametrize("count", [3, 300])
def test_a_commits_queue_offsets_are_the_same_assigned_slot_by_slot_or_with_arrays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """A small COMMIT takes its offsets with a dictionary update per slot, a large one with array
    operations (message_store.ARRAY_OFFSETS_MIN): both must give each queue the same entries."""
    from txmq.broker.store import message_store

    def queue_entries(path: Path, array_min: int) -> dict:
        monkeypatch.setattr(message_store, "ARRAY_OFFSETS_MIN", array_min)
        store = MessageStore(StoreConfig(data_dir=path, flush_mode="async"))
        store.topics.create(TOPIC, queue_count=3)
        engine = TransactionEngine(store, TransactionConfig(), clock=_Clock())
        try:
            store.append([Message(topic=TOPIC, body=b"before", queue_id=1)])  # a queue that does not start at 0
            for t in range(2):
                engine.prepare([Message(topic=TOPIC, body=b"%d-%d" % (t, i), queue_id=(i * 7) % 3,
                                        properties={"TAGS": f"t{i % 2}"}) for i in range(count)],
                               transaction_id=f"t{t}", producer_group="g")
                engine.end(f"t{t}", Resolution.COMMIT)
            return {q: [(e.size, e.tag_hash, store.read_at(e.physical_offset, e.size).body)
                        for e in store.read_queue_entries(TOPIC, q, 0, 3 * count)] for q in range(3)}
        finally:
            store.close()

    by_slot, by_arrays = queue_entries(tmp_path / "dict", 10**9), queue_entries(tmp_path / "arrays", 1)
    assert by_slot == by_arrays
    assert sum(map(len, by_slot.values())) == 2 * count + 1


def test_resolving_one_or_two_slots_reads_their_bytes_not_a_span(tmp_path: Path) -> None:
    """A tailing reader's pull resolves a slot or two: the log is read for what they need (slot,
    commit record head, half), not a megabyte each after them; many slots still share spans. The
    records are the same either way."""
    from txmq.broker.store.commit_ref import resolve, resolve_many

    store = MessageStore(StoreConfig(data_dir=tmp_path / "data", flush_mode="async"))
    try:
        store.topics.create(TOPIC, queue_count=1)
        engine = TransactionEngine(store, TransactionConfig(), clock=_Clock())
        engine.prepare([Message(topic=TOPIC, body=b"b" * 100, queue_id=0) for _ in range(4)], transaction_id="t",
                       producer_group="g")
        store.append([Message(topic="filler", body=b"f" * 4096) for _ in range(64)])  # log past the halves
        engine.end("t", Resolution.COMMIT)
        addresses = [e.physical_offset for e in store.read_queue_entries(TOPIC, 0, 0, 4)]
        read_bytes = []

        def counted(offset: int, size: int) -> bytes:
            got = store.commitlog.read(offset, size)
            read_bytes.append(len(got))
            return got

        for few in (addresses[:1], addresses[:2]):
            read_bytes.clear()
            assert resolve_many(counted, few) == [resolve(store.commitlog.read, a) for a in few]
            assert sum(read_bytes) < 8 << 10, read_bytes
        assert resolve_many(counted, addresses) == [resolve(store.commitlog.read, a) for a in addresses]
        engine.close()
    finally:
        store.close()
