"""CommitLog replication inside a broker group: the leader's side and the follower's.

Followers pull, as Kafka's do: a Fetch asks for the leader's bytes from the follower's
log end, and that offset tells the leader how much the follower holds. The leader's
`confirmed` offset is the least end over itself and its in-sync followers (RocketMQ 5's
confirm offset, Kafka's high watermark): readers see only records before it
(Dispatcher.publish_confirmed), and a write under `sync` replication is acknowledged
once it is confirmed with at least `min_insync` followers in the set. Under `sync` it does not
advance while fewer than `min_insync` followers are in the set (KIP-966). A follower appends
the bytes as they are and dispatches them with recovery's code (MessageStore.append_replicated),
so its queues, index and, once promoted, transaction table are the leader's.
"""

from __future__ import annotations

import logging
import queue
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Callable

import grpc

from txmq.broker import versions
from txmq.broker.errors import (DataDeleted, IllegalOffset, NotEnoughReplicas, NotLeader, ReplicationTimeout, TxmqError,
                                VersionUnsupported)
from txmq.broker.protocol import native_status
from txmq.broker.protocol import replication_pb2 as pb
from txmq.broker.protocol.method_table import STREAM_STREAM, UNARY_UNARY, build_method_table
from txmq.broker.store.durable import write_bytes_atomically
from txmq.broker.store.message_store import MessageStore
from txmq.broker.store.replay_columns import load_compiled
from txmq.broker.timer.service import TIMER_DIR
from txmq.broker.transaction.snapshot import drop_snapshots

from .coordination import LeaderRecord
from .epochs import Epoch, LeaderEpochs

log = logging.getLogger(__name__)

SERVICE_NAME = "txmq.replication.v1.Replication"
METHODS = {m.name: m for m in build_method_table(pb, "Replication", SERVICE_NAME)}
FETCH_MAX_BYTES = 8 << 20
# Metadata kept beside the CommitLog, copied whole to followers when it changes.
METADATA_FILES = ("topics.json", "offsets.json", "topic_types.json", "consumer_groups.json")
FETCH_WAIT_MS = 500
FETCH_STALL_S = 10.0  # a fetch unanswered this long is given up (the leader answers within FETCH_WAIT_MS)


@dataclass
class FollowerProgress:
    offset: int = 0  # what it holds (the offset it last fetched from)
    last_fetch: float = 0.0
    caught_up_at: float = 0.0  # last time it had everything the leader had sent it
    sent_through: int = 0  # the leader's end when it last answered this follower
    replica_id: str = ""  # the id of the data directory it fetches into (as it last said)


