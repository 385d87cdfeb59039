"""The route registry (the NameServer's role): which group holds which queue of a topic.

Keys in etcd:
- /txmq/topics/<topic>   {"queues": [[group, queue_id], ...], "type": T}: a cluster topic's
                         queues in their global order; every write is a compare-and-swap. A
                         queue that moved (moves.py) is [group, queue_id, [[group', id', base],
                         ...], sealing]: its later segments, each a physical queue of another
                         group holding its logical offsets from `base` on; `sealing` names the
                         group a move is under way to (no new writes at the source meanwhile).
                         A fifth field is the copy under way of one of its segments into another
                         group (copier.py): [[group, id, base], [group', id'], rate]. A sixth
                         is what the move under way was told of its history, [rate, keep_history],
                         so a resumer (the target's leader, its mover gone) copies as told.
- /txmq/groups/<g>/...   the groups themselves (coordination.py): a group routes only while
                         its leader key, which lives on the leader's lease, exists. So a dead
                         group's queues drop out of every route until it elects again.

A queue is (topic, group, queue id), as in RocketMQ (topic, broker name, queue id): each
group numbers its share of a topic's queues from 0.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Callable

from txmq.broker.errors import BrokerUnavailable, IllegalQueue

from .coordination import ROOT, EtcdKV

log = logging.getLogger(__name__)

TOPICS_ROOT = "/txmq/topics/"
RETIRED_ROOT = "/txmq/retired/"  # /txmq/retired/<group>: drained for good (moves.py)
MISS_REFRESH_S = 0.1  # a topic missing from the cached routes is looked up again at most this often


@dataclass(frozen=True)
class Segment:
    """A physical queue holding a logical queue's offsets from `base` on (its offset 0 is `base`)."""

    group: str
    queue_id: int
    base: int


@dataclass(frozen=True)
class Copy:
    """A segment's history being copied into a physical queue of another group (copier.py); when
    done, `target` takes the segment's place in the queue's segments (the source becomes empty)."""

    source: Segment
    target: Segment  # same base as the source
    rate: int = 0  # bytes per second; 0: unlimited

    def to_json(self) -> list:
        s, t = self.source, self.target
        return [[s.group, s.queue_id, s.base], [t.group, t.queue_id], self.rate]

    @classmethod
    def parse(cls, entry: list) -> "Copy":
        (sg, sq, sb), (tg, tq), rate = entry
        return cls(Segment(str(sg), int(sq), int(sb)), Segment(str(tg), int(tq), int(sb)), int(rate))


@dataclass(frozen=True)
class MoveTerms:
    """What a move under way was told to do with the queue's history, kept with its sealing mark so
    the target's leader that resumes it (its mover gone) does the same (moves.py)."""

    rate: int  # the history copy's bytes per second; 0: unlimited
    keep_history: bool = False

    def to_json(self) -> list:
        return [self.rate, self.keep_history]

    @classmethod
    def parse(cls, entry: list) -> "MoveTerms":
        rate, keep = entry
        return cls(int(rate), bool(keep))


@dataclass(frozen=True)
class QueueRef:
    """A logical queue: named by where it was created (group, queue_id), which is also its first
    segment; `moves` are the segments it moved to, in order; `sealing` the target of a move under way."""

    group: str
    queue_id: int
    moves: tuple[Segment, ...] = ()
    sealing: str = ""
    copying: Copy | None = None
    terms: MoveTerms | None = None  # with `sealing`: what the move was told; None with no move under way

    @property
    def segments(self) -> tuple[Segment, ...]:
        return (Segment(self.group, self.queue_id, 0),) + self.moves

    @property
    def current(self) -> Segment:
        """The segment that takes new writes."""
        return self.moves[-1] if self.moves else Segment(self.group, self.queue_id, 0)

    @property
    def key(self) -> tuple[str, int]:
        return (self.group, self.queue_id)

    def end_of(self, segment: Segment) -> int | None:
        """Where `segment` ends in logical offsets (the next segment's base; None for the last)."""
        segments = self.segments
        i = segments.index(segment)
        return segments[i + 1].base if i + 1 < len(segments) else None

    def with_copy_done(self) -> "QueueRef":
        """The copy in place of its source: it follows the source, with the same base, so the source
        holds no offset any more (segments.spans: an empty range)."""
        copy = self.copying
        assert copy is not None and copy.source in self.segments, "a copy replaces a segment of its queue"
        segments = list(self.segments)
        segments.insert(segments.index(copy.source) + 1, copy.target)
        return dataclasses.replace(self, moves=tuple(segments[1:]), copying=None)

    def unsealed(self, **changes) -> "QueueRef":
        """The queue with its move under way ended (committed or rolled back): no mark, no terms."""
        return dataclasses.replace(self, sealing="", terms=None, **changes)

    def to_json(self) -> list:
        if not self.moves and not self.sealing and self.copying is None:
            return [self.group, self.queue_id]
        out = [self.group, self.queue_id, [[m.group, m.queue_id, m.base] for m in self.moves], self.sealing]
        if self.terms is not None:
            return out + [self.copying.to_json() if self.copying is not None else None, self.terms.to_json()]
        return out + [self.copying.to_json()] if self.copying is not None else out

    @classmethod
    def parse(cls, entry: list) -> "QueueRef":
        moves = tuple(Segment(str(g), int(q), int(b)) for g, q, b in (entry[2] if len(entry) > 2 else ()))
        copying = Copy.parse(entry[4]) if len(entry) > 4 and entry[4] else None
        terms = MoveTerms.parse(entry[5]) if len(entry) > 5 and entry[5] else None
        return cls(str(entry[0]), int(entry[1]), moves, str(entry[3]) if len(entry) > 3 else "", copying, terms)


