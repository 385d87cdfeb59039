"""ClusterClient: a cluster of broker groups as one, from any broker's endpoint.

It asks a broker for the routes (which group holds which queue of a topic, and each group's
live replicas), keeps one NativeClient per group (which fails over between that group's
replicas by itself), and refreshes the routes every `route_ttl_s` and after a failure.
A producer's group is chosen round-robin over the topic's queues, skipping groups that
latency fault tolerance keeps out (client/fault_tolerance.py); reads name their group.
Outside a cluster the broker answers one group, "", and this is a plain NativeClient.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import threading
import time
import zlib
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from txmq.broker import errors
from txmq.broker.client.cluster_cut import cluster_cut
from txmq.broker.client.cross_group import CrossGroupTransaction
from txmq.broker.client.fault_tolerance import LatencyFaultTolerance
from txmq.broker.client.native_client import NativeClient, parse_endpoints
from txmq.broker.client import segments as seg
from txmq.broker.client.types import (CheckRequest, ConsumerGroupInfo, EndSummary, GroupMember, Message, PrepareSummary, PullResult, QueueRef, Routes,
                                     SendSummary, TopicInfo, TransactionInfo)

log = logging.getLogger(__name__)

# How long a group's client retries replicas it cannot reach before the call fails and the
# group is avoided: above a group's failover time (docs/benchmarks.md, "Broker groups").
GROUP_UNREACHABLE_S = 5.0
# The same for a drained (retired) group: it takes no new transaction and no queue, so a lookup
# that asks it (what it decided before its drain) must not wait long once it is stopped for good.
RETIRED_GROUP_UNREACHABLE_S = 0.5

# how often a snapshot refused by a group a queue moved away from is asked again with fresh routes
MOVED_RETRIES = 8
# how often a send refused by a queue a move sealed is tried again (the routes refreshed each time)
SEALED_RETRIES = 50

# {topic: {(group, queue id): offset}}: offsets of a cluster's queues
ClusterOffsets = dict[str, dict[tuple[str, int], int]]


class ClusterClient:
    def __init__(self, bootstrap: str, *, route_ttl_s: float = 2.0, fault_tolerance: bool = True,
                 **client_kwargs: Any) -> None:
        self.bootstrap = parse_endpoints(bootstrap)
        self.route_ttl_s = route_ttl_s
        # a group's client gives up on its replicas soon enough for a send to go to another group;
        # the bootstrap client (a lone broker's only one) waits as a NativeClient does
        self.client_kwargs = {"retry_unavailable_s": GROUP_UNREACHABLE_S, "fail_fast": True, **client_kwargs}
        self.faults = LatencyFaultTolerance(enabled=fault_tolerance)
        self._lock = threading.RLock()
        self._clients: dict[str, NativeClient] = {}
        self._retired: list[NativeClient] = []
        self._endpoints: dict[str, tuple[tuple[str, ...], bool]] = {}  # group -> (replicas, retired) of its client
        self._routes: Routes | None = None
        self._routes_at = 0.0
        self._turn: dict[str, itertools.count] = {}
        self._tx_groups: dict[str, str] = {}  # transaction id -> the group found holding it
        self._cross: dict[str, CrossGroupTransaction] = {}  # prepared here across groups, not yet ended
        self._boot = NativeClient(";".join(self.bootstrap), **client_kwargs)

    @property
    def client_id(self) -> str:
        return self._boot.client_id

    # ---- routes --------------------------------------------------------------------

    def routes(self, topics: Sequence[str] = (), *, refresh: bool = False) -> Routes:
        """The routes of `topics` (fetched when unknown, stale or `refresh`)."""
        with self._lock:
            known = self._routes
            fresh = known is not None and time.monotonic() - self._routes_at < self.route_ttl_s
            if not refresh and fresh and all(t in known.topics for t in topics):
                return known
            wanted = sorted(set(topics) | (set(known.topics) if known else set()))
            routes = self._ask(wanted)
            self._apply(routes)
            return routes

    def _ask(self, topics: Sequence[str]) -> Routes:
        """Ask the bootstrap broker, then any known replica: one live broker is enough. Bootstrap
        brokers that all belong to drained groups are asked last (the list only seeds the routes,
        as Kafka's bootstrap servers do): a drained group is stopped for good sooner or later."""
        drained = {e for replicas, retired in self._endpoints.values() if retired for e in replicas}
        if drained and set(self.bootstrap) <= drained:
            for client in [self._clients[g] for g, (_, retired) in sorted(self._endpoints.items())
                           if not retired and g in self._clients]:
                try:
                    return client.routes(topics)
                except errors.BrokerUnavailable:
                    continue
        try:
            return self._boot.routes(topics)
        except errors.BrokerUnavailable as first:
            for client in list(self._clients.values()):
                try:
                    return client.routes(topics)
                except errors.BrokerUnavailable:
                    continue
            raise first

    def _apply(self, routes: Routes) -> None:
        old = self._routes
        self._routes, self._routes_at = routes, time.monotonic()
        if not routes.cluster:  # a lone broker: its one group is the bootstrap connection itself
            self._clients[""] = self._boot
            return
        for group, endpoints in routes.groups.items():
            if old is not None and old.leaders.get(group) != routes.leaders.get(group):
                self.faults.forgive(group)  # a new leader: the old one's penalty is not its own
            retired = group in routes.retired
            known, was_retired = self._endpoints.get(group, ((), False))
            replicas = tuple(endpoints) or known  # a drained group seen first once stopped keeps its last replicas
            if replicas and (set(replicas) != set(known) or retired != was_retired):
                # a new client when the group's replicas changed or it was drained; the old one finishes its calls
                self._endpoints[group] = (replicas, retired)
                old_client = self._clients.get(group)
                if old_client is not None:
                    self._retired.append(old_client)  # closed with this client: a call may still use it
                kwargs = {**self.client_kwargs, "retry_unavailable_s": RETIRED_GROUP_UNREACHABLE_S} if retired \
                    else self.client_kwargs
                self._clients[group] = NativeClient(";".join(replicas), **kwargs)

    def group(self, name: str) -> NativeClient:
        """The client of group `name` (the bootstrap broker's for an unnamed single group)."""
        with self._lock:
            client = self._clients.get(name)
            if client is None:
                self.routes(refresh=True)
                client = self._clients.get(name)
            if client is None:
                raise errors.BrokerUnavailable(f"group {name!r} is not in the cluster's routes (no live replica)")
            return client

    def queues(self, topic: str) -> tuple[QueueRef, ...]:
        return self.routes([topic]).queues(topic)

    # ---- admin --------------------------------------------------------------------

    def create_topic(self, name: str, queue_count: int = 4, message_type: str | None = None) -> tuple[QueueRef, ...]:
        """Create a topic with `queue_count` queues spread over the groups; its queues."""
        self._boot.create_topic(name, queue_count, message_type)
        return self.routes([name], refresh=True).queues(name)

    def update_consumer_group(self, name: str, *, fifo: bool | None = None, retry_max_times: int | None = None,
                              must_exist: bool = False) -> ConsumerGroupInfo:
        """Set a consumer group's settings on every group's leader: each pops its own queues for the
        consumer group, as each RocketMQ broker holds its own subscription groups."""
        results = [self.group(g).update_consumer_group(name, fifo=fifo, retry_max_times=retry_max_times,
                                                       must_exist=must_exist) for g in self._all_groups()]
        return results[0]

    def delete_consumer_group(self, name: str) -> None:
        for g in self._all_groups():
            self.group(g).delete_consumer_group(name)

    def _all_groups(self) -> list[str]:
        routes = self.routes(refresh=True)
        return sorted(routes.groups) if routes.cluster else [""]

    # ---- sends --------------------------------------------------------------------

    def _choose(self, topic: str) -> str:
        """A group for the next send to `topic`: round-robin over its queues, so a group takes
        sends in proportion to the queues it holds; groups electing a leader are skipped."""
        routes = self.routes([topic])
        # a moved queue takes writes on its current group; one being moved takes none meanwhile
        live = [q.current.group for q in routes.queues(topic)
                if not q.sealing and (routes.leaders.get(q.current.group) or not routes.cluster)]
        if not live:
            raise errors.BrokerUnavailable(f"no group holding queues of {topic!r} has a leader now")
        turn = self._turn.setdefault(topic, itertools.count())
        return self.faults.pick(live, next(turn))

    def _send_with(self, topic: str, send) -> tuple[str, Any]:
        """Run `send(client)` on a chosen group; a group that could not be reached (nothing
        was sent) is avoided and the next is tried, so a down group does not stop a topic."""
        tried: set[str] = set()
        sealed_retries = 0
        while True:
            group = self._choose(topic)
            if group in tried:
                group = next((g for g in dict.fromkeys(q.current.group for q in self.queues(topic))
                              if g not in tried), group)
            tried.add(group)
            started = time.monotonic()
            try:
                summary = send(self.group(group))
            except errors.QueueSealed:
                # the group's queues of the topic moved away meanwhile: nothing was written
                sealed_retries += 1
                if sealed_retries > SEALED_RETRIES:
                    raise
                tried.discard(group)
                time.sleep(min(0.05 * sealed_retries, 0.5))
                self.routes([topic], refresh=True)
                continue
            except errors.BrokerUnreachable:
                self.faults.update(group, 0, failed=True)
                self.routes([topic], refresh=True)
                if len(tried) >= len({q.current.group for q in self.queues(topic)}):
                    raise
                log.warning("group %s unreachable; sending %s to another group", group, topic)
                continue
            except errors.BrokerUnavailable:
                self.faults.update(group, 0, failed=True)
                raise
            self.faults.update(group, (time.monotonic() - started) * 1000)
            return group, summary

    def send(self, messages: Sequence[Message], *, topic: str) -> SendSummary:
        group, summary = self._send_with(topic, lambda c: c.send(messages, topic=topic))
        return dataclasses.replace(summary, group=group)

    def send_arrow(self, batch: pa.RecordBatch | pa.Table | Iterable[Any], *, topic: str) -> SendSummary:
        group, summary = self._send_with(topic, lambda c: c.send_arrow(batch, topic=topic))
        return dataclasses.replace(summary, group=group)

    # ---- reads --------------------------------------------------------------------

    def _per_group(self, topics: Sequence[str], call, *, last_only: bool = False) -> ClusterOffsets:
        """`call(client, topics, current)` on every group holding queues of `topics`, in parallel (`current`:
        {topic: the group's physical queues the routes say take writes there}): the raw answers,
        {topic: {(group, physical queue id): value}}. A moved queue's segments are asked
        on their groups; with `last_only`, only its last one (where its end is), and a group holding
        only earlier segments may be down (their offsets are then left out)."""
        routes = self.routes(topics)
        needed: dict[str, set[str]] = {}  # group -> topics it must answer for
        optional: dict[str, set[str]] = {}  # group -> topics it may answer for
        current: dict[str, dict[str, list[int]]] = {}  # group -> {topic: physical queues taking writes there}
        for t in topics:
            for q in routes.queues(t):
                needed.setdefault(q.current.group, set()).add(t)
                current.setdefault(q.current.group, {}).setdefault(t, []).append(q.current.queue_id)
                if not last_only:
                    for s, length in list(seg.spans(q.segments))[:-1]:
                        if length:  # a segment whose history was copied away holds nothing: not asked
                            optional.setdefault(s.group, set()).add(t)
        groups = sorted(set(needed) | set(optional))
        out: ClusterOffsets = {t: {} for t in topics}

        def ask(g: str):
            mine = sorted(needed.get(g, set()) | optional.get(g, set()))
            try:
                return g, call(self.group(g), mine, current.get(g, {}))
            except errors.BrokerUnavailable:
                if g in needed:
                    raise
                return g, {}  # only history lies there, and the group is gone: read from what remains

        with ThreadPoolExecutor(max(1, len(groups))) as pool:
            answers = list(pool.map(ask, groups))
        for group, offsets in answers:
            for topic, queues in offsets.items():
                for queue_id, offset in queues.items():
                    out[topic][(group, queue_id)] = offset
        return out

    def _logical(self, topics: Sequence[str], physical: ClusterOffsets, how: str) -> ClusterOffsets:
        """Raw per-group answers as offsets of the topics' (logical) queues. `how`: "end" (the last
        segment's), "min" (the first segment that answered), "committed" (the last segment holding
        one), "time" (the first segment whose answer lies before its end)."""
        routes = self.routes(topics)
        out: ClusterOffsets = {t: {} for t in topics}
        for t in topics:
            got = physical.get(t, {})
            for q in routes.queues(t):
                if not q.moves:
                    if q.key in got:
                        out[t][q.key] = got[q.key]
                    continue
                pieces = list(seg.spans(q.segments))
                keys = [(s.group, s.queue_id) for s, _ in pieces]
                if how == "end":
                    last = pieces[-1][0]
                    out[t][q.key] = last.base + got.get(keys[-1], 0)  # its queue not created yet: empty
                elif how == "committed":
                    found = [got[k] for k in keys if k in got]
                    if found:
                        out[t][q.key] = found[-1]  # committed offsets are logical already
                else:
                    for (s, length), k in zip(pieces, keys):
                        if k not in got:
                            continue
                        value = s.base + got[k]
                        if how == "min" or length is None or value < s.base + length:
                            out[t][q.key] = value
                            break
        return out

    def snapshot_offsets(self, topics: Sequence[str]) -> ClusterOffsets:
        """Each group's consistent cut of `topics`: a single-group transaction is whole or absent
        in them; one across groups may show on one group before another applies its decision
        (consistent_cut leaves those out)."""
        for attempt in range(MOVED_RETRIES):
            try:
                physical = self._per_group(topics, lambda c, ts, cur: c.snapshot_offsets(ts, current=cur),
                                           last_only=True)
                return self._logical(topics, physical, "end")
            except errors.QueueMoved:
                # a queue's end grows on another group now: the old one said so, so learn it at once
                # (the broker answering the routes may read the registry a moment after the old group)
                time.sleep(0.02 * attempt)
                self.routes(topics, refresh=True)
        # the routes still lag the old group's word: its answer (the history's end) until the next refresh
        return self._logical(topics, self._per_group(topics, lambda c, ts, _: c.snapshot_offsets(ts),
                                                     last_only=True), "end")

    def consistent_cut(self, topics: Sequence[str], start: Mapping[str, Mapping[tuple[str, int], int]],
                       snapshot: ClusterOffsets | None = None) -> ClusterOffsets:
        """A cluster-wide consistent cut of `topics` between `start` (a consistent cut, e.g. the
        previous batch's end) and `snapshot` (the groups' snapshots, taken now when None): no
        transaction across groups lies partly below it (client/cluster_cut.py). A moved queue's
        segments are cut as the physical queues they are, then read back as one offset."""
        snapshot = self.snapshot_offsets(topics) if snapshot is None else snapshot
        routes = self.routes(topics)
        moved = {t: {q.key: q for q in routes.queues(t) if q.moves} for t in topics}
        if not any(moved.values()):
            return cluster_cut(_GroupClients(self), {t: dict(q) for t, q in start.items()}, snapshot)
        p_start: dict[str, dict[tuple[str, int], int]] = {}
        p_snap: ClusterOffsets = {}
        for t in topics:
            p_start[t], p_snap[t] = {}, {}
            for key, end in snapshot.get(t, {}).items():
                begin = start.get(t, {}).get(key, 0)
                q = moved[t].get(key)
                if q is None:
                    p_start[t][key], p_snap[t][key] = begin, end
                    continue
                lo, hi = seg.to_physical(q.segments, begin), seg.to_physical(q.segments, end)
                for k in lo:
                    if lo[k] < hi[k]:  # only segments with something to read take part
                        p_start[t][k], p_snap[t][k] = lo[k], hi[k]
        cut = cluster_cut(_GroupClients(self), p_start, p_snap)
        out: ClusterOffsets = {}
        for t in topics:
            out[t] = {}
            for key, end in snapshot.get(t, {}).items():
                q = moved[t].get(key)
                if q is None:
                    out[t][key] = cut.get(t, {}).get(key, end)
                    continue
                begin = seg.to_physical(q.segments, start.get(t, {}).get(key, 0))
                positions = {k: cut.get(t, {}).get(k, v) for k, v in begin.items()}
                out[t][key] = seg.to_logical(q.segments, positions)
        return out

    def min_offsets(self, topics: Sequence[str]) -> ClusterOffsets:
        return self._logical(topics, self._per_group(topics, lambda c, ts, _: c.min_offsets(ts)), "min")

    def offsets_for_timestamp(self, topics: Sequence[str], timestamp_ms: int) -> ClusterOffsets:
        return self._logical(topics, self._per_group(topics, lambda c, ts, _: c.offsets_for_timestamp(ts, timestamp_ms)),
                             "time")

    def committed_offsets(self, consumer_group: str, topics: Sequence[str]) -> ClusterOffsets:
        """The consumer group's committed offsets (queues it never committed are absent)."""
        return self._logical(topics, self._per_group(topics, lambda c, ts, _: c.committed_offsets(consumer_group, ts)),
                             "committed")

    def wait_for_offsets(self, topics: Sequence[str], known: Mapping[str, Mapping[tuple[str, int], int]],
                         timeout_ms: int) -> ClusterOffsets:
        """Long poll every group at once: the cluster's cut as soon as one group has moved past
        `known`, else at the timeout."""
        routes = self.routes(topics)
        # group -> {topic: {physical queue id: known physical end}}: where each queue's end grows
        parts: dict[str, dict[str, dict[int, int]]] = {}
        for t in topics:
            for q in routes.queues(t):
                cur = q.current
                part = parts.setdefault(cur.group, {}).setdefault(t, {})
                if q.key in known.get(t, {}):
                    part[cur.queue_id] = max(0, known[t][q.key] - cur.base)
        pool = ThreadPoolExecutor(max(1, len(parts)))

        def wait(group: str) -> None:
            current = {t: list(ids) for t, ids in parts[group].items()}
            try:
                self.group(group).wait_for_offsets(sorted(parts[group]), parts[group], timeout_ms, current=current)
            except errors.QueueMoved:
                self.routes(topics, refresh=True)  # ends the wait: the cut below reads the new segment

        try:
            waits = [pool.submit(wait, g) for g in sorted(parts)]
            futures_wait(waits, timeout=timeout_ms / 1000.0 + 1.0, return_when=FIRST_COMPLETED)
        finally:
            pool.shutdown(wait=False)  # the other groups' long polls end at their timeout
        return self.snapshot_offsets(topics)

    def consumer_heartbeat(self, group: str, member_id: str, ttl_ms: int, *, leave: bool = False,
                           client: str = "", queues: Iterable[tuple[str, str, int]] = ()) -> list[str]:
        queues = tuple(queues)
        return self._any_broker(lambda c: c.consumer_heartbeat(group, member_id, ttl_ms, leave=leave,
                                                               client=client, queues=queues))

    def list_group_members(self, group: str) -> list[GroupMember]:
        """Consumer group `group`'s live members: the cluster keeps them in etcd, so any broker answers."""
        return self._any_broker(lambda c: c.list_group_members(group))

    def _any_broker(self, call):
        try:
            return call(self._boot)
        except errors.BrokerUnavailable:
            for client in list(self._clients.values()):
                try:
                    return call(client)
                except errors.BrokerUnavailable:
                    continue
            raise

    def _queue(self, topic: str, queue: tuple[str, int], *, refresh: bool = False):
        """The routed queue (group, queue id) of `topic`; None for one the routes do not list."""
        routes = self.routes([topic], refresh=refresh)
        return next((q for q in routes.topics.get(topic, ()) if q.key == tuple(queue)), None)

    def read_queue(self, topic: str, queue: tuple[str, int], start: int, end: int, **kwargs: Any) -> Iterator:
        """Queue (group, queue id) of `topic`, range [start, end), as the group's `read_queue` streams
        it; a moved queue's range is read from each segment's group in turn, in its own offsets. A
        range past what the cached routes place (a move since they were read), or on a group that
        does not answer (a drained group stopped since), is read again with fresh routes from where
        it stopped."""
        pos, refreshed = start, False
        while True:
            q = self._queue(topic, queue, refresh=refreshed)
            try:
                if q is None or not q.moves:
                    for result in self.group(queue[0]).read_queue(topic, queue[1], pos, end, **kwargs):
                        pos = result.next_offset
                        yield result
                    return
                for segment, lo, hi in seg.ranges(q.segments, pos, end):
                    for result in self.group(segment.group).read_queue(topic, segment.queue_id, lo, hi, **kwargs):
                        result = seg.shifted(result, segment, queue[1])
                        pos = result.next_offset
                        yield result
                return
            except errors.IllegalOffset:
                if refreshed:
                    raise
                refreshed = True  # the end lies on a group the cached routes did not know of yet
            except errors.BrokerUnavailable:
                if refreshed:
                    raise
                refreshed = True  # its history may have been copied off a group stopped since the routes were read

    def pull_arrow(self, topic: str, queue: tuple[str, int], start: int, end: int, **kwargs: Any) -> PullResult:
        for refresh in (False, True):
            q = self._queue(topic, queue, refresh=refresh)
            try:
                if q is None or not q.moves:
                    return self.group(queue[0]).pull_arrow(topic, queue[1], start, end, **kwargs)
                pieces = seg.ranges(q.segments, start, end)
                if not pieces:
                    raise errors.BadRequest(f"empty range [{start}, {end}) of {topic} {queue[0]}:{queue[1]}")
                segment, lo, hi = pieces[0]
                return seg.shifted(self.group(segment.group).pull_arrow(topic, segment.queue_id, lo, hi, **kwargs),
                                   segment, queue[1])
            except (errors.IllegalOffset, errors.BrokerUnavailable):
                if refresh:  # fresh routes: a move since, or a history copied off a group stopped since
                    raise
        raise AssertionError("unreachable")

    def list_topics(self, *, include_system: bool = False) -> list[TopicInfo]:
        """Every topic: a cluster's registered ones (queues per group are in `routes`), or a lone broker's."""
        routes = self.routes(refresh=True)
        if not routes.cluster:
            return self._boot.list_topics(include_system=include_system)
        return [TopicInfo(name, len(queues), 6, {}, routes.message_types.get(name) or "MIXED")
                for name, queues in sorted(routes.topics.items())]

    def commit_offsets(self, consumer_group: str, offsets: Mapping[str, Mapping[tuple[str, int], int]]) -> None:
        by_group: dict[str, dict[str, dict[int, int]]] = {}
        for topic, queues in offsets.items():
            for (group, queue_id), offset in queues.items():
                # a moved queue's offsets (logical) are kept by the group it is written on now
                q = self._queue(topic, (group, queue_id))
                if q is not None and q.moves:
                    group, queue_id = q.current.group, q.current.queue_id
                by_group.setdefault(group, {}).setdefault(topic, {})[queue_id] = offset
        for group, part in by_group.items():
            self.group(group).commit_offsets(consumer_group, part)

    # ---- transactions ----------------------------------------------------------------
    # A transaction lives in one group: the one its id hashes to among every group the cluster
    # ever had (groups that elected once stay listed, so the choice holds while one is down).
    # Calls about an id look there first and, if that group does not know it, in the others:
    # a group added since the transaction began moves the hash, not the transaction.

    def transaction_group(self, transaction_id: str) -> str:
        with self._lock:
            pinned = self._tx_groups.get(transaction_id)
        if pinned is not None:
            return pinned
        routes = self.routes()
        groups = sorted(g for g in routes.groups if g not in routes.retired)  # a drained group takes none
        if not groups:
            raise errors.BrokerUnavailable("the cluster's routes list no group")
        return groups[zlib.crc32(transaction_id.encode()) % len(groups)]

    def _pin(self, transaction_id: str, group: str) -> None:
        with self._lock:
            if len(self._tx_groups) > 10_000:
                self._tx_groups.clear()
            self._tx_groups[transaction_id] = group

    def _on_transaction(self, transaction_id: str, call, placed: Sequence[str] = ()):
        """`call(client)` on the transaction's group (the one group of `placed` when the caller put it
        there); on UnknownTransaction, on each other group."""
        first = placed[0] if len(placed) == 1 and placed[0] else self.transaction_group(transaction_id)
        try:
            return call(self.group(first))
        except errors.UnknownTransaction:
            routes = self.routes()
            for group in self._lookup_order(routes):
                if group == first:
                    continue
                try:
                    result = call(self.group(group))
                except errors.UnknownTransaction:
                    continue
                except errors.BrokerUnavailable:
                    if group in routes.retired:
                        with contextlib.suppress(errors.BrokerUnavailable):
                            self.routes(refresh=True)  # a drained group that stopped: the next lookup skips it
                    continue
                self._pin(transaction_id, group)
                return result
            raise

    @staticmethod
    def _lookup_order(routes: Routes) -> list[str]:
        """Where a transaction its own group does not know may be: every group transactions hash
        over (one added since it began moved the hash, not the transaction), then each drained group
        that still has a leader (what it decided before its drain is readable only while it runs).
        A drained group with no leader is not asked (it was stopped for good), and one is asked
        with a short bound (RETIRED_GROUP_UNREACHABLE_S), as its leader may have stopped since the
        routes were read: waiting GROUP_UNREACHABLE_S per lookup would stall every unknown id's caller."""
        hashed = sorted(g for g in routes.groups if g not in routes.retired)
        return hashed + sorted(g for g in routes.retired if routes.leaders.get(g) and g in routes.groups)

    def prepare_stream(self, transaction_id: str, batches: Iterable[pa.RecordBatch | pa.Table], *,
                       topic: str | None = None, producer_group: str, sender: str,
                       return_message_ids: bool = False, participants: Sequence[str] = ()) -> PrepareSummary:
        """Halves from Arrow batches. With several `participants` (a Spark batch's transaction
        across groups, `topic` given), this sender's halves go to one of them that holds queues of
        the topic, chosen by the sender's name, and every half names the participants."""
        if len(participants) > 1:
            if not transaction_id or not topic:
                raise errors.BadRequest("a transaction across groups needs its id and one topic")
            live = sorted({q.current.group for q in self.queues(topic) if not q.sealing} & set(participants))
            if not live:
                raise errors.BrokerUnavailable(f"no participant group of transaction {transaction_id} "
                                               f"({', '.join(participants)}) holds a live queue of {topic!r}")
            group = live[zlib.crc32(sender.encode()) % len(live)]
            return self.group(group).prepare_stream(transaction_id, batches, topic=topic,
                                                    producer_group=producer_group, sender=sender,
                                                    return_message_ids=return_message_ids,
                                                    participants=sorted(set(participants)))
        if len(participants) == 1 and participants[0]:
            group = participants[0]  # the one group taking the topic's writes (a sink's batch after a drain)
        else:
            group = self.transaction_group(transaction_id) if transaction_id else self._choose(topic or "")
        summary = self.group(group).prepare_stream(transaction_id, batches, topic=topic, producer_group=producer_group,
                                                   sender=sender, return_message_ids=return_message_ids)
        self._pin(summary.transaction_id, group)
        return summary

    def across(self, transaction_id: str, participants: Sequence[str], *, producer_group: str = "",
               end_retry_s: float = 5.0) -> CrossGroupTransaction:
        """The transaction `transaction_id` over `participants` (its halves name them), to decide
        and settle; a participant that is down is told later by its own check-back."""
        clients = {g: _client_or_unreachable(self, g) for g in participants}
        return CrossGroupTransaction(clients, producer_group=producer_group, transaction_id=transaction_id,
                                     end_retry_s=end_retry_s)

    def prepare(self, transaction_id: str, messages: Sequence[Message], *, topic: str | None = None,
                producer_group: str = "", sender: str = "", return_message_ids: bool = True) -> PrepareSummary:
        """Halves in the protobuf form: a new transaction ("") goes to a group chosen as a send's is."""
        def prepare(client: NativeClient) -> PrepareSummary:
            return client.prepare(transaction_id, messages, topic=topic, producer_group=producer_group,
                                  sender=sender, return_message_ids=return_message_ids)

        if transaction_id:
            group = self.transaction_group(transaction_id)
            summary = prepare(self.group(group))
            self._pin(summary.transaction_id, group)
            return summary
        topics = list(dict.fromkeys((m.topic or topic or "") for m in messages))
        if len(topics) > 1:
            placed = {t: self._choose(t) for t in topics}
            if len(set(placed.values())) > 1:
                return self._prepare_across(messages, topic, placed, producer_group, sender)
        # a new transaction: wherever a send would go, avoiding groups that are down
        group, summary = self._send_with(topics[0] if topics else "", prepare)
        self._pin(summary.transaction_id, group)
        return summary

    def _prepare_across(self, messages: Sequence[Message], topic: str | None, placed: dict[str, str],
                        producer_group: str, sender: str) -> PrepareSummary:
        """One transaction over the groups its topics were placed on: a coordinator group records
        its decision before any group applies it (client/cross_group.py)."""
        by_group: dict[str, list[int]] = {}
        for i, m in enumerate(messages):
            by_group.setdefault(placed[m.topic or topic or ""], []).append(i)
        tx = CrossGroupTransaction({g: self.group(g) for g in by_group}, producer_group=producer_group, sender=sender)
        summaries = tx.prepare_many({g: [messages[i] for i in idx] for g, idx in by_group.items()})
        ids: list[str] = [""] * len(messages)
        for group, idx in by_group.items():
            for i, message_id in zip(idx, summaries[group].message_ids):
                ids[i] = message_id
        with self._lock:
            self._cross[tx.transaction_id] = tx
        return PrepareSummary(tx.transaction_id, sum(s.count for s in summaries.values()), ids)

    def list_transactions(self, *, state: str = "PENDING", topic: str | None = None,
                          limit: int = 1000) -> list[TransactionInfo]:
        """The transactions of every group with a leader (each group's first `limit`)."""
        routes = self.routes(refresh=True)
        out: list[TransactionInfo] = []
        for group in sorted(g for g in routes.groups if routes.leaders.get(g) or not routes.cluster):
            out += self.group(group).list_transactions(state=state, topic=topic, limit=limit)
        return out

    def end_transaction(self, transaction_id: str, resolution: str, *, participants: Sequence[str] = (),
                        **kwargs: Any) -> EndSummary:
        """End a transaction. With several `participants`, it spans those groups: the decision
        (with include_senders) is recorded at its coordinator, then each participant applies it."""
        if len(participants) > 1:
            cross = self.across(transaction_id, participants, producer_group=kwargs.get("producer_group") or "")
        else:
            with self._lock:
                cross = self._cross.pop(transaction_id, None)
        if cross is not None:
            commit = str(resolution).upper() == "COMMIT"
            result = cross.commit(kwargs.get("include_senders")) if commit else cross.rollback()
            return EndSummary(state="COMMITTED" if result.decision == "COMMIT" else "ROLLED_BACK",
                              newly_ended=bool(result.ended),
                              committed_count=sum(e.committed_count for e in result.ended.values()))
        return self._on_transaction(transaction_id, lambda c: c.end_transaction(transaction_id, resolution, **kwargs),
                                    participants)

    def get_transaction(self, transaction_id: str, *, participants: Sequence[str] = ()) -> TransactionInfo:
        """A transaction's state. One across `participants` is as its coordinator decided, else
        PENDING where any participant holds halves of it (UnknownTransaction: nowhere)."""
        if len(participants) <= 1:
            return self._on_transaction(transaction_id, lambda c: c.get_transaction(transaction_id), participants)
        decision = self.across(transaction_id, participants).get_decision()
        if decision is not None:
            return TransactionInfo(transaction_id=transaction_id,
                                   state="COMMITTED" if decision == "COMMIT" else "ROLLED_BACK", topics=(),
                                   half_count=0, age_ms=0, check_times=0, producer_group="", senders=(),
                                   created_ms=0)
        for group in sorted(set(participants)):
            try:
                return self.group(group).get_transaction(transaction_id)
            except (errors.UnknownTransaction, errors.BrokerUnavailable):
                continue
        raise errors.UnknownTransaction(f"transaction {transaction_id} is unknown on groups {', '.join(participants)}")

    def resume_transaction(self, transaction_id: str) -> None:
        self._on_transaction(transaction_id, lambda c: c.resume_transaction(transaction_id))

    def checkback_session(self, producer_group: str, topics: Sequence[str],
                          handler: Callable[[CheckRequest], str]) -> "_Sessions":
        """A check-back session on every group: any of them may hold the producer's halves."""
        routes = self.routes(refresh=True)
        groups = sorted(g for g in routes.groups if routes.leaders.get(g) or not routes.cluster)
        return _Sessions([self.group(g).checkback_session(producer_group, topics, handler) for g in groups])

    # ---- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()) + self._retired, {}
        for client in {id(c): c for c in clients + [self._boot]}.values():
            client.close()

    def __enter__(self) -> "ClusterClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Unreachable:
    """Stands in for a group with no live replica: every call fails as retryable, so a cross-group
    transaction records its decision and leaves this participant to its check-back."""

    def __init__(self, group: str) -> None:
        self.name = group

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise errors.BrokerUnavailable(f"group {self.name!r} has no live replica")

    prepare = end_transaction = _call = _fail


def _client_or_unreachable(cluster: ClusterClient, group: str) -> Any:
    try:
        return cluster.group(group)
    except errors.BrokerUnavailable:
        return _Unreachable(group)


class _GroupClients(Mapping[str, NativeClient]):
    """Every routed group's client, looked up when the cut first needs it."""

    def __init__(self, cluster: ClusterClient) -> None:
        self.cluster = cluster

    def __getitem__(self, name: str) -> NativeClient:
        try:
            return self.cluster.group(name)
        except errors.BrokerUnavailable as exc:
            raise KeyError(name) from exc

    def __contains__(self, name: object) -> bool:
        try:
            self[name]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self.cluster.routes().groups)

    def __len__(self) -> int:
        return len(self.cluster.routes().groups)


class _Sessions:
    """Check-back sessions on several groups, closed together."""

    def __init__(self, sessions: list) -> None:
        self.sessions = sessions

    def wait_registered(self, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(session.wait_registered(max(0.0, deadline - time.monotonic())) for session in self.sessions)

    def close(self) -> None:
        for session in self.sessions:
            session.close()
