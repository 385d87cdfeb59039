"""The filtered columnar read (store/filter_read.py): it selects what decoding every message and
asking the filter of each selects, while decoding only the records that pass."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.test_pull_columnar import open_store
from tests.store.test_sql92_properties import VALUES, conditions
from txmq.broker.errors import IllegalFilterExpression, StoreError
from txmq.broker.server.native_pull import build_pull_batch, pull_batch
from txmq.broker.store import Message, filter_read
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS
from txmq.broker.store.message_filter import MessageFilter

value = st.sampled_from(VALUES)


@st.composite
def messages(draw) -> Message:
    props = {k: draw(value) for k in draw(st.sets(st.sampled_from(["a", "b", "other", "__hidden"])))}
    if draw(st.booleans()):
        props[PROP_TAGS] = draw(st.sampled_from(["1", "abc", "TRUE", "x'y"]))
    if draw(st.booleans()):
        props[PROP_KEYS] = draw(st.sampled_from(["k1", "k1 k2", "abc"]))
    born = draw(st.sampled_from([("10.1.2.3", 5555), ("2001:db8::7", 1)]))
    return Message("orders", draw(st.binary(min_size=1, max_size=80)), queue_id=0, properties=props, born_host=born)


def compiled(expression: str) -> MessageFilter | None:
    try:
        return MessageFilter.parse(sql=expression)
    except IllegalFilterExpression:
        return None


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.lists(messages(), min_size=1, max_size=25), expression=conditions,
       store_host=st.sampled_from([("127.0.0.1", 10911), ("::1", 10911)]))
def test_a_filtered_pull_equals_the_decoded_messages_the_filter_accepts(batch, expression, store_host):
    f = compiled(expression)
    if f is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "store", store_host)
        try:
            store.append(batch)
            everything = store.read_queue("orders", 0, 0, 100).messages
            expected = build_pull_batch([m for m in everything if f.accepts(m)])
            got = pull_batch(store, "orders", 0, 0, 100, message_filter=f).batch
            assert got.to_pylist() == expected.to_pylist()
        finally:
            store.close()


def test_only_the_selected_records_are_decoded(tmp_path, monkeypatch):
    decoded = []
    real = filter_read.decode_pull_batch

    def counting(data, at, phys, sizes, topic, queue_id):
        decoded.append(len(at))
        return real(data, at, phys, sizes, topic, queue_id)

    monkeypatch.setattr(filter_read, "decode_pull_batch", counting)
    store = open_store(tmp_path / "store")
    try:
        store.append([Message("orders", b"x", properties={"n": str(i)}) for i in range(50)])
        got = pull_batch(store, "orders", 0, 0, 50, message_filter=MessageFilter.parse(sql="n IN ('7', '9')"))
        assert got.batch.column("properties").to_pylist() == [[("n", "7")], [("n", "9")]]
        assert decoded == [2]
    finally:
        store.close()


def test_a_damaged_record_is_reported_even_where_the_filter_would_skip_it(tmp_path):
    store = open_store(tmp_path / "store")
    try:
        store.append([Message("orders", b"hello", properties={"a": "b"})])
        store.commitlog.segments[0].write_at(4, b"\0\0\0\0")  # the magic code of the record
        with pytest.raises(StoreError):
            pull_batch(store, "orders", 0, 0, 10, message_filter=MessageFilter.parse(sql="a = 'no'"))
    finally:
        store.close()