@dataclass(frozen=True)
class TopicLayout:
    name: str
    queues: tuple[QueueRef, ...]
    message_type: str = ""  # "" = untyped (MIXED)
    revision: int = 0  # etcd mod revision of the layout key

    def share(self, group: str) -> int:
        """How many physical queues `group` holds (its queue ids are 0..share-1): its own queues,
        the segments of queues moved to it and the copies being made into it."""
        return max((s.queue_id + 1 for q in self.queues
                    for s in q.segments + ((q.copying.target,) if q.copying else ()) if s.group == group), default=0)

    def physical(self, group: str) -> dict[int, bool]:
        """{physical queue id on `group`: whether it takes new writes}: a queue sealed by a move
        (under way or done) is read-only there."""
        out: dict[int, bool] = {}
        for q in self.queues:
            current = q.current
            for s in q.segments:
                if s.group == group and q.end_of(s) != s.base:  # one copied away holds nothing to read
                    out[s.queue_id] = s == current and not q.sealing
        return out

    def copied_away(self, group: str, queue_id: int) -> bool:
        """Whether `group`'s physical queue holds no offset of its queue any more (its history was
        copied to another group, copier.py): nothing is read there, whatever its log still holds."""
        for q in self.queues:
            for s in q.segments:
                if (s.group, s.queue_id) == (group, queue_id):
                    return q.end_of(s) == s.base
        return False

    def sealed(self, group: str) -> tuple[frozenset[int], frozenset[int]]:
        """(moved, sealing): `group`'s physical queues whose queue moved on to another segment (or
        that a history copy is filling), and those a move under way sealed (they still take COMMITs
        of the halves they hold)."""
        moved, sealing = set(), set()
        for q in self.queues:
            if q.copying is not None and q.copying.target.group == group:
                moved.add(q.copying.target.queue_id)  # only the copier writes it (MessageStore.append_copy)
            current = q.current
            for s in q.segments:
                if s.group == group and s != current:
                    moved.add(s.queue_id)
            if q.sealing and current.group == group:
                sealing.add(current.queue_id)
        return frozenset(moved), frozenset(sealing)

    def moved_to(self, group: str, queue_id: int) -> str:
        """The group now taking the writes of the queue whose segment is `group`'s physical queue
        `queue_id`, when that segment is no longer its current one ("" otherwise)."""
        for q in self.queues:
            current = q.current
            if any((s.group, s.queue_id) == (group, queue_id) for s in q.segments):
                return current.group if (current.group, current.queue_id) != (group, queue_id) else ""
        return ""

    def base(self, group: str, queue_id: int) -> int | None:
        """The logical offset at which `group`'s physical queue `queue_id` starts (its offset 0);
        None when this layout has no such physical queue."""
        for q in self.queues:
            for s in q.segments:
                if (s.group, s.queue_id) == (group, queue_id):
                    return s.base
        return None

    def queue(self, group: str, queue_id: int) -> QueueRef:
        """The logical queue named (group, queue_id)."""
        for q in self.queues:
            if q.key == (group, queue_id):
                return q
        raise IllegalQueue(f"topic {self.name!r} has no queue {group}:{queue_id}")

    def replaced(self, queue: QueueRef) -> "TopicLayout":
        """This layout with `queue` (same logical name) in place of the old entry."""
        return dataclasses.replace(self, queues=tuple(queue if q.key == queue.key else q for q in self.queues))

    def to_json(self) -> bytes:
        return json.dumps({"queues": [q.to_json() for q in self.queues], "type": self.message_type}).encode()

    @classmethod
    def parse(cls, name: str, raw: bytes, revision: int = 0) -> "TopicLayout":
        data = json.loads(raw)
        return cls(name, tuple(QueueRef.parse(e) for e in data["queues"]), str(data.get("type", "")), revision)


