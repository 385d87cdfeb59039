"""Split groups: a large COMMIT written in parts, other writers' records allowed between them.

A COMMIT of a big transaction copies its halves in parts (COPY_PART_BYTES of sources
each). Writers of other queues append between two parts instead of waiting for the
whole copy; writers of a queue the group has already written wait for its end. The
group stays all-or-nothing: visible with its last part, dispatched by recovery only
with its END, and a dead group never comes back.
"""

from __future__ import annotations

import shutil
import threading

import pytest

from txmq.broker.errors import QueueReserved
from txmq.broker.store import message_store, split_group
from tests.store._helpers import SOURCE, PausedCommit, copies_of_new_sources, crash, msg, queue_contents

NO_CHECKPOINTS = dict(checkpoint_interval_ms=10**8, flush_interval_ms=10**8)


def _append_on_thread(store, message) -> tuple[threading.Thread, list]:
    done: list = []
    thread = threading.Thread(target=lambda: done.append(store.append([message])[0]))
    thread.start()
    return thread, done


def test_writers_of_other_queues_append_between_the_parts_of_a_large_commit(open_store, monkeypatch) -> None:
    store = open_store()
    commit = PausedCommit(store, copies_of_new_sources(store, 3), monkeypatch)
    other = store.append([msg("OTHER", b"meanwhile")])[0]  # returns while the COMMIT is half written
    assert [m.body for m in store.read_queue("OTHER", 0, 0, 10).messages] == [b"meanwhile"]
    assert store.max_offset("FINAL", 1) == 0  # nothing of the group is visible yet
    commit.finish()
    assert commit.error is None
    assert [m.body for m in store.read_queue("FINAL", 1, 0, 10).messages] == [b"s0", b"s1", b"s2"]
    assert commit.results[0].physical_offset < other.physical_offset < commit.results[-1].physical_offset


def test_a_writer_of_a_queue_the_commit_has_written_waits_for_its_end(open_store, monkeypatch) -> None:
    store = open_store()
    commit = PausedCommit(store, copies_of_new_sources(store, 3), monkeypatch)
    thread, done = _append_on_thread(store, msg("FINAL", b"later", queue_id=1))
    thread.join(0.3)
    assert thread.is_alive() and not done  # FINAL:1 is reserved to the COMMIT
    commit.finish()
    thread.join(10)
    assert done[0].queue_offset == 3  # after the COMMIT's three finals: offsets stay consecutive
    assert [m.body for m in store.read_queue("FINAL", 1, 0, 10).messages] == [b"s0", b"s1", b"s2", b"later"]


def test_a_queue_reserved_by_a_failed_commit_is_released(open_store, monkeypatch) -> None:
    store = open_store()
    commit = PausedCommit(store, copies_of_new_sources(store, 3), monkeypatch, fail_at=2)
    commit.finish()
    assert isinstance(commit.error, KeyboardInterrupt)
    assert store.append([msg("FINAL", b"after", queue_id=1)])[0].queue_offset == 0
    assert [m.body for m in store.read_queue("FINAL", 1, 0, 10).messages] == [b"after"]


def test_checkpoints_stay_at_the_start_of_a_split_group_being_written(open_store, monkeypatch) -> None:
    store = open_store(**NO_CHECKPOINTS)
    copies = copies_of_new_sources(store, 3)
    start = store.commitlog.write_end
    commit = PausedCommit(store, copies, monkeypatch)
    store.append([msg("OTHER", b"meanwhile")])
    assert store.dispatcher.dispatched_through == start  # a recovery must scan the group from its BEGIN
    commit.finish()
    assert store.dispatcher.dispatched_through == store.commitlog.write_end


def test_records_between_the_parts_survive_a_crash_that_cuts_the_group_short(open_store, monkeypatch) -> None:
    """What a kill -9 in the middle of a large COMMIT leaves: its first parts, other writers'
    records after them, no END."""
    store = open_store(**NO_CHECKPOINTS)
    commit = PausedCommit(store, copies_of_new_sources(store, 3), monkeypatch, pause_at=3, fail_at=3)
    store.append([msg("OTHER", b"meanwhile")])
    commit.finish()  # the build of part 3 dies; parts 1 and 2 stay in the log, dead
    crash(store)
    store = open_store()
    assert store.recovery.crashed
    contents = queue_contents(store)
    assert contents[("OTHER", 0)] == [b"meanwhile"]
    assert ("FINAL", 1) not in contents and ("OP", 0) not in contents
    assert store.append([msg("FINAL", b"next", queue_id=1)])[0].queue_offset == 0


