"""Segment rolls (blank filler), queue-file rolls, and groups around segment boundaries."""

from __future__ import annotations

import os

from txmq.broker.store.record_layout import BLANK_MAGIC_CODE
from tests.store._helpers import msg

SEG = 16 * 1024


def _segments(tmp_path) -> list[str]:
    return sorted(os.listdir(tmp_path / "store" / "commitlog"))


def test_segments_roll_with_a_blank_filler_and_are_named_by_start_offset(open_store, tmp_path) -> None:
    store = open_store()
    results = store.append([msg(body=b"x" * 1000, queue_id=0) for _ in range(40)])
    names = _segments(tmp_path)
    assert len(names) >= 3
    assert names[:3] == ["%020d" % 0, "%020d" % SEG, "%020d" % (2 * SEG)]
    first = (tmp_path / "store" / "commitlog" / names[0]).read_bytes()
    assert len(first) == SEG
    last_in_first = max((r for r in results if r.physical_offset < SEG), key=lambda r: r.physical_offset)
    blank_at = last_in_first.physical_offset + last_in_first.size
    assert int.from_bytes(first[blank_at:blank_at + 4], "big") == SEG - blank_at
    assert int.from_bytes(first[blank_at + 4:blank_at + 8], "big") == BLANK_MAGIC_CODE
    for r in results:  # no record straddles a segment boundary
        assert r.physical_offset // SEG == (r.physical_offset + r.size - 1) // SEG
    assert [m.body for m in store.read_queue("T", 0, 0, 100).messages] == [b"x" * 1000] * 40


def test_rolled_log_recovers_after_restart(open_store) -> None:
    store = open_store()
    store.append([msg(body=b"%05d" % i * 100) for i in range(50)])
    store.close()
    store = open_store()
    assert store.max_offset("T", 0) == 50
    assert store.read_queue("T", 0, 49, 1).messages[0].body == b"%05d" % 49 * 100
    assert store.append([msg()])[0].queue_offset == 50


def test_queue_files_roll_at_the_configured_entry_count(open_store, tmp_path) -> None:
    store = open_store(consume_queue_entries_per_file=16)
    for i in range(5):
        store.append([msg(body=b"%d" % (i * 10 + j)) for j in range(10)])
    store.dispatcher.flush()  # queue entries reach their files when flushed
    qdir = tmp_path / "store" / "consumequeue" / "T" / "0"
    assert sorted(os.listdir(qdir)) == ["%020d" % 0, "%020d" % 16, "%020d" % 32, "%020d" % 48]
    assert (qdir / ("%020d" % 0)).stat().st_size == 16 * 20
    read = store.read_queue("T", 0, 10, 30)
    assert [m.body for m in read.messages] == [b"%d" % i for i in range(10, 40)]
    store.close()
    assert [m.body for m in open_store().read_queue("T", 0, 45, 10).messages] == [b"%d" % i for i in range(45, 50)]


def test_a_group_that_fits_a_segment_is_not_split_across_segments(open_store) -> None:
    store = open_store()
    store.append([msg(body=b"x" * 1000) for _ in range(12)])  # most of the first segment
    group = store.append_group([msg(body=b"g" * 1000) for _ in range(6)])
    segments = {r.physical_offset // SEG for r in group}
    assert segments == {1}


def test_a_group_bigger_than_a_segment_spans_segments_and_stays_readable(open_store) -> None:
    store = open_store()
    group = store.append_group([msg(body=b"%03d" % i * 300) for i in range(40)])
    assert len({r.physical_offset // SEG for r in group}) >= 2
    store.close()
    store = open_store()
    assert [m.body for m in store.read_queue("T", 0, 0, 100).messages] == [b"%03d" % i * 300 for i in range(40)]


def test_reopening_with_other_file_sizes_keeps_the_recorded_geometry(open_store) -> None:
    store = open_store(commitlog_segment_bytes=8192, consume_queue_entries_per_file=4)
    store.append([msg(body=b"%d" % i * 300) for i in range(40)])
    store.close()
    store = open_store(commitlog_segment_bytes=1 << 20, consume_queue_entries_per_file=1000)
    assert store.config.commitlog_segment_bytes == 8192
    assert [m.body for m in store.read_queue("T", 0, 0, 100).messages] == [b"%d" % i * 300 for i in range(40)]
