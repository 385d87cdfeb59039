"""A split group's parts written on the CommitLog's I/O thread while the next part is encoded.

At most one such write is in flight, and it is the last write in the log: a
flush never counts it as durable before it lands, every other write waits for
it first, and when it fails the log is cut back to where it began, the group
fails, and nobody else's records are lost.
"""

from __future__ import annotations

import threading

import pytest

from txmq.broker.errors import StoreError
from txmq.broker.store import mapped_file
from txmq.broker.store.commitlog import CommitLog
from tests.store._helpers import PausedCommit, copies_of_new_sources, crash, msg, queue_contents

IO_THREAD = "txmq-commitlog-io"


def _on_io_thread() -> bool:
    return threading.current_thread().name.startswith(IO_THREAD)


def _failing_io_writes(monkeypatch, fail_at: int) -> None:
    """The `fail_at`-th write on the I/O thread (counted from 1) fails like a full disk."""
    real = mapped_file.MappedFile.append_parts
    calls = []

    def append_parts(self, parts):
        if _on_io_thread():
            calls.append(1)
            if len(calls) == fail_at:
                raise OSError(28, "No space left on device")
        return real(self, parts)

    monkeypatch.setattr(mapped_file.MappedFile, "append_parts", append_parts)


def test_a_split_groups_parts_but_the_last_are_written_on_the_io_thread(open_store, monkeypatch) -> None:
    threads = []
    real = mapped_file.MappedFile.append_parts

    def append_parts(self, parts):
        threads.append(threading.current_thread().name)
        return real(self, parts)

    monkeypatch.setattr(mapped_file.MappedFile, "append_parts", append_parts)
    store = open_store()
    copies = copies_of_new_sources(store, 4)
    threads.clear()
    PausedCommit(store, copies, monkeypatch, pause_at=1).finish()
    assert [name.startswith(IO_THREAD) for name in threads] == [True] * 4 + [False]  # the op record: not
    assert queue_contents(store)[("FINAL", 1)] == [b"s0", b"s1", b"s2", b"s3"]


def test_a_flush_does_not_count_a_write_in_flight_as_durable(tmp_path, monkeypatch) -> None:
    release = threading.Event()
    real = mapped_file.MappedFile.append_parts

    def held_on_the_io_thread(self, parts):
        if _on_io_thread():
            assert release.wait(10)
        return real(self, parts)

    monkeypatch.setattr(mapped_file.MappedFile, "append_parts", held_on_the_io_thread)
    log = CommitLog(tmp_path / "log", 1 << 20, ("127.0.0.1", 10911))
    try:
        log._defer([b"x" * 100], 100, log._current_segment())
        assert log.write_end == 100
        assert log.flush() == 0  # the bytes are not in the file yet
        release.set()
        assert log.settle() is None
        assert log.flush() == 100
    finally:
        release.set()
        log.close()


def test_a_failed_part_fails_the_commit_and_leaves_the_log_as_it_was(open_store, monkeypatch) -> None:
    store = open_store()
    copies = copies_of_new_sources(store, 4)
    before = store.commitlog.write_end
    _failing_io_writes(monkeypatch, fail_at=2)
    commit = PausedCommit(store, copies, monkeypatch, pause_at=1)
    commit.finish()
    assert isinstance(commit.error, StoreError) and "No space left" in str(commit.error)
    assert store.commitlog.write_end == before
    assert ("FINAL", 1) not in queue_contents(store)
    store.append([msg("FINAL", b"next", queue_id=1)])
    assert queue_contents(store)[("FINAL", 1)] == [b"next"]


@pytest.mark.parametrize("crashes", [False, True], ids=["running", "after a crash"])
def test_a_failed_part_found_by_another_writer_costs_that_writer_nothing(open_store, monkeypatch, crashes) -> None:
    store = open_store()
    copies = copies_of_new_sources(store, 4)
    _failing_io_writes(monkeypatch, fail_at=2)
    commit = PausedCommit(store, copies, monkeypatch, pause_at=3)  # parts 1 and 2 sent, part 2 failing
    store.append([msg("OTHER", b"acknowledged")])  # waits for part 2, finds it failed, writes in its place
    commit.finish()
    assert isinstance(commit.error, StoreError)
    assert queue_contents(store)[("OTHER", 0)] == [b"acknowledged"]
    if crashes:
        crash(store)
        store = open_store()
    contents = queue_contents(store)
    assert contents[("OTHER", 0)] == [b"acknowledged"]
    assert ("FINAL", 1) not in contents
    store.append([msg("OTHER", b"later")])
    assert queue_contents(store)[("OTHER", 0)] == [b"acknowledged", b"later"]


def test_a_failed_part_found_by_another_writer_is_not_left_for_the_next_commit(open_store, monkeypatch) -> None:
    store = open_store()
    copies = copies_of_new_sources(store, 4)
    _failing_io_writes(monkeypatch, fail_at=2)
    commit = PausedCommit(store, copies, monkeypatch, pause_at=3, fail_at=3)  # then its build of part 3 fails
    store.append([msg("OTHER", b"acknowledged")])  # finds part 2 failed
    commit.finish()
    assert isinstance(commit.error, KeyboardInterrupt)  # the group ended on its own error, not part 2's
    store.append_group_copies(copies_of_new_sources(store, 3, queue_id=2), [msg("OP", b"op")])
    contents = queue_contents(store)
    assert contents[("FINAL", 2)] == [b"s0", b"s1", b"s2"] and contents[("OTHER", 0)] == [b"acknowledged"]
