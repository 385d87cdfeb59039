"""A full disk: a write that fails is refused whole and leaves the log as it was."""

from __future__ import annotations

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
