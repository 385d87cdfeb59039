"""A full disk: a write that fails is refused whole and leaves the log as it was."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from txmq.broker.errors import StoreError
from txmq.broker.store import mapped_file

from ._helpers import crash, msg, queue_contents


def test_an_append_that_finds_the_disk_full_writes_nothing_and_the_next_one_succeeds(open_store, monkeypatch):
    store = open_store()
    store.append([msg(body=b"before")])
    end = store.commitlog.write_end
    real = mapped_file.MappedFile.append_parts

    def full(self, parts):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mapped_file.MappedFile, "append_parts", full)
    with pytest.raises(StoreError, match="No space left"):
        store.append([msg(body=b"refused %d" % i) for i in range(5)])
    assert store.commitlog.write_end == end and store.max_offset("T", 0) == 1
    monkeypatch.setattr(mapped_file.MappedFile, "append_parts", real)
    store.append([msg(body=b"after")])
    crash(store)
    assert queue_contents(open_store())[("T", 0)] == [b"before", b"after"]


def test_index_items_a_full_disk_cannot_take_stay_found_by_lookups_and_are_written_once_space_frees(
        tmp_path, monkeypatch):
    from txmq.broker.store import index_file

    index = index_file.IndexService(tmp_path / "index", slots=64, entries_per_file=100_000)
    index.put_many([("before", 1, 1000)])
    index.flush()
    real = index_file.back_mapped

    def full(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(index_file, "back_mapped", full)
    keys = [f"k{i}" for i in range(60_000)]  # past the entries allocated ahead of the writes
    index.put_many([(k, 100 + i, 2000) for i, k in enumerate(keys)])
    index.flush()  # refused by the disk: nothing raised, nothing lost
    assert index.lookup("k59999") == [100 + 59_999] and index.lookup("before") == [1]
    monkeypatch.setattr(index_file, "back_mapped", real)
    index.flush()
    index.close()
    reopened = index_file.IndexService(tmp_path / "index", slots=64, entries_per_file=100_000)
    assert reopened.lookup("k59999") == [100 + 59_999] and reopened.lookup("k0") == [100]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a size-limited tmpfs (needs root)")
def test_an_index_file_that_a_full_disk_cannot_hold_is_refused_before_any_page_of_it_is_touched(tmp_path):
    # On tmpfs even reading a page of a map allocates it, and a full disk makes that a SIGBUS that
    # kills the broker; so the file's blocks must be allocated before the map is read at all.
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        (disk / "index").mkdir()
        with open(disk / "filler", "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 4096)
        script = (
            "import sys\n"
            "from txmq.broker.store.index_file import IndexService\n"
            "index = IndexService(sys.argv[1], slots=64, entries_per_file=1000)\n"
            "index.put_many([('k', 7, 1000)])\n"
            "index.flush()\n"
            "assert index.lookup('k') == [7]\n")
        done = subprocess.run([sys.executable, "-c", script, str(disk / "index")], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        assert "No space left" in done.stderr
        assert not [p for p in (disk / "index").iterdir() if p.name.isdigit()]  # no half-made file left
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
