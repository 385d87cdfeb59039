"""A cluster-wide consistent cut: every transaction lies wholly below it or wholly above it,
on every group.

Each group's own snapshot is consistent for its transactions (an atomic group is published
at once). A transaction across groups is applied by each participant at its own moment, so
the groups' snapshots taken together may hold it on one group and not yet on another. The
cut fixes that from the start of the range a reader is about to read (the previous cut,
consistent by the same rule) to the groups' snapshots:

1. Each group lists the cross-group transactions with final records in its range
   (CrossGroupCommits: found in the log by the compiled property scan).
2. A transaction seen on some of its participants but not on another is looked up there:
   its state on that group, read before that group scans past its snapshot. COMMITTED with
   no records in the read topics, or no halves at all (UNKNOWN), leaves nothing to read
   there. PENDING, or records past the snapshot, means that group does not hold it yet.
3. While some transaction is held by only part of its groups, each group holding it is
   lowered to the cut just before it (CutBefore: the group's publish history); a group
   that no longer knows that moment (a restart) goes back to the range's start. Lowering
   one group may leave out another transaction there, so this repeats; each round lowers
   a group's cut, and the starts are consistent, so it ends.

A transaction still being applied is left to the next cut, not waited for: a reader is
never blocked by a participant group that is down, beyond the transactions it holds back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from txmq.broker.transaction.cross_records import CrossRecord

from .cross_group import in_parallel

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]  # (group, queue id)
ClusterOffsets = dict[str, dict[QueueKey, int]]  # topic -> (group, queue id) -> offset


class CutGroup(Protocol):
    """What the cut asks of one group's leader (NativeClient implements it)."""

    def cross_group_commits(self, windows: Sequence[tuple[str, int, int, int | None]],
                            transaction_ids: Sequence[str] = ()) -> tuple[list[CrossRecord], dict[str, str]]: ...

    def cut_before(self, topics: Sequence[str], topic: str, queue_id: int,
                   offset: int) -> dict[str, dict[int, int]] | None: ...


@dataclass
class _Seen:
    """One cross-group transaction as the cut sees it."""

    participants: tuple[str, ...]
    at: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)  # group -> (topic, queue, offset)
    held_back: set[str] = field(default_factory=set)  # groups that do not hold it yet


def cluster_cut(groups: Mapping[str, CutGroup], start: ClusterOffsets, snapshot: ClusterOffsets) -> ClusterOffsets:
    """The largest cut found between `start` (consistent) and `snapshot` (each group's own
    snapshot of the same topics) that no cross-group transaction straddles. `groups` must
    hold a client for every group the transactions may name (see the module docstring)."""
    per_group = _by_group(snapshot)
    if len(per_group) <= 1:
        return snapshot
    begin = {g: {(t, q): min(start.get(t, {}).get((g, q), 0), end) for (t, q), end in queues.items()}
             for g, queues in per_group.items()}
    windows = {g: [(t, q, begin[g][(t, q)], end) for (t, q), end in queues.items() if end > begin[g][(t, q)]]
               for g, queues in per_group.items()}
    found = in_parallel(lambda g, w: groups[g].cross_group_commits(w)[0],
                        {g: w for g, w in windows.items() if w})
    seen: dict[str, _Seen] = {}
    for g, records in found.items():
        for r in records:
            s = seen.setdefault(r.transaction_id, _Seen(r.participants))
            s.at.setdefault(g, []).append((r.topic, r.queue_id, r.offset))
    if not seen:
        return snapshot
    _look_up_missing(groups, seen, per_group)

    cut = {g: dict(queues) for g, queues in per_group.items()}
    while True:
        lowered = False
        for tx_id, s in seen.items():
            holding = [g for g, places in s.at.items() if _holds(cut[g], places)]
            if not holding or (len(holding) == len(s.at) and not s.held_back):
                continue  # wholly out, or wholly in on every group that has records of it
            for g in holding:
                cut[g] = _lower(groups[g], cut[g], begin[g], s.at[g], tx_id, g)
                lowered = True
        if not lowered:
            break
    out: ClusterOffsets = {t: {} for t in snapshot}
    for g, queues in cut.items():
        for (t, q), offset in queues.items():
            assert begin[g][(t, q)] <= offset <= per_group[g][(t, q)], "a cut stays within its range"
            out[t][(g, q)] = offset
    return out


