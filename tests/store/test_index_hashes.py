"""The index entries of a write: one per UNIQ_KEY and one per KEYS word, at their record's offset."""

from __future__ import annotations

from zlib import crc32

from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.store.dispatch import index_hashes, index_positions
from txmq.broker.store.index_file import key_hash

_word = st.text("abc#", min_size=1, max_size=4)


def reference(uniq_keys, keys, topics, phys):
    """Record by record: the UNIQ_KEYs first (in record order), then the KEYS words."""
    pairs = [(crc32(u.encode(), crc32(b"#U#")), p) for u, p in zip(uniq_keys, phys) if u]
    for record_keys, topic, p in zip(keys, topics, phys):
        for k in (record_keys or "").split(" "):
            if k:
                pairs.append((key_hash(f"{topic}#{k}"), p))
    return [h for h, _ in pairs], [p for _, p in pairs]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), _word), st.one_of(st.none(), st.lists(_word, max_size=3).map(" ".join)),
                          st.sampled_from(["t", "u"])), min_size=1, max_size=20))
def test_index_entries_are_those_of_the_records_one_by_one(rows):
    uniq_keys = [u for u, _, _ in rows]
    keys = [k for _, k, _ in rows]
    topics = [t for _, _, t in rows]
    phys = [100 * i for i in range(len(rows) + 1)]  # and the end of the batch, as writers pass it
    hashes, which = index_hashes(uniq_keys, keys, topics)
    assert (hashes, index_positions(hashes, which, phys)) == reference(uniq_keys, keys, topics, phys)
