"""Atomic groups: all-or-nothing after a crash, and never split by a max-offset snapshot."""

from __future__ import annotations

import os
import threading

from txmq.broker.store.message import SYSFLAG_GROUP_END, SYSFLAG_GROUP_MEMBER
from tests.store._helpers import crash, msg, queue_contents

NO_CHECKPOINTS = dict(checkpoint_interval_ms=10**8, flush_interval_ms=10**8)


def test_group_records_carry_member_and_end_flags(open_store) -> None:
    store = open_store()
    results = store.append_group([msg(body=b"a"), msg(body=b"b"), msg(body=b"c")])
    flags = [store.read_at(r.physical_offset).sys_flag for r in results]
    assert flags == [SYSFLAG_GROUP_MEMBER, SYSFLAG_GROUP_MEMBER, SYSFLAG_GROUP_END]


def test_group_flags_from_callers_are_ignored_in_plain_appends(open_store) -> None:
    store = open_store()
    m = msg()
    m.sys_flag = SYSFLAG_GROUP_MEMBER
    r = store.append([m])[0]
    assert store.read_at(r.physical_offset).sys_flag == 0


def _truncate_log_at(root, offset: int, segment_bytes: int) -> None:
    cl = root / "commitlog"
    for name in sorted(os.listdir(cl)):
        start = int(name)
        if start >= offset and start > 0:
            os.unlink(cl / name)
        elif start <= offset < start + segment_bytes:
            os.truncate(cl / name, offset - start)


def test_a_group_missing_its_end_record_is_dropped_whole(open_store, tmp_path) -> None:
    store = open_store(**NO_CHECKPOINTS)
    store.append([msg(body=b"before")])
    group = store.append_group([msg(body=b"g%d" % i, queue_id=i % 2) for i in range(5)])
    crash(store)
    _truncate_log_at(tmp_path / "store", group[-1].physical_offset, 16 * 1024)  # GROUP_END record lost
    store = open_store()
    assert store.recovery.crashed
    assert queue_contents(store) == {("T", 0): [b"before"]}
    assert store.append([msg(body=b"after")])[0].queue_offset == 1


def test_a_torn_group_spanning_segments_is_dropped_whole(open_store, tmp_path) -> None:
    store = open_store(**NO_CHECKPOINTS)
    store.append([msg(body=b"before")])
    group = store.append_group([msg(body=b"%02d" % i * 400) for i in range(60)])
    assert group[0].physical_offset // (16 * 1024) != group[-1].physical_offset // (16 * 1024)
    crash(store)
    _truncate_log_at(tmp_path / "store", group[-1].physical_offset + 10, 16 * 1024)
    store = open_store()
    assert queue_contents(store) == {("T", 0): [b"before"]}
    assert store.commitlog.write_end == group[0].physical_offset
    assert [m.body for m in store.read_queue("T", 0, 0, 10).messages] == [b"before"]


def test_complete_groups_survive_a_crash(open_store) -> None:
    store = open_store(**NO_CHECKPOINTS)
    store.append_group([msg(body=b"a"), msg(body=b"b", queue_id=1)])
    crash(store)
    store = open_store()
    assert queue_contents(store) == {("T", 0): [b"a"], ("T", 1): [b"b"]}


def test_snapshot_never_splits_a_group(open_store) -> None:
    """A writer appends groups with one record per queue; a snapshot must see equal offsets in all queues."""
    store = open_store(commitlog_segment_bytes=1 << 20, consume_queue_entries_per_file=1000)
    queues = 6
    stop = threading.Event()
    bad: list[dict] = []

    def writer() -> None:
        while not stop.is_set():
            store.append_group([msg(topic="G", queue_id=q, body=b"x") for q in range(queues)])

    def reader() -> None:
        while not stop.is_set():
            snap = store.max_offsets_snapshot(["G"])
            if len(set(snap.values())) > 1 and len(snap) == queues:
                bad.append(snap)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    threading.Event().wait(1.5)
    stop.set()
    for t in threads:
        t.join()
    assert store.max_offset("G", 0) > 50
    assert bad == []