class ReplicationLeader:
    """The leader of a group for one epoch: serves fetches, keeps the confirmed offset, and
    holds each write's acknowledgement until it may be given (the store's ReplicationHook)."""

    def __init__(self, store: MessageStore, epochs: LeaderEpochs, record: LeaderRecord, *, group: str,
                 sync: bool, min_insync: int, lag_max_s: float, timeout_s: float, in_sync: dict[str, str],
                 lease_alive: Callable[[], bool]) -> None:
        """`in_sync`: the in-sync followers etcd names, each with the id of the data directory
        it was vouched for with."""
        self.store = store
        self.epochs = epochs
        self.record = record
        self.group = group
        self.sync = sync
        self.min_insync = min_insync
        self.lag_max_s = lag_max_s
        self.timeout_s = timeout_s
        self._lease_alive = lease_alive
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # the confirmed offset and fencing: writes waiting to be acknowledged
        self._bytes = threading.Condition(lock)  # new bytes: fetches waiting for them
        self._publish_lock = threading.Lock()
        now = time.monotonic()
        self.followers: dict[str, FollowerProgress] = {f: FollowerProgress(0, now, now, replica_id=i)
                                                        for f, i in in_sync.items()}
        self.in_sync: frozenset[str] = frozenset(in_sync)  # followers only; the leader is always in
        self.ids: dict[str, str] = dict(in_sync)  # each in-sync follower's data directory, as etcd vouches
        self.start = store.commitlog.settled_end  # this epoch's first offset
        self.confirmed = 0
        self._published = -1
        self.fenced = False
        self.fenced_reason = ""
        self.acks_refused = 0
        # the end of the last write acknowledged under sync (a write boundary its in-sync set
        # holds): what etcd records as the log end the set vouches for
        self.acked_through = 0
        self._metadata_paths = [(name, str(store.config.data_dir / name)) for name in METADATA_FILES]

    # --- the store's hook -----------------------------------------------------------

    def written(self, end: int) -> None:
        with self._bytes:
            self._bytes.notify_all()  # fetches waiting for bytes, not the writes waiting for acknowledgement
        if not self.in_sync:
            self._advance()

    def admit(self) -> None:
        """Refuse a write before it is stored when it could not be acknowledged now (Kafka's
        NotEnoughReplicas): under `sync`, fewer in-sync followers than `min_insync`. A write
        that is stored is published once its followers hold it, so it must not be stored."""
        if self.fenced:
            raise NotLeader(f"this replica no longer leads group {self.group}: {self.fenced_reason}; "
                            "nothing was written")
        if self.sync and len(self.in_sync) < self.min_insync:
            self.acks_refused += 1
            raise NotEnoughReplicas(
                f"group {self.group}: {len(self.in_sync)} follower(s) in sync "
                f"({sorted(self.in_sync) or 'none'}), {self.min_insync} needed under sync replication; "
                "nothing was written, retry once a follower has caught up")

    def acknowledge(self, end: int) -> None:
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            while True:
                if self.fenced:
                    self.acks_refused += 1
                    raise NotLeader(f"this replica no longer leads group {self.group}: {self.fenced_reason}; "
                                    "the write is not acknowledged")
                if not self.sync or (self.confirmed >= end and len(self.in_sync) >= self.min_insync):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    self.acks_refused += 1
                    raise ReplicationTimeout(
                        f"group {self.group}: a write ending at {end} is not held by {self.min_insync} in-sync "
                        f"follower(s) after {self.timeout_s:g}s (in sync: {sorted(self.in_sync) or 'none'}, "
                        f"confirmed {self.confirmed})")
                self._cond.wait(left)
        if not self._lease_alive():
            self.fence("its etcd lease expired")
            self.acks_refused += 1
            raise NotLeader(f"this replica's lease on group {self.group} expired; the write is not acknowledged")
        if self.sync:
            with self._cond:
                self.acked_through = max(self.acked_through, end)

    # --- confirmed offset ----------------------------------------------------------------

    def _advance(self) -> None:
        with self._cond:
            ends = [self.store.commitlog.settled_end]
            ends += [self.followers[f].offset for f in self.in_sync]
            confirmed = min(ends)
            if self.sync and len(self.in_sync) < self.min_insync:
                # too few in sync to acknowledge: the high watermark stays (KIP-966), or a write
                # admitted before the followers fell out would be published yet never acknowledged
                confirmed = min(confirmed, self.confirmed)
        # published before any write is acknowledged by it (a producer reads its own writes), and
        # outside the condition: dispatch listeners run in publish
        with self._publish_lock:
            if confirmed > self._published:
                self.store.publish_confirmed(confirmed)
                self._published = confirmed
        with self._cond:
            if confirmed > self.confirmed:
                self.confirmed = confirmed
                self._cond.notify_all()

    def fence(self, reason: str) -> None:
        """Stop acknowledging at once (the lease is lost or another replica leads)."""
        with self._cond:
            if not self.fenced:
                log.warning("group %s: fenced at epoch %d: %s", self.group, self.record.epoch, reason)
            self.fenced = True
            self.fenced_reason = reason
            self._cond.notify_all()
            self._bytes.notify_all()

    # --- in-sync set ----------------------------------------------------------------------

    def in_sync_changes(self) -> tuple[set[str], set[str]]:
        """(followers to drop: not caught up for lag_max_s; followers to add: they hold
        everything confirmed and are fetching). The node writes the new set to etcd first."""
        now = time.monotonic()
        with self._cond:
            drop = {f for f in self.in_sync if now - self.followers[f].caught_up_at > self.lag_max_s
                    or self.followers[f].replica_id != self.ids.get(f)}  # wiped: not the log vouched for
            add = {f for f, p in self.followers.items()
                   if f not in self.in_sync and p.offset >= self.confirmed and now - p.caught_up_at <= self.lag_max_s
                   and p.replica_id}
        return drop, add

    def fetch_silence(self, follower: str) -> float:
        """Seconds since `follower`'s last fetch reached this leader."""
        with self._cond:
            return time.monotonic() - self.followers[follower].last_fetch

    def silent_in_sync(self, silent_s: float) -> set[str]:
        """In-sync followers whose last fetch reached this leader over `silent_s` ago."""
        now = time.monotonic()
        with self._cond:
            return {f for f in self.in_sync if now - self.followers[f].last_fetch > silent_s}

    def in_sync_ids(self, members: set[str]) -> dict[str, str]:
        """Each of `members` (followers) with the data directory it fetches into now."""
        with self._cond:
            return {f: self.followers[f].replica_id for f in members if f in self.followers}

    def set_in_sync(self, members: dict[str, str]) -> None:
        """The set etcd now holds (followers only, with the data directory each was vouched for)."""
        with self._cond:
            now = time.monotonic()
            for f, replica_id in members.items():
                self.followers.setdefault(f, FollowerProgress(0, now, now, replica_id=replica_id))
            self.in_sync = frozenset(members)
            self.ids = dict(members)
        self._advance()

    def wait_confirmed(self, end: int, timeout_s: float) -> bool:
        """Wait until everything before `end` is confirmed (a new leader before it serves)."""
        deadline = time.monotonic() + timeout_s
        self._advance()
        with self._cond:
            while self.confirmed < end and not self.fenced:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return self.confirmed >= end

    # --- the Replication service ----------------------------------------------------------

    def epoch_end(self, req: pb.EpochEndRequest) -> pb.EpochEndResponse:
        self._check_group(req.group)
        self._check_wire(req, "")
        found = self.epochs.end_of(req.epoch, self.store.commitlog.settled_end)
        return pb.EpochEndResponse(status=native_status.ok_status(), leader_epoch=self.record.epoch,
                                   epoch=found.epoch, end_offset=found.start,
                                   segment_bytes=self.store.config.commitlog_segment_bytes,
                                   wire_version=versions.REPLICATION.version, wire_oldest=versions.REPLICATION.oldest,
                                   store_format=self.store.store_format)

    def _check_wire(self, req: pb.EpochEndRequest | pb.FetchRequest, replica: str) -> None:
        """Refuse a follower whose replication wire this leader cannot serve (the group serves on)."""
        peer = versions.Speaks.from_wire(req.wire_version, req.wire_oldest)
        if not versions.compatible(versions.REPLICATION, peer):
            raise VersionUnsupported(
                f"group {self.group}: follower {replica or '(unnamed)'} speaks replication wire {peer}; this leader "
                f"speaks {versions.REPLICATION}: run a txmq release next to this one on it")

    def fetch(self, req: pb.FetchRequest) -> pb.FetchResponse:
        self._check_group(req.group)
        self._check_wire(req, req.replica)
        if self.fenced or req.epoch != self.record.epoch or not self._lease_alive():
            raise NotLeader(f"group {self.group}: fetch for epoch {req.epoch}, this replica leads epoch "
                            f"{self.record.epoch}{' (fenced)' if self.fenced else ''}"
                            f"{' (its lease ran out)' if not self._lease_alive() else ''}")
        end = self.store.commitlog.settled_end
        if req.offset > end:
            raise IllegalOffset(f"group {self.group}: follower {req.replica} asks from {req.offset}, past the "
                                f"leader's end {end}: it must cut its log back first")
        now = time.monotonic()
        with self._cond:
            p = self.followers.setdefault(req.replica, FollowerProgress(req.offset, now, now))
            p.offset = req.offset
            p.last_fetch = now
            p.replica_id = req.replica_id
            if req.offset >= p.sent_through:
                p.caught_up_at = now
        if req.replica in self.in_sync:
            self._advance()
        wait_s = min(req.max_wait_ms or FETCH_WAIT_MS, 5000) / 1000
        deadline = now + wait_s
        with self._bytes:
            while self.store.commitlog.settled_end <= req.offset and not self.fenced:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._bytes.wait(left)
        data = self.store.read_log(req.offset, min(req.max_bytes or FETCH_MAX_BYTES, FETCH_MAX_BYTES))
        leader_end = self.store.commitlog.settled_end
        with self._cond:
            p.sent_through = leader_end
        return pb.FetchResponse(
            status=native_status.ok_status(), epoch=self.record.epoch, offset=req.offset, data=data,
            leader_end=leader_end, confirmed=self.confirmed,
            epochs=[pb.Epoch(epoch=e.epoch, start_offset=e.start) for e in self.epochs.entries],
            files=self._changed_files(req.file_versions), log_start=self.store.commitlog.min_offset,
            wire_version=versions.REPLICATION.version, wire_oldest=versions.REPLICATION.oldest,
            store_format=self.store.store_format)

    def _changed_files(self, known) -> list[pb.MetadataFile]:
        out = []
        for name, path in self._metadata_paths:
            try:
                version = os.stat(path).st_mtime_ns  # (os.stat on a str: a pathlib stat per file per fetch showed)
                if known.get(name) != version:
                    with open(path, "rb") as f:
                        out.append(pb.MetadataFile(name=name, version=version, content=f.read()))
            except FileNotFoundError:
                continue
        return out

    def _check_group(self, group: str) -> None:
        if group != self.group:
            raise NotLeader(f"this replica belongs to group {self.group}, not {group!r}")

    def status(self) -> dict:
        now = time.monotonic()
        with self._cond:
            return {f: {"offset": p.offset, "in_sync": f in self.in_sync,
                        "behind_s": round(now - p.caught_up_at, 3)} for f, p in self.followers.items()}


