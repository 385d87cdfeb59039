"""NativeClient: the one wrapper over txmq's native gRPC service and its Flight data plane.

Everything else in the client library (Producer, TransactionProducer,
PullConsumer, Admin), the CLI and the Spark connector builds on it. Control
calls go over gRPC; bulk reads and writes (`read_queue`, `pull_arrow`,
`send_arrow`, `prepare_arrow`, `prepare_stream`) over the broker's Arrow
Flight service (client/data_plane.py). It connects lazily, retries calls that
could not reach a broker (UNAVAILABLE) with exponential backoff across the
configured endpoints until the call's deadline, and turns every non-OK answer
into the `txmq.broker.errors` class the broker raised.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import random
import threading
import time
import uuid
from datetime import datetime, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import grpc
import pyarrow as pa

from txmq.broker import errors
from txmq.broker.client.batches import to_arrow_table
from txmq.broker.client.data_plane import DataPlane
from txmq.broker.client.local_read import LocalReadUnavailable, LocalSegments
from txmq.broker.client.types import send_properties
from txmq.broker.protocol import keepalive
from txmq.broker.client.types import (
    CheckRequest,
    ConsumerGroupInfo,
    Election,
    EndSummary,
    GroupLag,
    GroupMember,
    GroupStatus,
    Message,
    PendingGroup,
    PrepareSummary,
    PullResult,
    PushedBatch,
    QueueRange,
    QueueRef,
    QueueSegment,
    Routes,
    QueueSlice,
    ReceivedMessage,
    ReplicaStatus,
    ScheduledMessage,
    ScheduledSummary,
    SendSummary,
    TopicInfo,
    TransactionInfo,
)
from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.protocol.native_arrow import END_TRANSACTION_ACTION
from txmq.broker.protocol.coordinator_methods import COORDINATOR_METHODS
from txmq.broker.protocol.native_methods import NATIVE_METHODS, UNARY_STREAM
from txmq.broker.protocol.native_status import raise_for
from txmq.broker.protocol.native_version import client_headers
from txmq.broker.protocol.refusing import was_unprocessed
from txmq.broker.transaction.cross_records import CrossRecord

if TYPE_CHECKING:
    from txmq.broker.client.checkback import CheckbackSession
    from txmq.broker.client.subscription import Subscription

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "127.0.0.1:8081"
MAX_FRAME_BYTES = 256 << 20
# Writes go to the broker in batches of about this many bytes, streamed: the broker stores one
# while the next is on the wire.
PUT_BATCH_BYTES = 8 << 20
# A whole read stream may take this many times the call timeout.
STREAM_TIMEOUT_FACTOR = 20
BACKOFF_START_S = 0.05
BACKOFF_MAX_S = 2.0
GROUP_BACKOFF_MAX_S = 0.25

_RESOLUTIONS = {"COMMIT": pb.COMMIT, "ROLLBACK": pb.ROLLBACK, "IN_PROGRESS": pb.IN_PROGRESS}
_GRPC_ERRORS: dict[grpc.StatusCode, type[errors.TxmqError]] = {
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.RequestTimeout,
    grpc.StatusCode.UNAVAILABLE: errors.BrokerUnavailable,
    grpc.StatusCode.CANCELLED: errors.BrokerUnavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.BadRequest,
    grpc.StatusCode.UNAUTHENTICATED: errors.Unauthorized,
    grpc.StatusCode.PERMISSION_DENIED: errors.Forbidden,
    grpc.StatusCode.UNIMPLEMENTED: errors.Unsupported,
    grpc.StatusCode.INVALID_ARGUMENT: errors.BadRequest,
    grpc.StatusCode.FAILED_PRECONDITION: errors.VersionUnsupported,  # native_version.py: the only sender
}
_VERSION_HEADERS = tuple(client_headers())


# RPCs that store something new each time they run: never re-sent after a failure mid-call.
NON_IDEMPOTENT = frozenset({"SendMessages", "PrepareMessages"})


def parse_endpoints(endpoints: str) -> list[str]:
    """["h1:p1", "h2:p2"] from "h1:p1;h2:p2" (commas accepted too)."""
    items = [e.strip() for e in endpoints.replace(",", ";").split(";") if e.strip()]
    if not items:
        raise errors.BadRequest(f"no broker endpoint in {endpoints!r} (expected HOST:PORT)")
    for item in items:
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise errors.BadRequest(f"broker endpoint {item!r} is not HOST:PORT")
    return items


def _never_sent(exc: grpc.RpcError) -> bool:
    """Whether a call failed before anything of it was handled: no connection could be made (gRPC
    refused it before sending, or a follower could not connect to its leader), or a replica between
    roles refused it unread. Not a failure in the middle of a call."""
    details = (exc.details() if isinstance(exc, grpc.Call) else "") or ""
    return exc.code() == grpc.StatusCode.UNAVAILABLE and (
        "failed to connect to all addresses" in details or was_unprocessed(details))


def _grpc_error(exc: grpc.RpcError, path: str, target: str) -> errors.TxmqError:
    call = exc if isinstance(exc, grpc.Call) else None  # the errors a call raises are Calls; a bare RpcError has no code
    code = call.code() if call is not None else None
    cls = _GRPC_ERRORS.get(code, errors.TxmqError)
    details = call.details() if call is not None else str(exc)
    return cls(f"{path.rsplit('/', 1)[-1]} to {target} failed: {code.name if code else 'error'}: {details}")


def _topic_info(view: pb.TopicView) -> TopicInfo:
    return TopicInfo(name=view.name, queue_count=view.queue_count, permission=view.permission,
                     queues={q.queue_id: QueueRange(q.min_offset, q.max_offset) for q in view.queues},
                     message_type=view.message_type or "MIXED")


def _group_info(view: pb.ConsumerGroupView) -> ConsumerGroupInfo:
    return ConsumerGroupInfo(name=view.name, fifo=view.fifo, retry_max_times=view.retry_max_times,
                             max_delivery_attempts=view.max_delivery_attempts)


def _tx_info(view: pb.TransactionView) -> TransactionInfo:
    return TransactionInfo(transaction_id=view.transaction_id, state=view.state, topics=tuple(view.topics),
                           half_count=view.half_count, age_ms=view.age_ms, check_times=view.check_times,
                           producer_group=view.producer_group, senders=tuple(view.senders),
                           created_ms=view.created_ms, next_check_ms=view.next_check_ms,
                           coordinator=view.coordinator, participants=tuple(view.participants))


def received_message(view: pb.MessageView) -> ReceivedMessage:
    return ReceivedMessage(topic=view.topic, queue_id=view.queue_id, queue_offset=view.queue_offset,
                           message_id=view.message_id, offset_msg_id=view.offset_msg_id, tag=view.tag or None,
                           keys=tuple(view.keys), body=view.body, properties=dict(view.properties),
                           born_timestamp_ms=view.born_timestamp_ms, store_timestamp_ms=view.store_timestamp_ms,
                           transaction_id=view.transaction_id or None)


def _offsets(items: Iterable[pb.TopicOffsets]) -> dict[str, dict[int, int]]:
    return {item.topic: dict(sorted(item.offsets.items())) for item in items}


def _queue_ids(current: Mapping[str, Iterable[int]] | None) -> list[pb.QueueIds]:
    return [pb.QueueIds(topic=t, queue_ids=sorted(ids)) for t, ids in sorted((current or {}).items())]


def _topic_offsets(offsets: Mapping[str, Mapping[int, int]]) -> list[pb.TopicOffsets]:
    return [pb.TopicOffsets(topic=t, offsets={int(q): int(o) for q, o in qs.items()}) for t, qs in offsets.items()]


def put_batches(data: Iterable[Any]) -> Iterator[pa.RecordBatch]:
    """Record batches of about PUT_BATCH_BYTES at most from tables, batches or message lists:
    a broker call each (a batch is stored whole or not at all), streamed one after another."""
    for item in data:
        table = _as_table(item)
        if table.num_rows == 0:
            continue
        rows = max(1, int(table.num_rows * PUT_BATCH_BYTES / max(table.nbytes, 1)))
        for batch in table.combine_chunks().to_batches(max_chunksize=rows):
            if batch.num_rows:
                yield batch


class NativeClient:
    """A connection to one txmq broker (or a list to fail over between) over the native service."""

    def __init__(self, endpoints: str = DEFAULT_ENDPOINT, *, access_key: str | None = None,
                 secret_key: str | None = None, tls: bool = False, ca_file: str | None = None,
                 timeout_s: float = 30.0, retry_unavailable_s: float | None = None,
                 local_reads: bool = False, fail_fast: bool = False) -> None:
        """`fail_fast`: a write that cannot reach any endpoint fails with BrokerUnreachable once
        `retry_unavailable_s` has passed, instead of waiting for a lone endpoint to come back
        (a ClusterClient then sends to another group)."""
        self.endpoints = parse_endpoints(endpoints)
        self.fail_fast = fail_fast
        self.access_key = access_key
        self.secret_key = secret_key
        self.tls = tls
        self.ca_file = ca_file
        self.timeout_s = timeout_s
        # How long a call keeps retrying a broker it cannot reach (default: the whole call timeout).
        self.retry_unavailable_s = timeout_s if retry_unavailable_s is None else retry_unavailable_s
        self.client_id = f"txmq-py-{uuid.uuid4().hex[:12]}"
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._target_index = 0
        self._stubs: dict[str, Callable] = {}
        self._closed = False
        # Same-host reads, opt-in (client/local_read.py): None once off (not asked, or a plan was unreadable).
        self._local: LocalSegments | None = LocalSegments() if local_reads else None
        self._data = DataPlane(self._locate_data_plane, lambda: self.target.rpartition(":")[0].strip("[]"),
                               self._metadata, ca_file=ca_file)

    # ---- connection ---------------------------------------------------------
    @property
    def target(self) -> str:
        return self.endpoints[self._target_index % len(self.endpoints)]

    def _open_channel(self) -> grpc.Channel:
        options = [("grpc.max_receive_message_length", MAX_FRAME_BYTES),
                   ("grpc.max_send_message_length", MAX_FRAME_BYTES),
                   ("grpc.initial_reconnect_backoff_ms", 50),
                   ("grpc.max_reconnect_backoff_ms", 2000),
                   *keepalive.CHANNEL_OPTIONS]
        if self.tls:
            root = open(self.ca_file, "rb").read() if self.ca_file else None
            return grpc.secure_channel(self.target, grpc.ssl_channel_credentials(root), options=options)
        return grpc.insecure_channel(self.target, options=options)

    def _callables(self) -> dict[str, Callable]:
        with self._lock:
            if self._closed:
                raise errors.BrokerUnavailable("the client is closed")
            if self._channel is None:
                self._channel = self._open_channel()
                self._stubs = {}
                for m in (*NATIVE_METHODS, *COORDINATOR_METHODS):  # the coordinator's: client/cross_group.py
                    factory = self._channel.unary_stream if m.kind == UNARY_STREAM else self._channel.unary_unary
                    self._stubs[m.name] = factory(m.path, request_serializer=m.request_class.SerializeToString,
                                                  response_deserializer=m.response_class.FromString)
            return self._stubs

    def _fail_over(self) -> None:
        """Move to the next endpoint. With one endpoint the channel stays: gRPC reconnects it itself."""
        if len(self.endpoints) == 1:
            return
        with self._lock:
            old, self._channel = self._channel, None
            self._target_index += 1
        if old is not None:
            old.close()
        self._data.reset()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        self._data.close()

    def __enter__(self) -> "NativeClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _metadata(self) -> list[tuple[str, str]]:
        now = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        md = [("x-mq-client-id", self.client_id), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "txmq-native"),
              ("x-mq-date-time", now), ("x-mq-request-id", uuid.uuid4().hex), *_VERSION_HEADERS]
        if self.access_key:
            signature = hmac.new((self.secret_key or "").encode(), now.encode(), hashlib.sha1).hexdigest()
            md.append(("authorization", f"MQv2-HMAC-SHA1 Credential={self.access_key}, "
                                        f"SignedHeaders=x-mq-date-time, Signature={signature}"))
        return md

    def _call(self, name: str, request: Any, *, timeout_s: float | None = None) -> Any:
        """One unary RPC with reconnect/backoff on UNAVAILABLE; raises the broker's typed error.

        Writes that are not idempotent (NON_IDEMPOTENT) are never re-sent: a broker
        that dies after storing them but before answering would store them twice,
        and a COMMIT would then show duplicates. They wait for the channel to be
        ready instead (nothing has been sent while it is not), and a failure in
        the middle of the call surfaces to the caller, whose recovery is
        transactional (Spark retries the task as a new sender; a TransactionProducer's
        unfinished transaction is settled by check-back).
        """
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        retry_until = time.monotonic() + min(timeout, self.retry_unavailable_s)
        backoff = BACKOFF_START_S
        resend = name not in NON_IDEMPOTENT
        # With several endpoints (a broker group's replicas) a write does not wait for one that is
        # down: gRPC refuses it at once, before sending anything, and the next endpoint is tried.
        several = len(self.endpoints) > 1 or self.fail_fast
        while True:
            stub = self._callables()[name]
            remaining = max(0.001, deadline - time.monotonic())
            target = self.target
            try:
                response = stub(request, timeout=remaining, metadata=self._metadata(),
                                wait_for_ready=not resend and not several)
            except ValueError:
                # another thread failed over and closed the channel this stub belongs to before the
                # call started: nothing was sent, so the call goes to the new channel
                if self._closed or time.monotonic() >= deadline:
                    raise errors.BrokerUnavailable(f"{name}: the client is closed") from None
                continue
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else None
                unsent = not resend and _never_sent(exc)
                if not resend and not unsent:
                    self._fail_over()
                elif code == grpc.StatusCode.UNAVAILABLE and not self._closed \
                        and time.monotonic() + backoff < retry_until:
                    log.debug("broker %s unavailable, retrying in %.2fs", target, backoff)
                    self._fail_over()
                    time.sleep(backoff * (0.5 + random.random() / 2))
                    # a group's next leader answers within seconds: ask it often
                    backoff = min(backoff * 2, GROUP_BACKOFF_MAX_S if several else BACKOFF_MAX_S)
                    continue
                if unsent:
                    raise errors.BrokerUnreachable(f"{name}: no endpoint of {', '.join(self.endpoints)} could be "
                                                   f"reached; nothing was sent") from None
                raise _grpc_error(exc, name, target) from None
            raise_for(response.status)
            return response

    # ---- admin --------------------------------------------------------------
    def create_topic(self, name: str, queue_count: int = 4, message_type: str | None = None) -> TopicInfo:
        """Create (or update) a topic; message_type is RocketMQ 5's NORMAL, FIFO, DELAY, TRANSACTION or MIXED."""
        request = pb.CreateTopicRequest(name=name, queue_count=queue_count, message_type=message_type or "")
        return _topic_info(self._call("CreateTopic", request).topic)

    def routes(self, topics: Sequence[str] = ()) -> Routes:
        """The cluster's groups and where each queue of `topics` lives (every registered topic
        when none is named); outside a cluster, one group named "" holding every queue."""
        resp = self._call("Routes", pb.RoutesRequest(topics=list(topics)))
        return Routes(cluster=resp.cluster,
                      groups={g.name: tuple(g.endpoints) for g in resp.groups},
                      leaders={g.name: g.leader or None for g in resp.groups},
                      topics={t.name: tuple(QueueRef(t.name, q.group, q.queue_id,
                                                     tuple(QueueSegment(m.group, m.queue_id, m.base) for m in q.moves),
                                                     q.sealing) for q in t.queues)
                              for t in resp.topics},
                      message_types={t.name: t.message_type for t in resp.topics},
                      retired=frozenset(g.name for g in resp.groups if g.retired))

    def move_queues(self, *, topic: str = "", queue: str = "", to: str = "", even: bool = False, drain: str = "",
                    dry_run: bool = False, wait_s: float = 30.0, rate: int | None = None,
                    keep_history: bool = False, copy_wait_s: float = 600.0) -> dict:
        """Move queues between a cluster's groups (docs/cluster.md, "Moving queues"): queue "group:id"
        of `topic` to group `to`, or `topic` evened out over the groups (`even`), or every queue off
        group `drain` (which is then retired). What moved (or would, with `dry_run`).

        The moved queues' history is copied into their new groups at `rate` bytes per second (None:
        the broker's default, 32 MiB/s; 0: unlimited), waiting up to `copy_wait_s` for the copies;
        `keep_history` leaves it where it lies. A drain says whether the group is `safe_to_stop`."""
        import json

        req = pb.MoveQueuesRequest(topic=topic, queue=queue, to=to, even=even, drain=drain, dry_run=dry_run,
                                   wait_ms=int(wait_s * 1000), rate=rate, keep_history=keep_history,
                                   copy_wait_ms=int(copy_wait_s * 1000))
        return json.loads(self._call("MoveQueues", req, timeout_s=max(self.timeout_s, 600.0, copy_wait_s + 120.0)
                                     ).json or "{}")

    def list_topics(self, *, include_system: bool = False) -> list[TopicInfo]:
        resp = self._call("ListTopics", pb.ListTopicsRequest(include_system=include_system))
        return [_topic_info(t) for t in resp.topics]

    def describe_topic(self, name: str) -> TopicInfo:
        return _topic_info(self._call("DescribeTopic", pb.TopicRequest(name=name)).topic)

    def delete_topic(self, name: str) -> None:
        self._call("DeleteTopic", pb.TopicRequest(name=name))

    # ---- consumer groups ------------------------------------------------------
    def update_consumer_group(self, name: str, *, fifo: bool | None = None, retry_max_times: int | None = None,
                              must_exist: bool = False) -> ConsumerGroupInfo:
        """Create a consumer group's settings or change those given (None keeps the current value).
        fifo: RocketMQ's consumeMessageOrderly; retry_max_times: redeliveries before `%DLQ%<group>`."""
        request = pb.UpdateConsumerGroupRequest(name=name, must_exist=must_exist)
        if fifo is not None:
            request.fifo = fifo
        if retry_max_times is not None:
            request.retry_max_times = retry_max_times
        return _group_info(self._call("UpdateConsumerGroup", request).group)

    def describe_consumer_group(self, name: str) -> ConsumerGroupInfo:
        return _group_info(self._call("DescribeConsumerGroup", pb.ConsumerGroupRequest(name=name)).group)

    def list_consumer_groups(self) -> list[ConsumerGroupInfo]:
        return [_group_info(g) for g in self._call("ListConsumerGroups", pb.ListConsumerGroupsRequest()).groups]

    def delete_consumer_group(self, name: str) -> None:
        self._call("DeleteConsumerGroup", pb.ConsumerGroupRequest(name=name))

    # ---- offsets --------------------------------------------------------------
    def snapshot_offsets(self, topics: Sequence[str], *,
                         current: Mapping[str, Iterable[int]] | None = None) -> dict[str, dict[int, int]]:
        """A consistent cut: end-exclusive offsets that never split a committed transaction.
        `current`: queues the caller expects to take writes here; QueueMoved if one moved away."""
        req = pb.OffsetsRequest(topics=list(topics), current=_queue_ids(current))
        return _offsets(self._call("SnapshotOffsets", req).topics)

    def min_offsets(self, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        return _offsets(self._call("MinOffsets", pb.OffsetsRequest(topics=list(topics))).topics)

    def offsets_for_timestamp(self, topics: Sequence[str], timestamp_ms: int) -> dict[str, dict[int, int]]:
        req = pb.OffsetsRequest(topics=list(topics), timestamp_ms=timestamp_ms)
        return _offsets(self._call("OffsetsForTimestamp", req).topics)

    def wait_for_offsets(self, topics: Sequence[str], known: Mapping[str, Mapping[int, int]],
                         timeout_ms: int, *, current: Mapping[str, Iterable[int]] | None = None
                         ) -> dict[str, dict[int, int]]:
        """Long poll: a consistent cut as soon as any queue is past `known`, else at the timeout.
        `current` as in `snapshot_offsets`."""
        req = pb.WaitForOffsetsRequest(topics=list(topics), known=_topic_offsets(known), timeout_ms=timeout_ms,
                                       current=_queue_ids(current))
        resp = self._call("WaitForOffsets", req, timeout_s=self.timeout_s + timeout_ms / 1000.0)
        return _offsets(resp.topics)

    def cross_group_commits(self, windows: Sequence[tuple[str, int, int, int | None]],
                            transaction_ids: Sequence[str] = ()) -> tuple[list[CrossRecord], dict[str, str]]:
        """(the first final record of each cross-group transaction in each window (topic, queue id,
        start, end; end None: to the queue's end), {transaction id: its state here}); the states
        are read before the windows are scanned."""
        req = pb.CrossGroupCommitsRequest(
            windows=[pb.QueueWindow(topic=t, queue_id=q, start=s, end=e or 0, to_end=e is None)
                     for t, q, s, e in windows],
            transaction_ids=list(transaction_ids))
        resp = self._call("CrossGroupCommits", req)
        records = [CrossRecord(r.transaction_id, r.topic, r.queue_id, r.offset, tuple(r.participants))
                   for r in resp.records]
        return records, {s.transaction_id: s.state for s in resp.states}

    def cut_before(self, topics: Sequence[str], topic: str, queue_id: int,
                   offset: int) -> dict[str, dict[int, int]] | None:
        """The consistent cut of `topics` just before entry `offset` of (topic, queue_id) became
        visible; None when the broker no longer knows it."""
        resp = self._call("CutBefore", pb.CutBeforeRequest(topics=list(topics), topic=topic, queue_id=queue_id,
                                                           offset=offset))
        return _offsets(resp.topics) if resp.known else None

    # ---- reads: the data plane (Arrow Flight) ------------------------------------
    def _locate_data_plane(self) -> tuple[str, int, bool]:
        resp = self._call("DataPlane", pb.DataPlaneRequest())
        return resp.flight_host, resp.flight_port, resp.tls

    @property
    def reads_locally(self) -> bool:
        """Whether reads may be answered with plans this client decodes itself (client/local_read.py)."""
        return self._local is not None

    def data_plane(self) -> str:
        """The Flight location bulk data moves through (`grpc+tcp://HOST:PORT`), asked of the broker
        on first use: give it to any Arrow Flight client to read topics (see the README)."""
        return self._data.location()

    def read_queue(self, topic: str, queue_id: int, start: int, end: int, *, tags: str | None = None,
                   sql: str | None = None, batch_bytes: int = 0, max_batches: int = 0,
                   records: bool = False) -> Iterator[PullResult]:
        """Messages [start, end) of one queue, streamed as record batches in the Spark schema, in
        offset order; `end` must not pass the queue's end (take it from a consistent cut).

        `tags` ("a || b") and `sql` (a SQL92 filter over properties, TAGS and KEYS) keep only the
        messages that pass both, filtered by the broker: a batch may then be empty while its
        next_offset moves on. A bad expression raises IllegalFilterExpression.

        Each PullResult says where the next batch starts. A broker that cannot be reached is
        retried from the last batch received until `retry_unavailable_s` runs out. Raises
        DataDeleted(min_offset=...) when a part of the range was removed by retention.
        """
        pos = start
        retry_until = time.monotonic() + self.retry_unavailable_s
        backoff = BACKOFF_START_S
        sent = 0
        while True:
            local = None if records else self._local
            request = pb.PullRequest(records=records, topic=topic, queue_id=queue_id, start_offset=pos, end_offset=end,
                                     tags=tags or "", sql=sql or "", max_bytes=batch_bytes,
                                     read_plans=local is not None,
                                     max_batches=max_batches - sent if max_batches else 0)
            try:
                for result in self._data.read(request, timeout_s=self.timeout_s * STREAM_TIMEOUT_FACTOR,
                                              local=local):
                    pos, sent = result.next_offset, sent + 1
                    yield result
                return
            except LocalReadUnavailable as exc:
                log.warning("same-host reads off for this client, reading through the broker: %s", exc)
                self._local = None
            except errors.BrokerUnavailable:
                if self._closed or time.monotonic() + backoff >= retry_until:
                    raise
                log.debug("data plane unavailable, reading %s/%d again from %d in %.2fs", topic, queue_id, pos,
                          backoff)
                self._fail_over()
                time.sleep(backoff * (0.5 + random.random() / 2))
                # a group's next leader answers within seconds: ask it often
                several = len(self.endpoints) > 1 or self.fail_fast
                backoff = min(backoff * 2, GROUP_BACKOFF_MAX_S if several else BACKOFF_MAX_S)

    def subscribe(self, start: Mapping[str, Mapping[int, int]], *, tags: str | None = None, sql: str | None = None,
                  max_bytes: int = 0, skip_deleted: bool = True, retry_s: float | None = None) -> "Subscription":
        """Committed messages of the queues in `start` ({topic: {queue id: first offset}}), pushed by
        the broker as they are published: iterate the Subscription for PushedBatches (one queue
        each, in offset order), `close()` it to stop. It reopens its stream from where it got to
        when the broker goes away, for up to `retry_s` (default: `retry_unavailable_s`) at a time.
        `tags` and `sql` filter as in `read_queue`; `max_bytes`: records per batch (0: the
        broker's default); retention-deleted offsets are skipped unless `skip_deleted` is off."""
        from txmq.broker.client.subscription import Subscription

        return Subscription(self, start, tags=tags, sql=sql, max_bytes=max_bytes, skip_deleted=skip_deleted,
                            retry_s=retry_s)

    def follow(self, request: pb.SubscribeRequest, on_open: Callable[[Any], None]) -> Iterator[PushedBatch]:
        """One subscription stream, as it comes (`subscribe` reopens it after failures)."""
        return self._data.follow(request, on_open)

    def fail_over(self) -> None:
        """Connect to the next endpoint (and ask it for its data plane) on the next call."""
        self._fail_over()
        self._data.reset()

    def pull_arrow(self, topic: str, queue_id: int, start: int, end: int, *, tags: str | None = None,
                   sql: str | None = None, max_bytes: int = 0, records: bool = False) -> PullResult:
        """The first batch of messages [start, end) of one queue (about `max_bytes` of records; 0:
        the broker's default): call again from `next_offset` for more, or use `read_queue`.
        `records`: the batch holds the records as stored (RECORDS_SCHEMA: queueOffset, record), every
        property and header field kept: what a history copy appends (cluster/copier.py)."""
        for result in self.read_queue(topic, queue_id, start, end, tags=tags, sql=sql, batch_bytes=max_bytes,
                                      max_batches=1, records=records):
            return result
        raise errors.TxmqError(f"the broker sent no batch for {topic}/{queue_id} [{start}, {end})")

    def get_message(self, message_id: str) -> ReceivedMessage:
        return received_message(self._call("GetMessage", pb.GetMessageRequest(message_id=message_id)).message)

    def query_messages(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int | None = None,
                       max_count: int = 64) -> list[ReceivedMessage]:
        req = pb.QueryMessagesRequest(topic=topic, key=key, begin_ms=begin_ms, end_ms=end_ms or 0,
                                      max_count=max_count)
        return [received_message(m) for m in self._call("QueryMessages", req).messages]

    # ---- writes ---------------------------------------------------------------
    def send_arrow(self, batch: pa.RecordBatch | pa.Table, *, topic: str | None = None,
                   return_message_ids: bool = False) -> SendSummary:
        """Send many normal messages in one Flight stream (columns: body, and optionally topic,
        tag, keys, properties, shardingKey, messageId). Each streamed batch is stored whole or not
        at all; a failure raises, and the batches before it stay sent."""
        return self.send_stream([batch], topic=topic, return_message_ids=return_message_ids)

    def send_stream(self, batches: Iterable[pa.RecordBatch | pa.Table], *, topic: str | None = None,
                    return_message_ids: bool = False) -> SendSummary:
        """`send_arrow` for many batches in one Flight stream, taken from the iterable as they go."""
        command = pb.PutCommand(kind=pb.PutCommand.SEND, default_topic=topic or "",
                                return_message_ids=return_message_ids)
        answers: list[pb.SendResponse] = []
        # a stream that reached no leader is tried again while the group may be electing one, but not
        # longer than a call keeps retrying: a ClusterClient then sends to another group
        self._data.put(lambda: command, put_batches(batches), pb.SendResponse, answers.append,
                       timeout_s=self.timeout_s * STREAM_TIMEOUT_FACTOR, relocate_s=self.retry_unavailable_s)
        return SendSummary(count=sum(a.count for a in answers),
                           slices=[QueueSlice(s.topic, s.queue_id, s.first_offset, s.count)
                                   for a in answers for s in a.slices],
                           message_ids=[i for a in answers for i in a.message_ids])

    def send(self, messages: Sequence[Message], *, topic: str | None = None,
             return_message_ids: bool = True) -> SendSummary:
        """Send a few messages in the protobuf form (no Arrow needed)."""
        req = pb.SendRequest(batch=_spec_batch(messages, topic), return_message_ids=return_message_ids)
        resp = self._call("SendMessages", req)
        return SendSummary(count=resp.count,
                           slices=[QueueSlice(s.topic, s.queue_id, s.first_offset, s.count) for s in resp.slices],
                           message_ids=list(resp.message_ids))

    def prepare_arrow(self, transaction_id: str, batch: pa.RecordBatch | pa.Table, *, topic: str | None = None,
                      producer_group: str, sender: str, return_message_ids: bool = False) -> PrepareSummary:
        """Add half messages to a transaction (a new one when `transaction_id` is empty).

        Raises TransactionAlreadyEnded when the transaction was already resolved.
        """
        return self.prepare_stream(transaction_id, [batch], topic=topic, producer_group=producer_group,
                                   sender=sender, return_message_ids=return_message_ids)

    def prepare_stream(self, transaction_id: str, batches: Iterable[pa.RecordBatch | pa.Table], *,
                       topic: str | None = None, producer_group: str, sender: str,
                       return_message_ids: bool = False, participants: Sequence[str] = ()) -> PrepareSummary:
        """`prepare_arrow` for many batches in one Flight stream: each batch's halves are added
        whole or not at all, in order; a failure raises (TransactionAlreadyEnded when the
        transaction was resolved meanwhile). `participants`: the broker groups of a transaction
        across groups (client/cross_group.py), named on every half."""
        tx_id, count, ids = transaction_id, 0, []

        def command() -> pb.PutCommand:
            return pb.PutCommand(kind=pb.PutCommand.PREPARE, default_topic=topic or "", transaction_id=tx_id,
                                 producer_group=producer_group, sender=sender, return_message_ids=return_message_ids,
                                 participants=list(participants))

        def on_answer(answer: pb.PrepareResponse) -> None:
            nonlocal tx_id, count
            tx_id = answer.transaction_id
            count += answer.count
            ids.extend(answer.message_ids)

        # halves belong to their transaction's group, and no other can take them: a stream that
        # reached no leader waits for the group's next one up to the call timeout
        self._data.put(command, put_batches(batches), pb.PrepareResponse, on_answer,
                       timeout_s=self.timeout_s * STREAM_TIMEOUT_FACTOR, relocate_s=self.timeout_s)
        return PrepareSummary(transaction_id=tx_id, count=count, message_ids=ids)

    def prepare(self, transaction_id: str, messages: Sequence[Message], *, topic: str | None = None,
                producer_group: str = "", sender: str = "", return_message_ids: bool = True) -> PrepareSummary:
        """Add a few half messages in the protobuf form."""
        req = pb.PrepareRequest(transaction_id=transaction_id, producer_group=producer_group, sender=sender,
                                batch=_spec_batch(messages, topic), return_message_ids=return_message_ids)
        resp = self._call("PrepareMessages", req)
        return PrepareSummary(transaction_id=resp.transaction_id, count=resp.count,
                              message_ids=list(resp.message_ids))

    def end_transaction(self, transaction_id: str, resolution: str, *, include_senders: Sequence[str] | None = None,
                        producer_group: str | None = None, source: str = "client",
                        participants: Sequence[str] = ()) -> EndSummary:
        """COMMIT or ROLLBACK a transaction; idempotent. With include_senders, only their halves commit.
        IN_PROGRESS (with source "check") answers a check-back "still running, ask later": nothing ends."""
        _one_group(participants)
        code = _RESOLUTIONS.get(str(resolution.value if isinstance(resolution, Enum) else resolution).upper())
        if code is None:
            raise errors.BadRequest(f"resolution must be COMMIT, ROLLBACK or IN_PROGRESS, not {resolution!r}")
        req = pb.EndTransactionRequest(transaction_id=transaction_id, resolution=code,
                                       restrict_senders=include_senders is not None,
                                       include_senders=list(include_senders or ()),
                                       producer_group=producer_group or "", source=source)
        # a Flight action, not the gRPC call: a cheaper round trip on the COMMIT's latency; ending is
        # idempotent, so one the broker did not answer is asked again wherever the group's leader is then
        resp = self._data.action(END_TRANSACTION_ACTION, req, pb.EndTransactionResponse, timeout_s=self.timeout_s,
                                 relocate_s=min(self.timeout_s, self.retry_unavailable_s))
        return EndSummary(state=resp.state, newly_ended=resp.newly_ended, committed_count=resp.committed_count)

    def get_transaction(self, transaction_id: str, *, participants: Sequence[str] = ()) -> TransactionInfo:
        _one_group(participants)
        resp = self._call("GetTransaction", pb.GetTransactionRequest(transaction_id=transaction_id))
        return _tx_info(resp.transaction)

    def list_transactions(self, *, state: str = "PENDING", topic: str | None = None,
                          limit: int = 1000) -> list[TransactionInfo]:
        req = pb.ListTransactionsRequest(state=state, topic=topic or "", limit=limit)
        return [_tx_info(t) for t in self._call("ListTransactions", req).transactions]

    def resume_transaction(self, transaction_id: str) -> None:
        self._call("ResumeTransaction", pb.ResumeTransactionRequest(transaction_id=transaction_id))

    def checkback_session(self, producer_group: str, topics: Sequence[str],
                          handler: Callable[[CheckRequest], str]) -> "CheckbackSession":
        """Start a background stream that answers the broker's check-backs with `handler`."""
        from txmq.broker.client.checkback import CheckbackSession

        session = CheckbackSession(self, producer_group, list(topics), handler)
        session.start()
        return session

    def _open_checkback_stream(self, producer_group: str, topics: Sequence[str]):
        """The raw server stream of CheckRequestFrame (used by CheckbackSession)."""
        stub = self._callables()["CheckbackSession"]
        req = pb.CheckbackSessionRequest(producer_group=producer_group, topics=list(topics),
                                         client_id=self.client_id)
        return stub(req, metadata=self._metadata())

    # ---- consumer groups -------------------------------------------------------
    def commit_offsets(self, group: str, offsets: Mapping[str, Mapping[int, int]]) -> None:
        self._call("CommitOffsets", pb.CommitOffsetsRequest(group=group, offsets=_topic_offsets(offsets)))

    def group_lag(self, group: str, topics: Sequence[str] = ()) -> dict[str, dict[int, GroupLag]]:
        resp = self._call("GroupLag", pb.GroupLagRequest(group=group, topics=list(topics)))
        out: dict[str, dict[int, GroupLag]] = {}
        for e in resp.entries:
            out.setdefault(e.topic, {})[e.queue_id] = GroupLag(e.committed, e.max_offset, e.lag)
        return out

    def committed_offsets(self, consumer_group: str, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        """The consumer group's committed offsets (queues it never committed are absent)."""
        try:
            lag = self.group_lag(consumer_group, topics)
        except errors.ConsumerGroupNotFound:
            return {}
        return {t: {q: e.committed for q, e in qs.items() if e.committed >= 0} for t, qs in lag.items()}

    def consumer_heartbeat(self, group: str, member_id: str, ttl_ms: int, *, leave: bool = False,
                           client: str = "", queues: Iterable[tuple[str, str, int]] = ()) -> list[str]:
        """Say `member_id` of consumer group `group` is alive for `ttl_ms` (or leaves), what it is
        (`client`) and which (topic, broker group, queue id) it holds; the live members."""
        req = pb.ConsumerHeartbeatRequest(group=group, member_id=member_id, ttl_ms=ttl_ms, leave=leave, client=client,
                                          queues=[pb.HeldQueue(topic=t, group=g, queue_id=q) for t, g, q in queues])
        return list(self._call("ConsumerHeartbeat", req).members)

    def list_group_members(self, group: str) -> list[GroupMember]:
        """Consumer group `group`'s live members, by client id (native ones and RocketMQ 5 ones)."""
        resp = self._call("ListGroupMembers", pb.ListGroupMembersRequest(group=group))
        return [GroupMember(m.client_id, m.address, m.client, m.last_heartbeat_ms, m.pop,
                            tuple((q.topic, q.group, q.queue_id) for q in m.queues)) for m in resp.members]

    def cluster_status(self, group: str | None = None) -> list[GroupStatus]:
        """Every broker group's replicas (role, epoch, in sync, lag, alive), as `txmq cluster status`
        shows them; a lone broker answers one group named "" (admin only when auth is on)."""
        resp = self._call("ClusterStatus", pb.ClusterStatusRequest(group=group or ""))
        return [GroupStatus(name=g.name, leader=g.leader or None, epoch=g.epoch,
                            members=tuple(_replica_status(m) for m in g.members),
                            elections=tuple(Election(e.epoch, e.leader, e.at_ms) for e in g.elections))
                for g in resp.groups]

    def transaction_summary(self) -> tuple[list[PendingGroup], int]:
        """(PENDING transactions counted by producer group and topic, the DISCARDED count)."""
        resp = self._call("TransactionSummary", pb.TransactionSummaryRequest())
        return ([PendingGroup(p.producer_group, p.topic, p.transactions, p.oldest_age_ms, p.max_check_times)
                 for p in resp.pending], resp.discarded)

    def list_scheduled(self, *, bucket_ms: int = 0, limit: int = 50) -> ScheduledSummary:
        """The timer messages not yet delivered: how many are due per `bucket_ms` (0: the broker
        picks), and the `limit` due soonest with their recall handles (admin only when auth is on)."""
        resp = self._call("ListScheduled", pb.ScheduledRequest(bucket_ms=bucket_ms, limit=limit))
        return ScheduledSummary(resp.pending, resp.bucket_ms,
                                list(zip(resp.bucket_starts_ms, resp.bucket_counts)),
                                [ScheduledMessage(m.deliver_ms, m.topic, m.message_id, m.recall_handle)
                                 for m in resp.soonest])

    def recall_scheduled(self, topic: str, recall_handle: str) -> str:
        """Cancel a timer message not yet delivered (its send's recall handle); its message id.
        MessageNotFound when it was delivered or recalled already."""
        resp = self._call("RecallScheduled", pb.RecallScheduledRequest(topic=topic, recall_handle=recall_handle))
        return resp.message_id

    def stats(self) -> dict:
        import json

        return json.loads(self._call("Stats", pb.StatsRequest()).json or "{}")


def _replica_status(m: pb.ReplicaStatus) -> ReplicaStatus:
    def known(value):  # -1 on the wire: not reported (a replica that is down)
        return value if value >= 0 else None
    return ReplicaStatus(endpoint=m.endpoint, role=m.role, in_sync=m.in_sync, alive=m.alive,
                         log_end=known(m.log_end), lag_bytes=known(m.lag_bytes), lag_seconds=known(m.lag_seconds),
                         replica_id=m.replica_id, may_not_lead=m.may_not_lead)


def _as_table(batch: Any) -> pa.Table:
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    return to_arrow_table(batch)


def _spec_batch(messages: Sequence[Message], topic: str | None) -> pb.MessageBatch:
    specs = []
    for m in messages:
        specs.append(pb.MessageSpec(topic=m.topic or "", body=m.body, tag=m.tag or "", keys=list(m.keys),
                                    properties=send_properties(m), sharding_key=m.sharding_key or "",
                                    message_id=m.message_id or ""))
    return pb.MessageBatch(default_topic=topic or "", messages=specs)


def _one_group(participants: Sequence[str]) -> None:
    if len(set(participants)) > 1:
        raise errors.Unsupported("a client of one broker group cannot end a transaction across groups: "
                                 "use ClusterClient")