@dataclass(frozen=True)
class GroupRoute:
    name: str
    leader: str | None  # "H:P" of the leader, None while the group elects
    members: tuple[str, ...]  # every live replica, the leader first: a client's fail-over list
    retired: bool = False  # drained for good (moves.py): no new queue, no transaction goes there

    @property
    def endpoints(self) -> tuple[str, ...]:
        return self.members or ((self.leader,) if self.leader else ())


def spread(queue_count: int, groups: list[str], existing: tuple[QueueRef, ...] = (), *,
           first: int = 0) -> tuple[QueueRef, ...]:
    """`existing` extended to `queue_count` queues dealt round-robin over `groups` from the
    `first`-th (a topic's name picks it, so small topics do not all start on one group), each
    group numbering its new queues after the ones it holds: a grown topic keeps every queue
    where it was."""
    if queue_count < len(existing):
        raise IllegalQueue(f"a cluster topic cannot shrink from {len(existing)} to {queue_count} queues "
                           f"(its messages would become unreachable)")
    if queue_count > len(existing) and not groups:
        raise BrokerUnavailable("no broker group has a leader: the topic's queues have nowhere to go")
    held: dict[str, int] = {}
    for q in existing:  # a group's physical queues include the segments moved or being copied to it
        for s in q.segments + ((q.copying.target,) if q.copying else ()):
            held[s.group] = max(held.get(s.group, 0), s.queue_id + 1)
    out = list(existing)
    order = sorted(groups)
    for i in range(queue_count - len(existing)):
        group = order[(first + len(existing) + i) % len(order)]
        out.append(QueueRef(group, held.get(group, 0)))
        held[group] = held.get(group, 0) + 1
    result = tuple(out)
    assert len({q.key for q in result}) == len(result), "a queue is listed twice"
    return result


class RouteRegistry:
    """Reads and writes of the registry in etcd; every write is a compare-and-swap."""

    def __init__(self, etcd: EtcdKV) -> None:
        self.etcd = etcd

    def groups(self) -> dict[str, GroupRoute]:
        leaders: dict[str, str] = {}
        members: dict[str, list[str]] = {}
        names: set[str] = set()  # every group that ever elected (its epoch key stays): a stable list
        for key, value, _ in self.etcd.range_prefix(ROOT):
            name, _, rest = key[len(ROOT):].partition("/")
            names.add(name)
            if rest == "leader":
                leaders[name] = str(json.loads(value)["endpoint"])
            elif rest.startswith("members/"):
                members.setdefault(name, []).append(rest[len("members/"):])
        retired = {key[len(RETIRED_ROOT):] for key, _, _ in self.etcd.range_prefix(RETIRED_ROOT)}
        out = {}
        for name in sorted(names):
            leader = leaders.get(name)
            rest = sorted(m for m in members.get(name, []) if m != leader)
            out[name] = GroupRoute(name, leader, tuple(([leader] if leader else []) + rest), name in retired)
        return out

    def topics(self) -> dict[str, TopicLayout]:
        return {key[len(TOPICS_ROOT):]: TopicLayout.parse(key[len(TOPICS_ROOT):], value, rev)
                for key, value, rev in self.etcd.range_prefix(TOPICS_ROOT)}

    def topic(self, name: str) -> TopicLayout | None:
        for key, value, rev in self.etcd.range_prefix(TOPICS_ROOT + name):
            if key == TOPICS_ROOT + name:
                return TopicLayout.parse(name, value, rev)
        return None

    def register(self, name: str, queue_count: int, message_type: str, groups: list[str]) -> TopicLayout:
        """Create the topic's layout, or extend it to `queue_count` queues; concurrent creators
        agree because the write is conditional on the revision read."""
        for _ in range(16):
            current = self.topic(name)
            existing = current.queues if current else ()
            mtype = message_type or (current.message_type if current else "")
            if current is not None and len(existing) == queue_count and mtype == current.message_type:
                return current
            layout = TopicLayout(name, spread(queue_count, groups, existing, first=zlib.crc32(name.encode())), mtype)
            if self.etcd.put_if_revision(TOPICS_ROOT + name, layout.to_json(), current.revision if current else 0):
                return self.topic(name) or layout
        raise BrokerUnavailable(f"topic {name!r}: its route kept changing under concurrent creates")


@dataclass(frozen=True)
class RouteSnapshot:
    groups: dict[str, GroupRoute]
    topics: dict[str, TopicLayout]
    taken: float  # monotonic time of the read


# (group's route, topic, the group's share of its queues, message type): create it there
CreateShare = Callable[[GroupRoute, str, int, str], None]


# how old a cached layout may be before a sealed queue's move is looked up afresh in etcd
MOVED_RECHECK_S = 0.05