def replication_method_handlers(current: Callable[[], ReplicationLeader | None], group: str,
                                authorize: Callable[[grpc.ServicerContext], None]) -> dict[str, grpc.RpcMethodHandler]:
    """The Replication service, answered by whichever ReplicationLeader this replica runs now
    (NotLeader while it follows); `authorize` refuses a caller that is not a replica."""

    def serve(name: str, response_class: type):
        def handler(request, context):
            leader = current()
            try:
                authorize(context)
                if leader is None:
                    raise NotLeader(f"this replica does not lead group {group} now")
                return getattr(leader, name)(request)  # the method table names the RPCs
            except TxmqError as exc:
                return response_class(status=native_status.status_for(exc))
        return handler

    def follow(requests, context):
        """Fetch after fetch on one stream: each answered as the Fetch RPC answers it, by the
        leader this replica runs when the request comes (NotLeader once it steps down)."""
        try:
            authorize(context)
        except TxmqError as exc:
            yield pb.FetchResponse(status=native_status.status_for(exc))
            return
        for request in requests:
            leader = current()
            try:
                if leader is None:
                    raise NotLeader(f"this replica does not lead group {group} now")
                yield leader.fetch(request)
            except TxmqError as exc:
                yield pb.FetchResponse(status=native_status.status_for(exc))

    handlers = {name: grpc.unary_unary_rpc_method_handler(
        serve({"EpochEnd": "epoch_end", "Fetch": "fetch"}[name], m.response_class),
        request_deserializer=m.request_class.FromString, response_serializer=m.response_class.SerializeToString)
        for name, m in METHODS.items() if m.kind == UNARY_UNARY}
    m = METHODS["Follow"]
    assert m.kind == STREAM_STREAM and set(METHODS) == {"EpochEnd", "Fetch", "Follow"}, "every RPC has its handler"
    handlers["Follow"] = grpc.stream_stream_rpc_method_handler(
        follow, request_deserializer=m.request_class.FromString, response_serializer=m.response_class.SerializeToString)
    return handlers