def _look_up_missing(groups: Mapping[str, CutGroup], seen: dict[str, _Seen],
                     per_group: dict[str, dict[tuple[str, int], int]]) -> None:
    """For each participant that showed no records of a transaction: does it hold it yet?"""
    asks: dict[str, list[str]] = {}
    for tx_id, s in seen.items():
        for g in s.participants:
            if g not in s.at:
                asks.setdefault(g, []).append(tx_id)
    missing = [g for g in asks if g not in groups]
    for g in missing:  # a group nobody can reach cannot be shown to hold it
        for tx_id in asks.pop(g):
            seen[tx_id].held_back.add(g)

    def ask(g: str) -> tuple[list[CrossRecord], dict[str, str]]:
        beyond = [(t, q, end, None) for (t, q), end in per_group.get(g, {}).items()]
        return groups[g].cross_group_commits(beyond, asks[g])

    def ask_or_fail(g: str, _: object) -> tuple[list[CrossRecord], dict[str, str]] | Exception:
        try:
            return ask(g)
        except Exception as exc:  # noqa: BLE001 - that group's transactions are held back below
            return exc

    answers = in_parallel(ask_or_fail, {g: None for g in asks})
    for g, answer in answers.items():
        if isinstance(answer, Exception):
            log.warning("cluster cut: group %s could not be asked about %d transaction(s): %s", g, len(asks[g]),
                        answer)
            for tx_id in asks[g]:
                seen[tx_id].held_back.add(g)
            continue
        late, states = answer
        late_ids = {r.transaction_id for r in late}
        for tx_id in asks[g]:
            state = states.get(tx_id, "UNKNOWN")
            if tx_id in late_ids or state == "PENDING":
                seen[tx_id].held_back.add(g)  # applied after the snapshot, or not yet
            elif state not in ("COMMITTED", "UNKNOWN"):
                log.warning("cluster cut: transaction %s is %s on group %s but committed on %s", tx_id, state, g,
                            sorted(seen[tx_id].at))


def _holds(cut: dict[tuple[str, int], int], places: list[tuple[str, int, int]]) -> bool:
    return any(cut[(t, q)] > offset for t, q, offset in places)


def _lower(group: CutGroup, cut: dict[tuple[str, int], int], begin: dict[tuple[str, int], int],
           places: list[tuple[str, int, int]], tx_id: str, name: str) -> dict[tuple[str, int], int]:
    """`cut` moved to just before the transaction's records on this group (its range's start
    when the group cannot tell)."""
    topics = sorted({t for t, _ in cut})
    t, q, offset = min(places, key=lambda p: (p[0], p[1], p[2]))
    before = group.cut_before(topics, t, q, offset)
    if before is None:
        log.info("cluster cut: group %s no longer knows the cut before transaction %s: this range waits", name,
                 tx_id)
        return dict(begin)
    lowered = {k: min(end, before.get(k[0], {}).get(k[1], 0)) for k, end in cut.items()}
    if any(lowered[k] < begin[k] for k in lowered):  # only a start that is no cut of this group gets here
        return dict(begin)
    return lowered


def _by_group(offsets: ClusterOffsets) -> dict[str, dict[tuple[str, int], int]]:
    out: dict[str, dict[tuple[str, int], int]] = {}
    for topic, queues in offsets.items():
        for (group, queue_id), offset in queues.items():
            out.setdefault(group, {})[(topic, queue_id)] = offset
    return out


__all__ = ["CutGroup", "cluster_cut"]
