"""HalfRefs: a transaction's halves kept as column chunks read back as the HalfRef rows they hold."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.transaction.state import HalfRef, HalfRefs

_rows = st.lists(st.tuples(st.integers(1, 2000), st.sampled_from(["a", "b"]), st.integers(0, 3),
                           st.sampled_from(["", "s1", "s2"])), max_size=30)
# each step adds a prepare call's halves as columns, or one half as recovery reads it back
_steps = st.lists(st.tuples(st.booleans(), _rows), max_size=6)


def _build(steps) -> tuple[HalfRefs, list[HalfRef]]:
    refs, expected, at = HalfRefs(), [], 0
    for as_columns, rows in steps:
        call = []
        for size, topic, qid, sender in rows:
            call.append(HalfRef(at, size, len(expected) + len(call), topic, qid, rows[0][3] if as_columns else sender))
            at += size
        if as_columns:
            refs.add([h.physical_offset for h in call], [h.size for h in call], [h.half_queue_offset for h in call],
                     [h.real_topic for h in call], [h.real_queue_id for h in call], call[0].sender if call else "")
        else:
            for h in call:
                refs.append(h)
        expected.extend(call)
    return refs, expected


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_the_halves_read_back_in_the_order_they_were_added(steps):
    refs, expected = _build(steps)
    assert list(refs) == expected and len(refs) == len(expected) and bool(refs) == bool(expected)
    assert [refs[i] for i in range(len(expected))] == expected
    assert [refs[-i - 1] for i in range(len(expected))] == expected[::-1]


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_columns_are_the_fields_of_every_half_in_order(steps):
    refs, expected = _build(steps)
    phys, sizes, topics, queue_ids = refs.columns()
    assert (phys.tolist(), sizes.tolist(), topics, queue_ids.tolist()) == (
        [h.physical_offset for h in expected], [h.size for h in expected], [h.real_topic for h in expected],
        [h.real_queue_id for h in expected])
    assert all(type(v) is int for h in refs for v in (h.physical_offset, h.size, h.half_queue_offset,
                                                      h.real_queue_id))  # plain ints: they go to JSON


@settings(max_examples=200, deadline=None)
@given(_steps, st.sets(st.sampled_from(["", "s1", "s2"])))
def test_the_halves_of_some_senders_are_theirs_in_order(steps, senders):
    refs, expected = _build(steps)
    assert list(refs.of_senders(frozenset(senders))) == [h for h in expected if h.sender in senders]
    assert list(refs) == expected  # the selection took nothing away


@settings(max_examples=100, deadline=None)
@given(_steps, _steps)
def test_a_capture_does_not_see_halves_added_after_it(before, after):
    refs, expected = _build(before)
    captured = refs.captured()
    later, _ = _build(after)
    for h in later:
        refs.append(h)
    assert list(captured) == expected
    assert list(refs) == expected + list(later)


def test_an_index_out_of_range_is_an_index_error():
    refs = HalfRefs([HalfRef(0, 10, 0, "a", 0, "")])
    with pytest.raises(IndexError):
        refs[1]
    with pytest.raises(IndexError):
        HalfRefs()[0]


def test_columns_of_differing_lengths_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        HalfRefs().add([0, 10], [10], [0, 1], ["a", "a"], [0, 0], "")


@settings(max_examples=200, deadline=None)
@given(_steps, st.randoms(use_true_random=False))
def test_halves_are_in_log_order_when_their_offsets_ascend(steps, rnd):
    """Chunks added out of order (concurrent prepares) are found out by their ends alone."""
    refs, expected = _build(steps)
    chunks = list(refs._chunks)
    rnd.shuffle(chunks)
    shuffled = HalfRefs()
    for chunk in chunks:
        shuffled.add(chunk.physical_offsets, chunk.sizes, chunk.half_queue_offsets, chunk.real_topics,
                     chunk.real_queue_ids, chunk.sender)
    offsets = [h.physical_offset for h in shuffled]
    assert refs.in_log_order()
    assert shuffled.in_log_order() == (offsets == sorted(offsets))
