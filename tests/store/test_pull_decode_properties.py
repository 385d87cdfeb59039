"""Splitting a pull's property texts: shared layouts and the general scan give one answer.

Records whose property texts share a layout (same names, values of the same
widths) are split from the first row's pairs; everything else by a scan of the
whole text. Either way the pull must equal the per-record decode (the object
path), so each test compares a pull with `build_pull_batch` of the same
messages, and checks which way the split went, so that a layout path that
silently stopped being taken (or was taken where it must not be) fails too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.test_pull_columnar import assert_same_pull, open_store
from txmq.broker.store import pull_decode_properties as pull_properties
from txmq.broker.errors import StoreError
from txmq.broker.server.native_pull import pull_batch
from txmq.broker.store.pull_decode_properties import split_properties
from txmq.broker.store import Message
from txmq.broker.store.columnar_read import read_queue_bytes
from txmq.broker.store.record_columns import decode_columns
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_TRANSACTION_ID, PROP_UNIQ_KEY

NAMES = [PROP_UNIQ_KEY, PROP_TAGS, PROP_KEYS, PROP_TRANSACTION_ID, "__TXMQ_SENDER", "color", "ключ", "n"]
value_char = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02 ")


def read_queue_columns(store, topic: str, queue_id: int, offset: int, max_count: int):
    read = read_queue_bytes(store, topic, queue_id, offset, max_count)
    return decode_columns(read.data, read.record_at, read.phys, read.sizes, topic, queue_id)


@st.composite
def layouts(draw) -> list[tuple[str, int]]:
    """A property layout: distinct names, each with a value width in characters."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))
    return [(name, draw(st.integers(0, 40))) for name in names]


def fill(draw, layout: list[tuple[str, int]]) -> dict[str, str]:
    """Values of the layout's widths; a width counts bytes, so a value is either ASCII or
    made of two-byte characters (half as many)."""
    ascii_value = lambda width: st.text(st.sampled_from("ABCDEF0123456789"), min_size=width, max_size=width)
    two_byte_value = lambda width: st.text(st.sampled_from("äöüß"), min_size=width // 2, max_size=width // 2)
    return {name: draw(ascii_value(width) if width % 2 else st.one_of(ascii_value(width), two_byte_value(width)))
            for name, width in layout}


def append_and_pull(root: Path, props: list[dict[str, str]]) -> str:
    """Append one message per property dict to one queue, check the pull against the object
    path, and return which way the split went ("layout" or "scan")."""
    store = open_store(root)
    try:
        store.append([Message("orders", b"b%d" % i, queue_id=0, properties=p) for i, p in enumerate(props)])
        assert_same_pull(store, "orders", 0, 0, len(props), None)
        return _way(read_queue_columns(store, "orders", 0, 0, len(props)))
    finally:
        store.close()


def _way(records) -> str:
    taken = []
    original = pull_properties._shared_layout_pairs

    def spy(*args):
        result = original(*args)
        taken.append(result is not None)
        return result

    pull_properties._shared_layout_pairs = spy
    try:
        split_properties(records)
    finally:
        pull_properties._shared_layout_pairs = original
    return "layout" if taken[0] else "scan"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), layout=layouts(), rows=st.integers(1, 30))
def test_records_of_one_layout_split_from_their_first_row(tmp_path_factory, data, layout, rows):
    props = [fill(data.draw, layout) for _ in range(rows)]
    way = append_and_pull(tmp_path_factory.mktemp("store"), props)
    assert way == "layout"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), shapes=st.lists(layouts(), min_size=2, max_size=4), rows=st.integers(2, 30))
def test_records_of_several_layouts_split_like_the_object_path(tmp_path_factory, data, shapes, rows):
    props = [fill(data.draw, data.draw(st.sampled_from(shapes))) for _ in range(rows)]
    append_and_pull(tmp_path_factory.mktemp("store"), props)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), rows=st.integers(2, 20))
def test_values_of_varying_width_split_like_the_object_path(tmp_path_factory, data, rows):
    props = [data.draw(st.dictionaries(st.sampled_from(NAMES), st.text(value_char, max_size=20), max_size=4))
             for _ in range(rows)]
    append_and_pull(tmp_path_factory.mktemp("store"), props)


def test_names_of_the_same_length_that_differ_are_not_one_layout(tmp_path):
    props = [{"aa": "1", "bb": "2"}, {"aa": "3", "cc": "4"}, {"dd": "5", "bb": "6"}]
    assert append_and_pull(tmp_path / "s", props) == "scan"


def test_a_separator_moved_within_the_same_length_is_not_one_layout(tmp_path):
    # same text length, the \x01 one byte further: "a\x01bc\x02" against "ab\x01c\x02"
    props = [{"a": "bc"}, {"ab": "c"}]
    assert append_and_pull(tmp_path / "s", props) == "scan"


def test_a_nul_byte_inside_a_value_splits_like_the_object_path(tmp_path):
    props = [{"color": "re\x00d", "n": "1"}, {"color": "blue", "n": "2"}, {"color": "\x00\x00\x00\x00", "n": "3"}]
    assert append_and_pull(tmp_path / "s", props) == "scan"


@pytest.mark.parametrize("rows", [1, 2, 500])
def test_the_spark_sinks_committed_properties_take_the_layout_path(tmp_path, rows):
    props = [{PROP_UNIQ_KEY: "%032X" % i, "REAL_TOPIC": "orders", "REAL_QID": "0", PROP_TRANSACTION_ID: "tx-1",
              "TRAN_MSG": "true", "PGROUP": "g", "__TXMQ_SENDER": "p3-a0"} for i in range(rows)]
    assert append_and_pull(tmp_path / "s", props) == "layout"


def test_a_separator_inside_a_value_of_a_shared_layout_is_a_store_error(tmp_path):
    # the store refuses such values on append, so only damage puts one there: the layout
    # must not hide it, the general scan reports it
    store = open_store(tmp_path / "s")
    try:
        store.append([Message("orders", b"b%d" % i, properties={"k": "v%02d" % i, "n": "x"}) for i in range(3)])
        seg = store.commitlog.segments[0]
        at = store.commitlog.read(0, store.commitlog.write_end).index(b"v01")
        seg.write_at(at + 1, b"\x02")  # "v\x021": a pair separator inside the second record's value
        with pytest.raises(StoreError, match="malformed property"):
            pull_batch(store, "orders", 0, 0, 10)
    finally:
        store.close()