class Follower:
    """Fetches the leader's log into this replica's store, from one leader for one epoch."""

    def __init__(self, store: MessageStore, epochs: LeaderEpochs, leader: LeaderRecord, *, group: str, me: str,
                 sync_flush: bool, state_dir, channel: grpc.Channel,
                 metadata: Callable[[], list[tuple[str, str]]], replica_id: str) -> None:
        self.store = store
        self.replica_id = replica_id
        self.epochs = epochs
        self.leader = leader
        self.group = group
        self.me = me
        self.sync_flush = sync_flush
        self.state_dir = state_dir
        self.leader_end = 0
        self.confirmed = 0
        self.leader_log_start: int | None = None  # what the leader's retention kept (None: not heard yet)
        self.caught_up_at = time.monotonic()
        self.started_at = self.caught_up_at
        self.answered_at = 0.0  # when the leader last answered a fetch (monotonic)
        self.error: str | None = None  # a reason this replica cannot follow at all (fatal)
        self.truncated_bytes = 0
        self._stop = threading.Event()
        self._channel = channel
        self._metadata = metadata
        self._epoch_end = self._channel.unary_unary(
            METHODS["EpochEnd"].path, request_serializer=pb.EpochEndRequest.SerializeToString,
            response_deserializer=pb.EpochEndResponse.FromString)
        self._fetch = self._channel.unary_unary(
            METHODS["Fetch"].path, request_serializer=pb.FetchRequest.SerializeToString,
            response_deserializer=pb.FetchResponse.FromString)
        self._follow = self._channel.stream_stream(
            METHODS["Follow"].path, request_serializer=pb.FetchRequest.SerializeToString,
            response_deserializer=pb.FetchResponse.FromString)
        self.streaming = True  # False against a leader without Follow: a Fetch call per round instead
        self._stream = None  # the open Follow call (its responses), and the queue its requests come from
        self._requests: queue.SimpleQueue | None = None
        self._asked_at: float | None = None  # when the request now unanswered was sent
        self._thread = threading.Thread(target=self._run, name=f"txmq-follow-{leader.endpoint}", daemon=True)
        self._appended = threading.Event()  # bytes the dispatch thread has yet to flush and dispatch
        self._dispatch_thread = threading.Thread(target=self._dispatch, name="txmq-follow-dispatch", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._dispatch_thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._appended.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()  # a fetch thread waiting for an answer gets CANCELLED at once
        # closing the channel ends any call in flight at once: an EpochEnd to a leader gone silent
        # waits up to 5 s, and the replica's decision thread, which stops this follower when another
        # replica leads or this one takes over, renews its lease meanwhile only after the join
        self._channel.close()
        self._thread.join(10)
        self._dispatch_thread.join(10)

    def _dispatch(self) -> None:
        """Flush (under --flush sync) and dispatch what the fetch loop appended, off its path."""
        while not self._stop.is_set():
            if not self._appended.wait(1.0):
                self._cancel_if_stalled()
                continue
            self._appended.clear()
            load_compiled()  # once, on the first bytes: not while a group starts and elects (it costs CPU)
            try:
                if self.sync_flush:
                    self.store.commitlog.flush()
                self.store.dispatch_replicated()
            except Exception:  # the next round tries again; the node sees the lag
                log.exception("group %s: dispatching replicated bytes failed", self.group)
                self._stop.wait(0.5)

    def _fetch_from_end(self, file_versions: dict[str, int]) -> pb.FetchResponse:
        """The fetch from this log's end (it tells the leader this replica holds the log): the next
        request on the Follow stream, opened when there is none; a Fetch call against a leader
        that has no Follow."""
        request = pb.FetchRequest(
            group=self.group, epoch=self.leader.epoch, replica=self.me, replica_id=self.replica_id,
            offset=self.store.commitlog.write_end, max_bytes=FETCH_MAX_BYTES, max_wait_ms=FETCH_WAIT_MS,
            file_versions=file_versions, wire_version=versions.REPLICATION.version,
            wire_oldest=versions.REPLICATION.oldest)
        if not self.streaming:
            return self._fetch(request, timeout=FETCH_STALL_S, metadata=self._metadata())
        if self._stream is None:
            self._requests = queue.SimpleQueue()
            self._stream = self._follow(iter(self._requests.get, None), metadata=self._metadata())
            if self._stop.is_set():
                self._stream.cancel()  # stop() may have looked before this stream was there
        self._asked_at = time.monotonic()
        self._requests.put(request)
        try:
            return next(self._stream)
        except StopIteration:
            raise _StreamEnded("the leader ended the Follow stream") from None
        finally:
            self._asked_at = None

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._requests.put(None)  # ends the request iterator
            self._stream.cancel()
            self._stream = self._requests = None

    def _cancel_if_stalled(self) -> None:
        """A request unanswered past FETCH_STALL_S (a leader paused, a connection gone silent):
        cancel the stream, as a Fetch call's deadline would end the call; the fetch loop reopens it."""
        asked_at, stream = self._asked_at, self._stream
        if asked_at is not None and stream is not None and time.monotonic() - asked_at > FETCH_STALL_S:
            log.info("group %s: no answer from %s for %.0fs: reopening the Follow stream", self.group,
                     self.leader.endpoint, FETCH_STALL_S)
            stream.cancel()

    def _run(self) -> None:
        synced = False
        file_versions: dict[str, int] = {}  # the leader's metadata-file versions this replica holds
        while not self._stop.is_set():
            try:
                if not synced:
                    self._cut_divergent_tail()
                    synced = True
                resp = self._fetch_from_end(file_versions)
                if resp.status.code != native_status.OK_CODE:
                    exc = native_status.error_from(resp.status)
                    if isinstance(exc, VersionUnsupported):
                        raise _CannotFollow(str(exc))
                    if isinstance(exc, DataDeleted) and exc.min_offset > self.store.commitlog.write_end:
                        self._restart_at(exc.min_offset)
                        continue
                    if isinstance(exc, IllegalOffset):
                        synced = False  # ahead of the leader: find where the logs part again
                    log.info("group %s: fetch from %s refused: %s", self.group, self.leader.endpoint, exc)
                    self._stop.wait(0.1)
                    continue
                self._apply(resp)
                for f in resp.files:
                    self._take_file(f)
                    file_versions[f.name] = f.version
                if resp.data:
                    # the next fetch acknowledges these bytes at once (holding them is what a sync
                    # write waits for, as with Kafka's and RocketMQ's followers); the dispatch
                    # thread flushes and builds the queues meanwhile
                    self._appended.set()
            except (grpc.RpcError, _StreamEnded) as exc:
                self._close_stream()
                if isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.UNIMPLEMENTED and self.streaming:
                    self.streaming = False
                    log.info("group %s: leader %s has no Follow stream: fetching call by call", self.group,
                             self.leader.endpoint)
                    continue
                log.debug("group %s: fetch from %s failed: %s", self.group, self.leader.endpoint, exc)
                self._stop.wait(0.05)
            except _CannotFollow as exc:
                self._close_stream()
                self.error = str(exc)
                log.error("group %s: cannot follow %s: %s", self.group, self.leader.endpoint, exc)
                return
            except Exception:  # keep following: the node sees the lag
                log.exception("group %s: replication from %s failed", self.group, self.leader.endpoint)
                self._stop.wait(0.5)
        self._close_stream()

    def served_recently(self) -> bool:
        """Whether the leader answered a fetch within a long poll's wait (and a little): it is
        alive, unfenced and still holds its lease (fetch checks both)."""
        return time.monotonic() - self.answered_at < FETCH_WAIT_MS / 1000 + 0.25

    def reaches_leader(self, silent_s: float) -> bool:
        """Whether the leader has answered a fetch since following began, the last one less than
        `silent_s` ago."""
        return self.answered_at >= self.started_at and time.monotonic() - self.answered_at < silent_s

    def leader_silent_s(self) -> float:
        """Seconds since the leader last answered a fetch (since following began, if it never did)."""
        return time.monotonic() - max(self.answered_at, self.started_at)

    def _apply(self, resp: pb.FetchResponse) -> None:
        self._take_store_format(resp.store_format)  # before bytes of a newer format land here
        if resp.data:
            self.store.append_replicated(resp.offset, resp.data)
        end = self.store.commitlog.write_end
        self.epochs.adopt([Epoch(e.epoch, e.start_offset) for e in resp.epochs], end)
        self.leader_end = resp.leader_end
        self.confirmed = resp.confirmed
        self.leader_log_start = resp.log_start
        now = self.answered_at = time.monotonic()
        if end >= resp.leader_end:
            self.caught_up_at = now

    def _take_store_format(self, leader_format: int) -> None:
        """This replica's data directory holds the leader's bytes: it records the leader's store
        format when newer than its own, and refuses to follow one it cannot read."""
        fmt = leader_format or versions.STORE_FORMAT_UNRECORDED
        if fmt <= self.store.store_format:
            return
        if not versions.store_format_readable(fmt):
            raise _CannotFollow(f"leader {self.leader.endpoint} writes store format {fmt}; this replica reads store "
                                f"formats {versions.STORE_FORMAT_OLDEST}-{versions.STORE_FORMAT}: upgrade it")
        self.store.record_store_format(fmt)

    def _take_file(self, f: pb.MetadataFile) -> None:
        """The leader's copy of a metadata file: the store's registries reload it; the others are
        read when this replica leads."""
        if f.name not in METADATA_FILES:
            raise _CannotFollow(f"the leader sent an unknown metadata file {f.name!r}")
        if f.name == "topics.json":
            self.store.topics.replace(f.content)
        elif f.name == "offsets.json":
            self.store.offsets.replace(f.content)
        else:
            write_bytes_atomically(self.store.config.data_dir / f.name, f.content)

    def _restart_at(self, offset: int) -> None:
        """The leader's retention deleted the bytes this log lacks: start over at the leader's log
        start, with nothing derived from the old log (queues, index, transaction-table snapshots,
        timer files): they are rebuilt from the log there, as after a single broker's retention."""
        log.warning("group %s: leader %s keeps its log from %d only, past this log's end %d: "
                    "this replica starts over there", self.group, self.leader.endpoint, offset,
                    self.store.commitlog.write_end)
        self.truncated_bytes += self.store.commitlog.write_end - self.store.commitlog.min_offset
        self.store.restart_log_at(offset)
        self.epochs.truncate_to(0)  # the next answer gives the leader's history
        drop_snapshots(self.state_dir)
        shutil.rmtree(self.store.config.data_dir / TIMER_DIR, ignore_errors=True)

    def _cut_divergent_tail(self) -> None:
        """Cut what this log holds past where it parts from the leader's (Kafka's truncation by
        leader epoch): its last epoch ends in the leader's log at `end_offset`."""
        last = self.epochs.last
        resp = self._epoch_end(pb.EpochEndRequest(group=self.group, epoch=last.epoch if last else -1), timeout=5,
                               metadata=self._metadata())
        if resp.status.code != native_status.OK_CODE:
            exc = native_status.error_from(resp.status)
            if isinstance(exc, VersionUnsupported):
                raise _CannotFollow(str(exc))
            raise exc
        leader = versions.Speaks.from_wire(resp.wire_version, resp.wire_oldest)
        if not versions.compatible(versions.REPLICATION, leader):
            raise _CannotFollow(f"leader {self.leader.endpoint} speaks replication wire {leader}; this replica "
                                f"speaks {versions.REPLICATION}: run a txmq release next to the leader's here")
        self._take_store_format(resp.store_format)
        mine = self.store.config.commitlog_segment_bytes
        if resp.segment_bytes != mine:
            raise _CannotFollow(f"the leader's CommitLog segments are {resp.segment_bytes} bytes, this replica's "
                                f"{mine}: start it with --segment-bytes {resp.segment_bytes} on an empty data dir")
        end = self.store.commitlog.write_end
        if last is not None and resp.epoch < 0 and end > self.store.commitlog.min_offset:
            # a leader with no epoch as old as this log's last: its history does not reach back to
            # this log, so it is no continuation of it, and cutting to its start would erase
            # writes this group acknowledged (a wiped replica must never lead: may_lead)
            raise _CannotFollow(f"leader {self.leader.endpoint} holds no epoch as old as this log's last "
                                f"({last.epoch}); this replica keeps its log rather than cut it")
        if last is None or resp.epoch < 0:
            cut = self.store.commitlog.min_offset  # nothing here is known to be the leader's
        else:
            cut = min(resp.end_offset, self.epochs.end_of(resp.epoch, end).start)
        if cut < end:
            log.warning("group %s: cutting %d bytes past %d that leader %s (epoch %d) does not hold",
                        self.group, end - cut, cut, self.leader.endpoint, resp.leader_epoch)
            self.store.truncate_log(cut)
            self.epochs.truncate_to(cut)
            drop_snapshots(self.state_dir)
            self.truncated_bytes += end - cut


class _CannotFollow(Exception):
    pass


class _StreamEnded(Exception):
    pass
