"""Which records of a write get a queue entry, and the SYSFLAG each is stored with: the shortcuts
for one flag or one topic decide what the record-by-record rule decides."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.store.dispatch import goes_to_queue
from txmq.broker.store.message import (
    HALF_TOPIC,
    SYSFLAG_GROUP_BITS,
    SYSFLAG_GROUP_END,
    SYSFLAG_GROUP_MEMBER,
    SYSFLAG_SPLIT_GROUP,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from txmq.broker.store.message_store import _stored_sys_flags
from txmq.broker.store.queue_offsets import queued_mask

_flags = st.sampled_from([0, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_ROLLBACK,
                          SYSFLAG_TRANSACTION_PREPARED | SYSFLAG_GROUP_MEMBER, SYSFLAG_SPLIT_GROUP | 1])
_records = st.lists(st.tuples(_flags, st.sampled_from([HALF_TOPIC, "T", "U"])), min_size=1, max_size=20)
_one_kind = st.tuples(_flags, st.sampled_from([HALF_TOPIC, "T"]), st.integers(1, 20)).map(
    lambda t: [(t[0], t[1])] * t[2])


@settings(max_examples=300, deadline=None)
@given(st.one_of(_records, _one_kind))
def test_the_queued_mask_is_the_rule_applied_to_each_record(records):
    flags, topics = [f for f, _ in records], [t for _, t in records]
    each = [goes_to_queue(f, t) for f, t in records]
    mask = queued_mask(flags, topics)
    assert (mask if mask is not None else [True] * len(records)) == each


@settings(max_examples=300, deadline=None)
@given(st.one_of(_records, _one_kind).map(lambda rs: [f for f, _ in rs]), st.booleans())
def test_stored_flags_clear_the_callers_group_bits_and_mark_the_group(flags, group):
    cleared = [f & ~SYSFLAG_GROUP_BITS for f in flags]
    expected = ([f | SYSFLAG_GROUP_MEMBER for f in cleared[:-1]] + [cleared[-1] | SYSFLAG_GROUP_END]) if group \
        else cleared
    assert list(_stored_sys_flags(flags, group)) == expected