class RouteView:
    """A broker's cached view of the registry: read at most every `max_age_s`, so QueryRoute
    costs no etcd round trip per call and learns of a new leader within that time."""

    def __init__(self, registry: RouteRegistry, group: str, create_share: CreateShare, *, max_age_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.group = group
        self.create_share = create_share
        self.max_age_s = max_age_s
        self.clock = clock
        self._lock = threading.Lock()
        self._snapshot: RouteSnapshot | None = None

    def snapshot(self, *, fresh: bool = False) -> RouteSnapshot:
        with self._lock:
            snap = self._snapshot
            now = self.clock()
            if fresh or snap is None or now - snap.taken > self.max_age_s:
                snap = RouteSnapshot(self.registry.groups(), self.registry.topics(), now)
                self._snapshot = snap
            return snap

    def refresh(self) -> None:
        self.snapshot(fresh=True)

    def topic(self, name: str) -> TopicLayout | None:
        snap = self.snapshot()
        if name not in snap.topics and self.clock() - snap.taken > MISS_REFRESH_S:
            snap = self.snapshot(fresh=True)  # created through another broker since the last read
        return snap.topics.get(name)

    def groups(self) -> dict[str, GroupRoute]:
        return self.snapshot().groups

    def queue_base(self, topic: str, queue_id: int) -> int:
        """Where this group's physical queue of `topic` starts in its logical queue's offsets (0 for a
        queue that never moved): a queue moved here since the cached read is looked up afresh."""
        layout = self.topic(topic)
        base = None if layout is None else layout.base(self.group, queue_id)
        if base is None:
            layout = self.snapshot(fresh=True).topics.get(topic)
            base = None if layout is None else layout.base(self.group, queue_id)
        return base or 0

    def topics(self) -> dict[str, TopicLayout]:
        return self.snapshot().topics

    def copied_away(self, topic: str, queue_id: int) -> bool:
        """Whether this group's physical queue of `topic` was copied away (TopicLayout.copied_away)."""
        layout = self.topic(topic)
        return layout is not None and layout.copied_away(self.group, queue_id)

    def live_groups(self) -> list[str]:
        return sorted(name for name, g in self.snapshot(fresh=True).groups.items() if g.leader and not g.retired)

    def create_topic(self, name: str, queue_count: int, message_type: str) -> TopicLayout:
        """Register the topic's spread, then create each group's share: this group's first (its
        failure is the caller's), the others' best effort, since each leader also creates what the
        registry gives its group (`reconcile`) when it could not be reached now."""
        layout = self.registry.register(name, queue_count, message_type, self.live_groups())
        groups = self.snapshot(fresh=True).groups
        own = layout.share(self.group)
        if own and self.group in groups:
            self.create_share(groups[self.group], name, own, layout.message_type)
        for group in sorted(groups):
            share = layout.share(group)
            if group != self.group and share and groups[group].leader:
                try:
                    self.create_share(groups[group], name, share, layout.message_type)
                except Exception as exc:  # the group's leader creates it when it reconciles
                    log.warning("topic %s: group %s's share not created yet: %s", name, group, exc)
        return layout

    def shares(self, topics: dict[str, TopicLayout] | None = None) -> dict[str, tuple[int, str]]:
        """{topic: (this group's share of its queues, message type)} for every registered topic (of
        `topics`, a snapshot also given to `sealed`, so a queue is never created before its seal)."""
        out = {}
        for name, layout in (self.topics() if topics is None else topics).items():
            share = layout.share(self.group)
            if share:
                out[name] = (share, layout.message_type)
        return out

    def moved_to(self, topic: str, queue_id: int, *, sealed: bool = False) -> str:
        """The group this group's physical queue `queue_id` of `topic` moved on to ("" if it did not).
        `sealed`: the store holds the queue sealed, so a move may have ended since the cached read:
        read afresh once that is MOVED_RECHECK_S old (a stale reader then learns of it at once)."""
        snap = self.snapshot()
        layout = snap.topics.get(topic)
        to = "" if layout is None else layout.moved_to(self.group, queue_id)
        if not to and sealed and self.clock() - snap.taken > MOVED_RECHECK_S:
            layout = self.snapshot(fresh=True).topics.get(topic)
            to = "" if layout is None else layout.moved_to(self.group, queue_id)
        return to

    def sealed(self, topics: dict[str, TopicLayout] | None = None) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
        """(moved, sealing) queues of this group, as (topic, queue id): see TopicLayout.sealed."""
        moved: set[tuple[str, int]] = set()
        sealing: set[tuple[str, int]] = set()
        for name, layout in (self.topics() if topics is None else topics).items():
            m, s = layout.sealed(self.group)
            moved.update((name, q) for q in m)
            sealing.update((name, q) for q in s)
        return moved, sealing