def test_dead_split_records_at_the_end_of_the_log_are_truncated(open_store, monkeypatch) -> None:
    store = open_store(**NO_CHECKPOINTS)
    copies = copies_of_new_sources(store, 3)
    end = store.commitlog.write_end
    monkeypatch.setattr(store.commitlog, "truncate_to", lambda offset: None)  # the process dies instead
    commit = PausedCommit(store, copies, monkeypatch, pause_at=3, fail_at=3)
    commit.finish()
    assert store.commitlog.write_end > end
    crash(store)
    monkeypatch.undo()
    store = open_store()
    assert store.commitlog.write_end == end


@pytest.mark.parametrize("queues_lost", [False, True], ids=["from the checkpoint", "queues rebuilt from the log"])
def test_a_split_group_with_records_between_its_parts_is_recovered_whole(open_store, tmp_path, monkeypatch,
                                                                         queues_lost) -> None:
    store = open_store(**NO_CHECKPOINTS)
    commit = PausedCommit(store, copies_of_new_sources(store, 3), monkeypatch)
    store.append([msg("OTHER", b"meanwhile")])
    commit.finish()
    crash(store)
    if queues_lost:
        shutil.rmtree(tmp_path / "store" / "consumequeue")
    store = open_store()
    contents = queue_contents(store)
    assert contents[("FINAL", 1)] == [b"s0", b"s1", b"s2"]
    assert contents[("OTHER", 0)] == [b"meanwhile"] and contents[("OP", 0)] == [b"op"]


def test_a_later_split_group_does_not_revive_a_dead_one(open_store, tmp_path, monkeypatch) -> None:
    store = open_store(**NO_CHECKPOINTS)
    dead = PausedCommit(store, copies_of_new_sources(store, 3), monkeypatch, pause_at=3, fail_at=3)
    store.append([msg("OTHER", b"keeps the dead parts in the log")])
    dead.finish()
    store.append([msg("FINAL", b"after the dead group", queue_id=1)])  # takes FINAL:1's offset 0 again
    live = PausedCommit(store, copies_of_new_sources(store, 2, queue_id=2), monkeypatch)
    live.finish()
    assert live.error is None
    crash(store)
    shutil.rmtree(tmp_path / "store" / "consumequeue")  # recovery scans the whole log, both groups
    store = open_store()
    contents = queue_contents(store)
    assert contents[("FINAL", 1)] == [b"after the dead group"]
    assert contents[("FINAL", 2)] == [b"s0", b"s1"]


def test_parts_are_built_one_ahead_of_the_writer_and_in_order() -> None:
    started: list[int] = []
    consumed: list[int] = []

    def build(i: int):
        def run() -> int:
            started.append(i)
            return i
        return run

    for value in split_group.built_one_ahead([build(i) for i in range(5)]):
        consumed.append(value)
        assert max(started) <= value + 1  # never more than the next part built ahead
    assert consumed == started == list(range(5))


def test_a_part_that_fails_to_build_fails_the_group_at_that_part() -> None:
    def failing() -> int:
        raise OSError("source unreadable")

    seen = []
    with pytest.raises(OSError, match="source unreadable"):
        for value in split_group.built_one_ahead([lambda: 1, failing, lambda: 3]):
            seen.append(value)
    assert seen == [1]


def test_writers_queued_at_the_lock_get_in_between_two_parts(open_store, monkeypatch) -> None:
    """The split group's thread would take the lock back at once (Python's lock is not fair):
    between two parts it lets the writers queued for the lock in first."""
    store = open_store(commitlog_segment_bytes=64 << 20)
    copies = copies_of_new_sources(store, 400)
    monkeypatch.setattr(message_store, "COPY_PART_BYTES", 2048)  # a part per ~30 copies
    stop = threading.Event()
    landed: list[int] = []

    def writer() -> None:
        while not stop.is_set():
            landed.append(store.append([msg("OTHER", b"x")])[0].physical_offset)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        results = store.append_group_copies(copies)
    finally:
        stop.set()
        thread.join(10)
    parts = len(copies.parts(2048))
    gaps = sum(b.physical_offset != a.physical_offset + a.size for a, b in zip(results, results[1:]))
    assert landed and gaps >= parts - 2, (gaps, parts)  # the writer's records between (nearly) every two parts


def test_the_count_of_writers_waiting_for_the_lock_returns_to_zero(open_store) -> None:
    store = open_store(commitlog_segment_bytes=64 << 20)

    def writer() -> None:
        for _ in range(300):
            store.append([msg("OTHER", b"x")])

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert store.write_lock.waiters == 0


