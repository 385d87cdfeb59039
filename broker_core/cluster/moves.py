"""Moving queues between groups (RocketMQ 5's static topics, with transactions), then their history.

A queue is named by where it was created, (group, queue id), and keeps that name for producers,
consumers and Spark checkpoints. Its messages are addressed by logical offsets; its layout in the
registry (routes.py) is a list of segments, each a physical queue of some group holding the
logical offsets from its `base` on. A move appends a segment at once; the history behind it is
copied afterwards (step 4), or with `keep_history` read where it lies:

1. **sealing**: the layout marks the queue sealing towards the target (compare-and-swap). From
   then on a leader of the source group that is elected seals the queue before it serves.
2. **seal** (the source's leader, SealQueue): new sends and halves to the queue are refused
   (QueueSealed, retriable: the client sends elsewhere); the COMMITs of halves it already held
   still land. It waits, up to `wait`, until no pending transaction holds halves for the queue,
   then returns the queue's end E once its writes are acknowledged and visible. A transaction
   still pending at the deadline rolls the move back (the layout unmarked, the seal released),
   with a message naming it: halves are not carried over, they end where they were prepared.
3. **commit**: the layout gets the segment (target, its next physical queue id, base) by
   compare-and-swap and loses the sealing mark; the target's leader creates the physical queue.
   Readers take offsets below base from the source and from base on from the target.

4. **copy** (unless the move keeps the history where it lies): the segment's history is copied
   into the target group, throttled, and the copy takes the segment's place (copier.py).

The source's leader may die at any point: a new leader seals the queue at its promotion (the mark
is in etcd), its log holds every acknowledged write, so the seal call is repeated on it and
returns the same E. A mover that dies leaves the mark; the target group's leader finishes the
move after the broker's --move-resume-after (each step is idempotent; the commit is a
compare-and-swap).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import deque
from typing import Any, Callable

from txmq.broker.errors import (BadRequest, BrokerUnavailable, NotLeader, RequestTimeout, TopicNotFound,
                                TransactionAlreadyEnded, TransactionConflict, TxmqError, UnknownTransaction)
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, Message as StoredMessage
from txmq.broker.store.property_names import user_properties

from .coordination import CoordinationUnavailable
from .copier import DEFAULT_RATE, HistoryCopier, plan_copy
from .routes import RETIRED_ROOT, TOPICS_ROOT, Copy, MoveTerms, QueueRef, RouteView, Segment, TopicLayout

log = logging.getLogger(__name__)

SEAL_RETRY_S = 30.0  # beyond the halves' wait: how long the source group may take to have a leader again
DEFAULT_WAIT_S = 30.0
DEFAULT_COPY_WAIT_S = 600.0  # how long a MoveQueues call waits for the history copies it started
TIMER_PRODUCER_GROUP = "txmq-timer"  # the producer group of timer deliveries into moved queues

# (group, native method name, request, timeout s) -> response: a call to that group's leader
CallLeader = Callable[[str, str, Any, float], Any]


def parse_queue(text: str) -> tuple[str, int]:
    """"group:id" -> (group, id)."""
    group, sep, qid = text.rpartition(":")
    if not sep or not qid.isdigit():
        raise BadRequest(f"a queue is named group:id (as topic describe lists it), not {text!r}")
    return group, int(qid)


class QueueMover:
    """Runs moves from one broker (any broker of the cluster may run one); keeps the recent ones
    for `txmq cluster status` and the metrics."""

    def __init__(self, view: RouteView, call_leader: CallLeader, *, clock: Callable[[], float] = time.time,
                 resume_after_s: float) -> None:
        assert resume_after_s > 0, resume_after_s
        self.view = view
        self.resume_after_s = resume_after_s
        self.registry = view.registry
        self.call_leader = call_leader
        self.clock = clock
        self._lock = threading.Lock()
        self.recent: deque[dict] = deque(maxlen=100)
        self.counts = {"done": 0, "rolled_back": 0, "failed": 0}
        self._running: set[tuple[str, str, int]] = set()
        self.copier: HistoryCopier | None = None  # the copies into this broker's group, while it leads
        self._seen_sealing: dict[tuple[str, str, int], float] = {}

    # ---- one move -------------------------------------------------------------------

    def move(self, topic: str, queue: tuple[str, int], to: str, *, wait_s: float = DEFAULT_WAIT_S,
             rate: int = DEFAULT_RATE, keep_history: bool = False) -> dict:
        """Move logical queue `queue` of `topic` to group `to` (see the module's steps); a record of it."""
        key = (topic, *queue)
        with self._lock:
            if key in self._running:
                raise BadRequest(f"queue {queue[0]}:{queue[1]} of {topic!r} is being moved by this broker already")
            self._running.add(key)
        started = self.clock()
        record: dict = {"topic": topic, "queue": f"{queue[0]}:{queue[1]}", "to": to, "started": started}
        try:
            source = self._mark_sealing(topic, queue, to, MoveTerms(rate, keep_history))
            if source is None:
                record.update(state="noop", reason=f"the queue is on {to} already")
                return record
            record["from"] = source.group
            try:
                end, consumer_offsets = self._seal(source, topic, wait_s)
            except Exception as exc:
                self._roll_back(topic, queue, to, source)
                record.update(state="rolled_back", error=str(exc))
                with self._lock:
                    self.counts["rolled_back"] += 1
                raise RequestTimeout(f"move of {topic} {queue[0]}:{queue[1]} to {to} rolled back: {exc}") from exc
            segment = self._commit(topic, queue, to, source.base + end)
            self._create_target(topic, to)  # the source keeps its seal: the queue moved on for good
            self._carry_offsets(topic, segment, consumer_offsets)
            record.update(state="done", base=segment.base, target_queue=segment.queue_id,
                          seconds=round(self.clock() - started, 3))
            if not keep_history:
                copy = self.start_copy(topic, queue, source.group, rate)
                if copy is not None:
                    record["copy"] = _copy_view(copy)
            with self._lock:
                self.counts["done"] += 1
            log.warning("moved %s %s:%d from %s to %s:%d at offset %d", topic, queue[0], queue[1], source.group, to,
                        segment.queue_id, segment.base)
            return record
        except Exception as exc:
            if "state" not in record:
                record.update(state="failed", error=str(exc))
                with self._lock:
                    self.counts["failed"] += 1
            raise
        finally:
            record["finished"] = self.clock()
            with self._lock:
                self._running.discard(key)
                self.recent.append(record)

    def _layout(self, topic: str) -> TopicLayout:
        layout = self.registry.topic(topic)
        if layout is None:
            raise TopicNotFound(f"topic {topic!r} is not a cluster topic (it has no layout in the registry)")
        return layout

    def _cas(self, layout: TopicLayout, queue: QueueRef) -> bool:
        return self.registry.etcd.put_if_revision(TOPICS_ROOT + layout.name, layout.replaced(queue).to_json(),
                                                  layout.revision)

    def _mark_sealing(self, topic: str, queue: tuple[str, int], to: str, terms: MoveTerms) -> Segment | None:
        """Step 1: the segment being sealed (None: the queue is on `to` already); the mark keeps the
        move's `terms` for a resumer."""
        groups = self.view.snapshot(fresh=True).groups
        if to not in groups:
            raise BadRequest(f"group {to!r} is not in the cluster (groups: {', '.join(sorted(groups))})")
        if self.retired().get(to):
            raise BadRequest(f"group {to!r} was drained (retired): it takes no queues")
        for _ in range(16):
            layout = self._layout(topic)
            q = layout.queue(*queue)
            if q.sealing:
                if q.sealing != to:
                    raise BadRequest(f"queue {queue[0]}:{queue[1]} of {topic!r} is being moved to {q.sealing}")
                return q.current  # a move left half-way: resume it
            if q.current.group == to:
                return None
            if not groups[to].leader:
                raise BrokerUnavailable(f"group {to!r} has no leader now: it cannot take the queue")
            if self._cas(layout, dataclasses.replace(q, sealing=to, terms=terms)):
                return q.current
        raise BrokerUnavailable(f"topic {topic!r}: its layout kept changing under the move")

    def _seal(self, source: Segment, topic: str, wait_s: float) -> tuple[int, dict[str, int]]:
        """Step 2 on the source's leader, again on its next leader when it changes meanwhile."""
        from txmq.broker.protocol import native_pb2
        deadline = time.monotonic() + wait_s + SEAL_RETRY_S
        request = native_pb2.SealQueueRequest(topic=topic, queue_id=source.queue_id, wait_ms=int(wait_s * 1000))
        while True:
            try:
                response = self.call_leader(source.group, "SealQueue", request, wait_s + 15.0)
                return int(response.end_offset), dict(response.consumer_offsets)
            except (NotLeader, BrokerUnavailable, CoordinationUnavailable) as exc:
                if time.monotonic() >= deadline:
                    raise
                log.warning("move: sealing %s on %s: %s; trying its leader again", topic, source.group, exc)
                time.sleep(0.5)

    def _commit(self, topic: str, queue: tuple[str, int], to: str, base: int) -> Segment:
        """Step 3: the segment on `to` from `base` on, the sealing mark gone, in one compare-and-swap."""
        for _ in range(16):
            layout = self._layout(topic)
            q = layout.queue(*queue)
            if not q.sealing and q.current.group == to:
                return q.current  # another mover (a resumer) finished it
            if q.sealing != to:
                raise BadRequest(f"the move of {topic} {queue[0]}:{queue[1]} to {to} was rolled back meanwhile")
            assert base >= q.current.base, "a queue's segments start in increasing offsets"
            segment = Segment(to, layout.share(to), base)
            if self._cas(layout, q.unsealed(moves=q.moves + (segment,))):
                return segment
        raise BrokerUnavailable(f"topic {topic!r}: its layout kept changing under the move")

    def _carry_offsets(self, topic: str, segment: Segment, offsets: dict[str, int]) -> None:
        """Consumer groups' committed offsets of the queue (logical: they hold as they are) go to the
        group that keeps them from now on, so a group that leaves takes none with it."""
        from txmq.broker.protocol import native_pb2
        for consumer_group, offset in sorted(offsets.items()):
            request = native_pb2.CommitOffsetsRequest(group=consumer_group, offsets=[
                native_pb2.TopicOffsets(topic=topic, offsets={segment.queue_id: offset})])
            try:
                self.call_leader(segment.group, "CommitOffsets", request, 10.0)
            except TxmqError as exc:
                log.warning("move: consumer group %s's offset of %s not carried to %s: %s", consumer_group, topic,
                            segment.group, exc)

    def _roll_back(self, topic: str, queue: tuple[str, int], to: str, source: Segment) -> None:
        for _ in range(16):
            try:
                layout = self._layout(topic)
                q = layout.queue(*queue)
                if q.sealing != to or self._cas(layout, q.unsealed()):
                    break
            except TxmqError:
                log.exception("move: could not unmark %s %s:%d", topic, *queue)
                break
        self._release(source, topic)

    def _release(self, source: Segment, topic: str) -> None:
        """A rolled-back move's seal goes; the registry's word governs the queue from now on."""
        from txmq.broker.protocol import native_pb2
        try:
            self.call_leader(source.group, "SealQueue",
                             native_pb2.SealQueueRequest(topic=topic, queue_id=source.queue_id, release=True), 5.0)
        except TxmqError as exc:  # a new leader holds no seal of its own: nothing to release there
            log.warning("move: releasing the seal of %s on %s: %s", topic, source.group, exc)

    def _create_target(self, topic: str, to: str) -> None:
        """The target's share grew by the new physical queue: create it now (its leader's
        reconcile would within a second)."""
        self.view.refresh()
        layout = self._layout(topic)
        route = self.view.groups().get(to)
        if route is not None and route.leader:
            try:
                self.view.create_share(route, topic, layout.share(to), layout.message_type)
            except (TxmqError, CoordinationUnavailable) as exc:
                log.warning("move: creating %s's new queue of %s: %s (its leader's reconcile will)", to, topic, exc)

    # ---- timer messages due to a queue that moved away --------------------------------

    def deliver_timer(self, copy: StoredMessage, index: int) -> None:
        """A timer message of this group, due to its physical queue `copy.queue_id` that a move
        sealed, into the queue's current segment on its group: a transaction there whose id names
        (this group, topic, timer index), committed. Called again for the same index (a crash
        before this group wrote its marker), the COMMIT finds it committed and nothing is written
        twice; a transaction of that id ended otherwise (its halves discarded) moves to the next
        generation of the id."""
        from txmq.broker.protocol import native_pb2
        layout = self.view.topic(copy.topic)
        here = (self.view.group, copy.queue_id)
        q = next((q for q in (layout.queues if layout else ()) if here in {(s.group, s.queue_id) for s in q.segments}),
                 None)
        if q is None:
            raise BadRequest(f"{copy.topic} queue {copy.queue_id} of group {self.view.group} is in no layout")
        target = q.current
        if q.sealing or (target.group, target.queue_id) == here:
            raise BrokerUnavailable(f"queue {q.key[0]}:{q.key[1]} of {copy.topic} is being moved")
        props = dict(copy.properties)
        spec = native_pb2.MessageSpec(topic=copy.topic, body=copy.body, tag=props.get(PROP_TAGS, ""),
                                      keys=[k for k in props.get(PROP_KEYS, "").split(" ") if k],
                                      properties=user_properties(props), message_id=props.get(PROP_UNIQ_KEY, ""),
                                      queue_id=target.queue_id)
        commit = native_pb2.EndTransactionRequest(resolution=native_pb2.COMMIT, producer_group=TIMER_PRODUCER_GROUP)
        for generation in range(16):
            tx_id = f"timer-{self.view.group}-{copy.topic}-{index}" + (f"#{generation}" if generation else "")
            commit.transaction_id = tx_id
            try:
                self.call_leader(target.group, "EndTransaction", commit, 10.0)
                return  # committed now or before: delivered
            except UnknownTransaction:
                pass
            except (TransactionConflict, TransactionAlreadyEnded):
                continue  # rolled back or discarded: that generation delivered nothing
            prepare = native_pb2.PrepareRequest(transaction_id=tx_id, producer_group=TIMER_PRODUCER_GROUP,
                                                batch=native_pb2.MessageBatch(messages=[spec]))
            try:
                self.call_leader(target.group, "PrepareMessages", prepare, 10.0)
            except TransactionAlreadyEnded:
                continue
            self.call_leader(target.group, "EndTransaction", commit, 10.0)
            return
        raise BrokerUnavailable(f"timer message {index}: every generation of its transaction on {target.group} ended")

    # ---- copying the history (copier.py runs it on the target's leader) ------------------

    def start_copy(self, topic: str, queue: tuple[str, int], group: str, rate: int) -> Copy | None:
        """Mark the copy of the queue's oldest history on `group` into its current group (a
        compare-and-swap; the target's leader runs it); the copy under way, if any."""
        for _ in range(16):
            layout = self._layout(topic)
            q = layout.queue(*queue)
            if q.copying is not None:
                return q.copying
            copy = plan_copy(layout, q, group, rate)
            if copy is None:
                return None
            if self._cas(layout, dataclasses.replace(q, copying=copy)):
                return copy
        raise BrokerUnavailable(f"topic {topic!r}: its layout kept changing under the copy's mark")

    def history_on(self, group: str) -> list[tuple[str, tuple[str, int]]]:
        """(topic, queue) of every queue whose history lies (partly) on `group`, not yet copied away."""
        out = []
        for name, layout in sorted(self.registry.topics().items()):
            for q in layout.queues:
                copy = q.copying
                if (copy is not None and copy.source.group == group) or plan_copy(layout, q, group, 0) is not None:
                    out.append((name, q.key))
        return out

    def copy_history_off(self, group: str, rate: int, wait_s: float) -> list[tuple[str, tuple[str, int]]]:
        """Copy every history segment on `group` to where its queue lives now, one copy per queue at a
        time, for up to `wait_s`: what is still on `group` then."""
        deadline = time.monotonic() + wait_s
        while True:
            left = self.history_on(group)
            for topic, queue in left:  # a no-op for a queue whose copy is under way
                self.start_copy(topic, queue, group, rate)
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.2)

    def safe_to_stop(self, group: str) -> tuple[bool, list[str]]:
        """Whether `group` holds nothing the cluster still needs: no queue written there, no history
        left to copy, no timer message waiting in its timer (those are delivered, not carried)."""
        reasons = []
        for name, layout in sorted(self.registry.topics().items()):
            for q in layout.queues:
                if q.current.group == group or q.sealing == group:
                    reasons.append(f"{name} {q.group}:{q.queue_id} is written on {group}")
        reasons += [f"{t} {q[0]}:{q[1]}: its history on {group} is not copied yet" for t, q in self.history_on(group)]
        from txmq.broker.protocol import native_pb2
        try:
            pending = int(self.call_leader(group, "ListScheduled", native_pb2.ScheduledRequest(limit=1), 10.0).pending)
        except (TxmqError, CoordinationUnavailable) as exc:
            reasons.append(f"its timer could not be asked for messages still scheduled: {exc}")
        else:
            if pending:
                reasons.append(f"{pending} timer message(s) scheduled there are not delivered yet")
        return not reasons, reasons

    # ---- plans ------------------------------------------------------------------------

    def retired(self) -> dict[str, dict]:
        return {k[len(RETIRED_ROOT):]: json.loads(v) for k, v, _ in self.registry.etcd.range_prefix(RETIRED_ROOT)}

    def plan_even(self, topic: str) -> list[tuple[tuple[str, int], str]]:
        """Moves that leave `topic`'s queues spread evenly (counts differ by at most one) over the
        live groups not retired: from the most loaded group to the least, fewest moves first."""
        layout = self._layout(topic)
        retired = self.retired()
        live = [g for g in self.view.live_groups() if g not in retired]
        if not live:
            raise BrokerUnavailable("no live group to spread the queues over")
        return _even_moves(layout.queues, live)

    def plan_drain(self, group: str) -> list[tuple[str, tuple[str, int], str]]:
        """(topic, queue, to) for every queue currently written on `group`, each to the live group
        holding the fewest of that topic's queues."""
        retired = self.retired()
        live = [g for g in self.view.live_groups() if g != group and g not in retired]
        if not live:
            raise BrokerUnavailable(f"no other live group to take {group}'s queues")
        out = []
        for name, layout in sorted(self.registry.topics().items()):
            load = {g: 0 for g in live}
            for q in layout.queues:
                if q.current.group in load:
                    load[q.current.group] += 1
            for q in layout.queues:
                if q.current.group == group or q.sealing == group:
                    to = min(live, key=lambda g: (load[g], g))
                    load[to] += 1
                    out.append((name, q.key, to))
        return out

    def retire(self, group: str) -> None:
        """After a drain: no new topic spreads over `group`, and transactions stop hashing to it."""
        self.registry.etcd.put(RETIRED_ROOT + group, json.dumps({"at": self.clock()}).encode())

    def run(self, *, topic: str = "", queue: str = "", to: str = "", even: bool = False, drain: str = "",
            dry_run: bool = False, wait_s: float = DEFAULT_WAIT_S, rate: int = DEFAULT_RATE,
            keep_history: bool = False, copy_wait_s: float = DEFAULT_COPY_WAIT_S) -> dict:
        """The MoveQueues call: one move, a topic evened out, or a group drained (then retired)."""
        if drain:
            plan = [(t, q, g) for t, q, g in self.plan_drain(drain)]
        elif even:
            if not topic:
                raise BadRequest("--even needs a topic")
            plan = [(topic, q, g) for q, g in self.plan_even(topic)]
        else:
            if not (topic and queue and to):
                raise BadRequest("a move names a topic, a queue (group:id) and a target group")
            plan = [(topic, parse_queue(queue), to)]
        if rate < 0:
            raise BadRequest(f"a copy's rate is bytes per second, 0 for unlimited, not {rate}")
        planned = [{"topic": t, "queue": f"{q[0]}:{q[1]}", "to": g} for t, q, g in plan]
        if dry_run:
            return {"moves": planned, "dry_run": True}
        done = [self.move(t, q, g, wait_s=wait_s, rate=rate, keep_history=keep_history) for t, q, g in plan]
        out: dict = {"moves": done}
        if drain:
            self.retire(drain)
            out["retired"] = drain
            if not keep_history:  # also what earlier moves that kept their history left there
                self.copy_history_off(drain, rate, copy_wait_s)
            out["safe_to_stop"], out["waiting_for"] = self.safe_to_stop(drain)
        elif not keep_history:
            deadline = time.monotonic() + copy_wait_s  # one wait for all the copies, not one each
            out["copies_left"] = [self._wait_copied(t, q, m["from"], deadline)
                                  for (t, q, _), m in zip(plan, done) if m.get("copy")].count(False)
        return out

    def _wait_copied(self, topic: str, queue: tuple[str, int], group: str, deadline: float) -> bool:
        """Wait until the queue's history on `group` is copied away, up to `deadline` (monotonic)."""
        while (topic, queue) in self.history_on(group):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
        return True

    # ---- resuming moves whose mover went away -------------------------------------------

    def resume_stuck(self, group: str) -> None:
        """On `group`'s leader, each second: finish moves to it that have been sealing for
        resume_after_s without their mover finishing them (in a thread: a seal may wait)."""
        now = time.monotonic()
        seen = {}
        for name, layout in self.view.topics().items():
            for q in layout.queues:
                if q.sealing == group:
                    key = (name, *q.key)
                    seen[key] = self._seen_sealing.get(key, now)
                    if now - seen[key] >= self.resume_after_s and key not in self._running:
                        seen[key] = now
                        threading.Thread(target=self._resume, args=(name, q.key, group), daemon=True,
                                         name=f"txmq-move-resume-{name}").start()
        self._seen_sealing = seen

    def _resume(self, topic: str, queue: tuple[str, int], to: str) -> None:
        """Finish the move on the terms its mover was given (kept with the mark; the defaults for a
        mark written without them)."""
        try:
            terms = self._layout(topic).queue(*queue).terms or MoveTerms(DEFAULT_RATE)
            self.move(topic, queue, to, rate=terms.rate, keep_history=terms.keep_history)
        except Exception as exc:
            log.warning("move: resuming %s %s:%d to %s: %s", topic, queue[0], queue[1], to, exc)

    def status(self) -> dict:
        with self._lock:
            out = {"counts": dict(self.counts), "running": [f"{t} {g}:{q}" for t, g, q in sorted(self._running)],
                   "recent": list(self.recent)[-10:]}
        if self.copier is not None:
            out["copies"] = self.copier.status()
        return out


def _copy_view(copy: Copy) -> dict:
    return {"from": f"{copy.source.group}:{copy.source.queue_id}", "to": f"{copy.target.group}:{copy.target.queue_id}",
            "from_offset": copy.source.base, "rate": copy.rate}


def _even_moves(queues: tuple[QueueRef, ...], live: list[str]) -> list[tuple[tuple[str, int], str]]:
    load: dict[str, list[QueueRef]] = {g: [] for g in live}
    homeless = []
    for q in queues:
        (load[q.current.group] if q.current.group in load else homeless).append(q)
    moves = []
    for q in homeless:  # queues on a group that is down or retired go first
        to = min(live, key=lambda g: (len(load[g]), g))
        load[to].append(q)
        moves.append((q.key, to))
    while True:
        most = max(live, key=lambda g: (len(load[g]), g))
        least = min(live, key=lambda g: (len(load[g]), g))
        if len(load[most]) - len(load[least]) <= 1:
            return moves
        q = load[most].pop()
        load[least].append(q)
        moves.append((q.key, least))
