"""The leader-epoch file: where each leader epoch's writes begin in this replica's log.

Kafka's leader-epoch checkpoint and RocketMQ 5's epoch file play the same part: a
replica that rejoins asks the leader where its own last epoch ends in the leader's
log, and cuts everything it holds past that point (writes no leader acknowledged).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from txmq.broker.store.durable import write_bytes_atomically


class Epoch(NamedTuple):
    epoch: int
    start: int  # CommitLog offset of the epoch's first write


class LeaderEpochs:
    """(epoch, start offset) entries, epochs and starts both increasing, persisted atomically."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            raw = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            raw = []
        self.entries: list[Epoch] = [Epoch(int(e), int(s)) for e, s in raw]
        self._check()

    def _check(self) -> None:
        for a, b in zip(self.entries, self.entries[1:]):
            assert a.epoch < b.epoch and a.start <= b.start, f"epoch entries out of order: {a} then {b}"

    def _save(self) -> None:
        self._check()
        write_bytes_atomically(self.path, json.dumps([list(e) for e in self.entries]).encode())

    @property
    def last(self) -> Epoch | None:
        return self.entries[-1] if self.entries else None

    def begin(self, epoch: int, start: int) -> None:
        """This replica leads `epoch` from `start` on (its log's end when it won)."""
        last = self.last
        assert last is None or (epoch > last.epoch and start >= last.start), f"epoch {epoch}@{start} after {last}"
        self.entries.append(Epoch(epoch, start))
        self._save()

    def end_of(self, epoch: int, log_end: int) -> Epoch:
        """(the largest epoch <= `epoch` held here, where it ends): the start of the next epoch,
        or the log's end for the last one. Epoch(-1, 0) when none is that old."""
        found = None
        for i, entry in enumerate(self.entries):
            if entry.epoch > epoch:
                break
            found = i
        if found is None:
            return Epoch(-1, 0)
        nxt = self.entries[found + 1].start if found + 1 < len(self.entries) else log_end
        return Epoch(self.entries[found].epoch, nxt)

    def truncate_to(self, offset: int) -> None:
        """The log was cut at `offset`: epochs that began at or past it hold nothing here now."""
        keep = [e for e in self.entries if e.start < offset]
        if keep != self.entries:
            self.entries = keep
            self._save()

    def adopt(self, leader_entries: list[Epoch], log_end: int) -> None:
        """A follower's history is its leader's, for the part of the log it holds."""
        keep = [e for e in leader_entries if e.start < log_end]
        if keep != self.entries:
            self.entries = keep
            self._save()