@pytest.mark.parametrize("end_survives", [True, False], ids=["the END survives", "the END is lost"])
def test_a_split_group_begun_in_an_earlier_segment_is_all_or_nothing_in_a_log_shorter_than_its_checkpoint(
        open_store, monkeypatch, end_survives) -> None:
    """A data directory whose log ends before its checkpoint (copied from a live broker, or a
    file system that lost a tail it had acknowledged) is scanned from the last segment with data.
    A split group whose BEGIN lies in an earlier segment is still all or nothing: whole when its
    END survived, and none of it (not the part before the last segment) when it did not."""
    monkeypatch.setattr(message_store, "COPY_PART_BYTES", 1)  # a part per copy
    store = open_store(commitlog_segment_bytes=4096)
    results = store.append_group_copies(copies_of_new_sources(store, 30), [msg("OP", b"op")])
    begin, end = results[0].physical_offset, store.commitlog.write_end
    segment_of = store.commitlog.segment_for
    assert segment_of(begin).start < segment_of(end - 1).start, "the group must cross a segment end"
    cut = end if end_survives else results[-2].physical_offset  # the last copy and the op record lost
    store.append([msg("AFTER", b"lost with the tail %d" % i) for i in range(3)])
    last = store.commitlog.segments[-1]
    assert last.start == segment_of(end - 1).start == segment_of(cut - 1).start, "cut in the END's segment"
    path = last.path
    store.close()  # a clean stop: the checkpoint now points past what the truncation leaves
    with open(path, "r+b") as f:
        f.truncate(cut - last.start)
    store = open_store(commitlog_segment_bytes=4096)
    contents = queue_contents(store)
    if end_survives:
        assert contents[("FINAL", 1)] == [b"s%d" % i for i in range(30)]
        assert contents[("OP", 0)] == [b"op"]
    else:
        assert contents.get(("FINAL", 1), []) == [] and contents.get(("OP", 0), []) == []
    assert contents.get(("AFTER", 0), []) == []
    assert contents[(SOURCE, 0)] == [b"s%d" % i for i in range(30)]


def test_a_write_that_may_not_wait_is_refused_on_a_reserved_queue_and_writes_nothing(open_store, monkeypatch) -> None:
    store = open_store()
    commit = PausedCommit(store, copies_of_new_sources(store, 3), monkeypatch)  # FINAL:1 written and reserved
    end = store.commitlog.write_end
    assert store.queue_reserved("FINAL", 1) and not store.queue_reserved("FINAL", 2)
    with pytest.raises(QueueReserved, match="FINAL:1"):
        store.append([msg("FINAL", b"would wait", queue_id=1)], wait_reserved=False)
    assert store.commitlog.write_end == end
    store.append([msg("FINAL", b"another queue", queue_id=2)], wait_reserved=False)  # not held: written at once
    commit.finish()
    assert not store.queue_reserved("FINAL", 1)
    store.append([msg("FINAL", b"after the commit", queue_id=1)], wait_reserved=False)
    contents = queue_contents(store)
    assert contents[("FINAL", 1)] == [b"s0", b"s1", b"s2", b"after the commit"]
    assert contents[("FINAL", 2)] == [b"another queue"]


def test_a_commit_that_may_not_wait_is_refused_on_a_reserved_queue_and_stays_pending(open_store, monkeypatch) -> None:
    from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine
    from txmq.broker.transaction.state import TxState

    store = open_store()
    engine = TransactionEngine(store, TransactionConfig())
    engine.prepare([msg("FINAL", b"small", queue_id=1)], transaction_id="small")
    large = PausedCommit(store, copies_of_new_sources(store, 3), monkeypatch)  # FINAL:1 reserved
    with pytest.raises(QueueReserved, match="FINAL:1"):
        engine.end("small", Resolution.COMMIT, wait_reserved=False)
    assert engine.get("small").state is TxState.PENDING
    large.finish()
    assert engine.end("small", Resolution.COMMIT, wait_reserved=False).newly_ended
    assert queue_contents(store)[("FINAL", 1)] == [b"s0", b"s1", b"s2", b"small"]


def test_a_failed_commit_never_cuts_records_written_between_its_parts(open_store, monkeypatch) -> None:
    store = open_store()
    commit = PausedCommit(store, copies_of_new_sources(store, 3), monkeypatch, pause_at=2, fail_at=3)
    store.append([msg("OTHER", b"between parts 1 and 2")])  # acknowledged
    commit.finish()
    assert isinstance(commit.error, KeyboardInterrupt)
    assert queue_contents(store)[("OTHER", 0)] == [b"between parts 1 and 2"]
    store.append([msg("OTHER", b"after the failed commit")])
    assert queue_contents(store)[("OTHER", 0)] == [b"between parts 1 and 2", b"after the failed commit"]
