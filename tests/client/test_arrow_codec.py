"""The native Arrow codecs, property-based: send batch → store messages → pull batch keeps every field."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.client.batches import to_arrow_table
from txmq.broker.client.types import Message
from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.protocol.native_arrow import PULL_SCHEMA
from txmq.broker.server.native_ingest import PlainRows, QueueSelector, decode_rows
from txmq.broker.server.native_pull import build_pull_batch
from txmq.broker.store.message import StoredMessage

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02 |"), min_size=1,
               max_size=12)
messages = st.lists(st.builds(
    Message,
    topic=st.sampled_from(["a", "b"]),
    body=st.binary(min_size=1, max_size=64),
    tag=st.none() | text,
    keys=st.lists(text, max_size=3),
    properties=st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), text, max_size=3),
    sharding_key=st.none() | text,
    message_id=st.none() | text,
), min_size=1, max_size=20)


def _through_ipc(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch as a reader gets it after the IPC framing Flight uses."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return pa.ipc.open_stream(sink.getvalue()).read_all().combine_chunks().to_batches()[0]


def decode_batch(*args) -> list:
    rows = decode_rows(*args)
    return rows.messages() if isinstance(rows, PlainRows) else rows


def _stored(decoded) -> list[StoredMessage]:
    return [StoredMessage(topic=m.topic, body=m.body, queue_id=m.queue_id, properties=dict(m.properties),
                          born_timestamp=m.born_timestamp, queue_offset=i, store_timestamp=m.born_timestamp + 1,
                          msg_id=f"OFF{i}")
            for i, m in enumerate(decoded)]


@settings(max_examples=60, deadline=None)
@given(messages)
def test_send_batch_round_trips_through_a_pull_batch(msgs):
    decoded = decode_batch("", to_arrow_table(msgs), (), lambda topic: 4, QueueSelector())
    batch = _through_ipc(build_pull_batch(_stored(decoded)))
    assert batch.schema.equals(PULL_SCHEMA)
    rows = batch.to_pylist()
    for i, (m, row) in enumerate(zip(msgs, rows)):
        assert (row["topic"], row["body"], row["tag"]) == (m.topic, m.body, m.tag)
        assert row["keys"] == list(m.keys)
        assert dict(row["properties"]) == dict(m.properties)
        assert row["messageId"] == (m.message_id or f"OFF{i}")
        assert row["transactionId"] is None
        assert 0 <= row["queueId"] < 4


@settings(max_examples=30, deadline=None)
@given(st.lists(text, min_size=2, max_size=30))
def test_same_sharding_key_always_picks_the_same_queue(keys):
    selector = QueueSelector()
    first = {k: selector.select("t", 8, k) for k in keys}
    again = {k: QueueSelector().select("t", 8, k) for k in keys}
    assert first == again


def test_protobuf_and_arrow_forms_decode_alike():
    a, = decode_batch("t", pa.table({"body": [b"x"], "tag": ["g"]}), (), lambda t: 1, QueueSelector())
    p, = decode_batch("t", None, [pb.MessageSpec(body=b"x", tag="g")], lambda t: 1, QueueSelector())
    assert (a.topic, a.body, a.properties) == (p.topic, p.body, p.properties)
