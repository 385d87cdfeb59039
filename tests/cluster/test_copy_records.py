"""A history copy's records, source to copy, through the same pieces the copier uses (a records
pull, `copy_messages`, `append_copy`): for any property map a record may hold, the copy holds
the same properties, body and header fields a reader sees; only store fields differ."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.cluster.copier import copy_messages
from txmq.broker.server.native_pull import records_batch
from txmq.broker.store import MessageStore
from txmq.broker.store.message import PROP_KEYS, PROP_SHARDING_KEY, PROP_TAGS, PROP_UNIQ_KEY, Message
from txmq.broker.store.record import decode_record

from ..store._helpers import small_config

SEPARATORS = "\x00\x01\x02"  # RocketMQ's property string separators (and NUL) never occur in names or values
names = st.one_of(st.sampled_from([PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, PROP_SHARDING_KEY]),
                  st.text(st.characters(blacklist_characters=SEPARATORS, blacklist_categories=("Cs",)),
                          min_size=1, max_size=24).filter(lambda n: n != "__CRC32#"))
values = st.text(st.characters(blacklist_characters=SEPARATORS, blacklist_categories=("Cs",)), max_size=60)
records = st.lists(st.tuples(st.dictionaries(names, values, max_size=8), st.binary(min_size=1, max_size=300),
                             st.integers(0, 2 ** 31 - 1), st.integers(1, 2 ** 41), st.integers(0, 16)),
                   min_size=1, max_size=12)


def seen(raw: bytes) -> tuple:
    r = decode_record(raw, verify=True)
    return (r.queue_offset, r.body, r.properties, r.flag, r.sys_flag, r.born_timestamp, r.born_host,
            r.reconsume_times)


@settings(max_examples=25, deadline=None)
@given(records)
def test_a_copy_holds_every_property_body_and_header_field_of_its_source_for_any_property_map(rows):
    with tempfile.TemporaryDirectory() as d:
        source = MessageStore(small_config(Path(d) / "source"))
        target = MessageStore(small_config(Path(d) / "target"))
        try:
            source.append([Message("t", body, 0, props, flag=flag, born_timestamp=born,
                                   born_host=("10.1.2.3", 4567), reconsume_times=times)
                           for props, body, flag, born, times in rows])
            pulled = records_batch(source, "t", 0, 0, len(rows), max_bytes=1 << 20).batch
            messages, _ = copy_messages("t", 0, pulled)
            target.append_copy(messages, 0)
            copied = records_batch(target, "t", 0, 0, len(rows), max_bytes=1 << 20).batch
            assert [seen(r) for r in copied.column("record").to_pylist()] == \
                [seen(r) for r in pulled.column("record").to_pylist()]
        finally:
            source.close()
            target.close()
