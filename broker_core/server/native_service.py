"""The native gRPC service `txmq.native.v1.TxmqService`: a thin adapter over the core.

Each RPC converts protobuf to core calls on `core.store` / `core.engine` and
back; the rules live in the store and the transaction engine. Every handler
answers with a Status instead of raising, so a bad request (an unknown
transaction id, a malformed message) gets a typed error and the broker keeps
serving. The method table comes from `native_methods.py` (no generated stubs).

The bulk calls (`send_rows`, `prepare_rows`, `pull_stream`) take the caller's
Identity instead of a gRPC context: the Flight service (server/flight_service.py)
adapts them too, so a write or a read has one implementation whichever
transport carried it.
"""

from __future__ import annotations

import json
import logging
import queue
import time
from collections import Counter
from typing import Any, Callable, Iterable, Iterator

import grpc

from txmq.broker import errors
from txmq.broker.protocol import native_pb2 as pb
import pyarrow as pa

from txmq.broker.protocol.native_methods import NATIVE_METHODS, SERVICE_NAME, UNARY_STREAM, UNARY_UNARY
from txmq.broker.server.auth import ANONYMOUS
from txmq.broker.server.consumer_groups import GroupSettings
from txmq.broker.server.core_seam import ServiceCore
from txmq.broker.server.membership import MemberInfo
from txmq.broker.server.peers import peer_address
from txmq.broker.server.native_ingest import MessageIdGenerator, PlainRows, QueueSelector, decode_rows
from txmq.broker.store.pull_decode import empty_pull_batch
from txmq.broker.server.native_pull import (PullBatch, plan_message, pull_batch, read_plan, records_arrays,
                                            records_batch)
from txmq.broker.protocol.native_status import ok_status, status_for
from txmq.broker.server.offset_waiters import OffsetWaiters
from txmq.broker.store.property_names import user_properties
from txmq.broker.server.rpc_metrics import RpcMetrics
from txmq.broker.store.batch import BatchColumns
from txmq.broker.timer.schedule import has_delivery_time
from txmq.broker.store.message import (
    PROP_KEYS,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TAGS,
    PROP_TRANSACTION_ID,
    PROP_UNIQ_KEY,
    Message,
    StoredMessage,
)
from txmq.broker.store.metadata import TopicConfig
from txmq.broker.server.topic_types import TopicType
from txmq.broker.store.message_filter import MessageFilter
from txmq.broker.transaction.cross_records import cross_group_records
from txmq.broker.transaction.decision import cross_group_properties
from txmq.broker.transaction.state import TransactionInfo

log = logging.getLogger(__name__)

_ANONYMOUS = ANONYMOUS
# Bytes of CommitLog records per pulled batch: a batch is decoded while the one before is on the
# wire, and a reader holds one at a time.
DEFAULT_PULL_BYTES = 4 << 20
MAX_PULL_BYTES = 64 << 20
MAX_WAIT_MS = 120_000
SESSION_POLL_S = 0.5


def _resolution(value: int):
    from txmq.broker.transaction.state import Resolution

    if value == pb.COMMIT:
        return Resolution.COMMIT
    if value == pb.ROLLBACK:
        return Resolution.ROLLBACK
    raise errors.BadRequest("resolution must be COMMIT or ROLLBACK (IN_PROGRESS only answers a check-back)")


def _offsets_to_pb(offsets: dict[str, dict[int, int]]) -> list[pb.TopicOffsets]:
    return [pb.TopicOffsets(topic=topic, offsets=queues) for topic, queues in offsets.items()]


def _offsets_from_pb(items: Iterable[pb.TopicOffsets]) -> dict[str, dict[int, int]]:
    return {item.topic: dict(item.offsets) for item in items}


def message_view(m: StoredMessage | Message) -> pb.MessageView:
    """A stored message (or a half still in the engine's cache, a plain Message) for the wire."""
    props = m.properties
    keys = props.get(PROP_KEYS)
    real_queue = props.get(PROP_REAL_QUEUE_ID)
    stored = m if isinstance(m, StoredMessage) else None  # a half in the engine's cache has no place yet
    offset_id = stored.msg_id if stored is not None else ""
    return pb.MessageView(  # a half reports the topic and queue it will be committed to
        topic=props.get(PROP_REAL_TOPIC) or m.topic,
        queue_id=int(real_queue) if real_queue and real_queue.isdigit() else m.queue_id,
        queue_offset=stored.queue_offset if stored is not None else 0, message_id=props.get(PROP_UNIQ_KEY) or offset_id,
        offset_msg_id=offset_id, tag=props.get(PROP_TAGS) or "", keys=keys.split(" ") if keys else [],
        body=m.body, properties=user_properties(props), born_timestamp_ms=m.born_timestamp,
        store_timestamp_ms=stored.store_timestamp if stored is not None else 0, transaction_id=props.get(PROP_TRANSACTION_ID) or "",
    )


# How long CrossGroupCommits waits for committed records to become visible before it gives up.
VISIBLE_WAIT_S = 2.0


def transaction_view(info: TransactionInfo) -> pb.TransactionView:
    return pb.TransactionView(
        transaction_id=info.transaction_id, state=info.state.name, topics=list(info.topics),
        half_count=info.half_count, age_ms=int(info.age_s * 1000), check_times=info.checks,
        producer_group=info.producer_group, senders=list(info.senders), created_ms=info.created_ms,
        next_check_ms=info.next_check_ms, coordinator=info.coordinator, participants=list(info.participants),
    )


class NativeCheckbackSession:
    """A check-back session for the CheckbackRouter: checks pushed here go down one gRPC stream."""

    def __init__(self, producer_group: str, topics: Iterable[str], client_id: str) -> None:
        self.producer_group = producer_group
        self.topics = set(topics)
        self.client_id = client_id
        self._queue: queue.Queue = queue.Queue()
        self._alive = True

    @property
    def alive(self) -> bool:
        return self._alive

    def push(self, tx: TransactionInfo, half: StoredMessage | Message) -> bool:
        if not self._alive:
            return False
        self._queue.put((tx, half))
        return True

    def close(self) -> None:
        self._alive = False
        self._queue.put(None)

    def frames(self, is_active: Callable[[], bool]) -> Iterator[pb.CheckRequestFrame]:
        yield pb.CheckRequestFrame(registered=True, producer_group=self.producer_group, status=ok_status())
        while self._alive and is_active():
            try:
                item = self._queue.get(timeout=SESSION_POLL_S)
            except queue.Empty:
                continue
            if item is None:
                break
            tx, half = item
            try:
                frame = pb.CheckRequestFrame(
                    transaction_id=tx.transaction_id, producer_group=tx.producer_group,
                    half=message_view(half), check_times=tx.checks, status=ok_status())
            except Exception:  # one odd half must not end the producer's session
                log.exception("cannot describe half of %s for a check-back", tx.transaction_id)
                continue
            yield frame


class NativeService:
    """The RPC implementations; each takes (request, context) and returns a response message."""

    def __init__(self, core: ServiceCore, metrics: RpcMetrics | None = None) -> None:
        self.core = core
        self.store = core.store
        self.engine = core.engine
        self.selector = QueueSelector(self.store.sealed_queue_ids, self._moved_to)
        self.ids = MessageIdGenerator()
        self.waiters = OffsetWaiters(self.store)
        self.metrics = metrics if metrics is not None else core.rpc_metrics
        # (host, port, tls) of the Flight service, set by the broker once it listens
        self.data_plane: tuple[str, int, bool] | None = None
        self.closing = False  # set by the broker's stop: bulk calls in progress end at their next step

    # ---- access ------------------------------------------------------------
    def _identity(self, context):
        """The caller's Identity (ANONYMOUS when auth is off); the interceptor already verified it."""
        if not self.core.auth.enabled:
            return _ANONYMOUS
        return self.core.auth.authenticate(context.invocation_metadata())

    def _require_subscribe(self, context, topics: Iterable[str]) -> None:
        identity = self._identity(context)
        for topic in topics:
            identity.require_subscribe(topic)

    def _require_admin(self, context) -> None:
        self._identity(context).require_admin()

    def _require_group_of(self, identity, transaction_id: str) -> None:
        """Only an owner of the transaction's producer group may end or inspect it (auth on)."""
        if identity.authenticated and not identity.admin:
            info = self.engine.get(transaction_id)
            # an ended transaction keeps no producer group, and a repeat or a conflict on it writes nothing
            if not info.state.is_final:
                identity.require_producer_group(info.producer_group)

    # ---- topics ------------------------------------------------------------
    def _topic(self, name: str, *, create: bool = False):
        """The topic's config; auto-created (if the broker allows it) when `create` is set."""
        if create:
            self.core.topic_queue_count(name)
        try:
            topic = self.store.topics.get(name)
        except errors.TopicNotFound:
            topic = None
        if topic is None:
            raise errors.TopicNotFound(f"topic {name!r} does not exist")
        return topic

    def _queue_count(self, name: str) -> int:
        """Queue count of a topic written to, auto-creating it when the broker allows."""
        return self.core.topic_queue_count(name)

    def _writable_queue_count(self, identity) -> Callable[[str], int]:
        """Queue count per topic for a writer, checking its publish right before any auto-creation."""

        def queue_count(topic: str) -> int:
            identity.require_publish(topic)
            return self._queue_count(topic)
        return queue_count

    def _queue_ids(self, topic: str, with_entries: dict[str, list[int]] | None = None) -> list[int]:
        """The topic's declared queues and any other with entries (`with_entries`: the store's
        queue_ids_by_topic, read once for a call about many topics)."""
        config = self._topic(topic)
        ids = set(range(config.queue_count))
        ids.update(self.store.queue_ids(topic) if with_entries is None else with_entries.get(topic, ()))
        return sorted(ids)

    def _per_queue(self, topics: Iterable[str], fn: Callable[[str, int], int]) -> dict[str, dict[int, int]]:
        if not topics:
            raise errors.BadRequest("give at least one topic")
        return {t: {q: fn(t, q) for q in self._queue_ids(t)} for t in topics}

    def _cut(self, topics: list[str]) -> dict[str, dict[int, int]]:
        result = {t: {q: 0 for q in self._queue_ids(t)} for t in topics}
        for (topic, queue_id), offset in self.engine.consistent_cut(topics).items():
            if topic in result:
                result[topic][queue_id] = offset
        return result

    def _topic_view(self, config: TopicConfig, with_entries: dict[str, list[int]] | None = None) -> pb.TopicView:
        name = config.name
        queues = []
        for q in self._queue_ids(name, with_entries):
            queues.append(pb.QueueRange(queue_id=q, min_offset=self.store.min_offset(name, q),
                                        max_offset=self.store.max_offset(name, q)))
        return pb.TopicView(name=name, queue_count=config.queue_count, permission=int(config.permission),
                            queues=queues, message_type=self.core.topic_types.get(name).value)

    # ---- writes ------------------------------------------------------------
    def SendMessages(self, request: pb.SendRequest, context) -> pb.SendResponse:
        return self.send_rows(self._identity(context), request.batch.default_topic, None, request.batch.messages,
                              return_message_ids=request.return_message_ids)

    def PrepareMessages(self, request: pb.PrepareRequest, context) -> pb.PrepareResponse:
        return self.prepare_rows(self._identity(context), _client_id(context), request.transaction_id,
                                 request.producer_group, request.sender, request.batch.default_topic, None,
                                 request.batch.messages, return_message_ids=request.return_message_ids)

    def send_rows(self, identity, default_topic: str, table: pa.Table | None, specs,
                  *, return_message_ids: bool) -> pb.SendResponse:
        """Append Arrow rows and/or MessageSpecs as normal messages: all of them or, refused, none."""
        self._check_open()
        started = time.perf_counter()
        rows = decode_rows(default_topic, table, specs, self._writable_queue_count(identity), self.selector)
        if isinstance(rows, PlainRows):  # topic and body only: appended as columns, no Message per row
            topics, queue_ids = rows.topics, rows.queue_ids
            results = self.store.append_columns(BatchColumns.of_bodies(topics, rows.bodies, queue_ids, rows.born_ms))
        else:
            # a row with a delivery time goes to the timer's system topic (the user's were checked)
            scheduling = any(has_delivery_time(m.properties) for m in rows)
            if scheduling:
                rows = self.core.schedule(rows)
            topics, queue_ids = [m.topic for m in rows], [m.queue_id for m in rows]
            results = self.store.append(rows, allow_system=scheduling)
        self.metrics.observe("send", len(results), time.perf_counter() - started)
        return pb.SendResponse(status=ok_status(), count=len(results),
                               slices=_slices(topics, queue_ids, results.columns[0]),
                               message_ids=[r.msg_id for r in results] if return_message_ids else [])

    def prepare_rows(self, identity, client_id: str, transaction_id: str, producer_group: str, sender: str,
                     default_topic: str, table: pa.Table | None, specs,
                     *, return_message_ids: bool, participants: tuple[str, ...] = ()) -> pb.PrepareResponse:
        """Add Arrow rows and/or MessageSpecs to a transaction as halves (a new one when
        `transaction_id` is empty): all of them or, refused, none. With `participants`, the
        transaction spans those broker groups: each half names them and their coordinator."""
        self._check_open()
        started = time.perf_counter()
        identity.require_producer_group(producer_group)
        cross = {}
        if participants:
            if not transaction_id:
                raise errors.BadRequest("a transaction across groups needs its id from the start: the coordinator "
                                        "group is derived from it")
            cross = cross_group_properties(transaction_id, participants)
            group = self.core.config.group
            if group not in participants:
                raise errors.BadRequest(f"halves naming participant groups {sorted(set(participants))} were sent to "
                                        + (f"group {group!r}, not one of them" if group else "a broker in no group"))
        rows = decode_rows(default_topic, table, specs, self._writable_queue_count(identity), self.selector)
        if isinstance(rows, PlainRows):  # topic and body only: halves encoded as columns
            topics = rows.topics
            # ids only when asked for: like a plain send's rows, halves nobody names need none (their
            # finals then carry the broker's offset ids), and a half without one costs a third less
            message_ids = self.ids.next_ids(len(topics)) if return_message_ids else None
            result = self.engine.prepare_bodies(topics, rows.body_column, rows.queue_ids, message_ids,
                                                born_timestamp=rows.born_ms,
                                                transaction_id=transaction_id or None,
                                                producer_group=producer_group, sender=sender, cross=cross)
        else:
            for m in rows:
                m.properties.update(cross)
            topics = [m.topic for m in rows]
            message_ids = self.ids.assign(rows)
            result = self.engine.prepare(rows, transaction_id=transaction_id or None,
                                         producer_group=producer_group, sender=sender)
        self.metrics.observe("prepare", len(topics), time.perf_counter() - started)
        if client_id:  # check-backs of these halves go back to the client that sent them first
            for topic in set(topics):
                self.core.router.note_half(result.transaction_id, client_id, topic)
        return pb.PrepareResponse(status=ok_status(), transaction_id=result.transaction_id,
                                  count=len(result.results),
                                  message_ids=(message_ids or []) if return_message_ids else [])

    def EndTransaction(self, request: pb.EndTransactionRequest, context) -> pb.EndTransactionResponse:
        return self.end_transaction(self._identity(context), request)

    def end_transaction(self, identity, request: pb.EndTransactionRequest) -> pb.EndTransactionResponse:
        """EndTransaction for `identity`: the gRPC call's and the Flight action's one implementation."""
        started = time.perf_counter()
        if not request.transaction_id:
            raise errors.InvalidTransactionId("transaction_id is empty")
        self._require_group_of(identity, request.transaction_id)
        if request.resolution == pb.IN_PROGRESS:
            if request.source != "check":
                raise errors.BadRequest("IN_PROGRESS answers a check-back: give source \"check\"")
            state = self.engine.answer_in_progress(request.transaction_id,
                                                   producer_group=request.producer_group or None)
            return pb.EndTransactionResponse(status=ok_status(), state=state.name, newly_ended=False)
        kwargs: dict[str, Any] = {"source": request.source or "client",
                                  "producer_group": request.producer_group or None}
        if request.restrict_senders:
            kwargs["include_senders"] = list(request.include_senders)
        result = self.engine.end(request.transaction_id, _resolution(request.resolution), **kwargs)
        self.core.router.forget(request.transaction_id)
        self.metrics.observe("end", len(result.committed), time.perf_counter() - started)
        return pb.EndTransactionResponse(status=ok_status(), state=result.state.name,
                                         newly_ended=result.newly_ended, committed_count=len(result.committed))

    # ---- transactions ------------------------------------------------------
    def GetTransaction(self, request, context) -> pb.GetTransactionResponse:
        if not request.transaction_id:
            raise errors.InvalidTransactionId("transaction_id is empty")
        self._require_group_of(self._identity(context), request.transaction_id)
        info = self.engine.get(request.transaction_id)
        return pb.GetTransactionResponse(status=ok_status(), transaction=transaction_view(info))

    def ListTransactions(self, request, context) -> pb.ListTransactionsResponse:
        self._require_admin(context)
        state = (request.state or "PENDING").upper()
        limit = request.limit or 1000
        topic = request.topic or None
        from txmq.broker.transaction.state import TxState

        if state not in ("PENDING", "DISCARDED"):
            raise errors.BadRequest(f"only PENDING or DISCARDED transactions are listed, not {state!r}")
        infos = self.engine.transactions(state=TxState[state], topic=topic, limit=limit)
        return pb.ListTransactionsResponse(status=ok_status(), transactions=[transaction_view(i) for i in infos])

    def ResumeTransaction(self, request, context) -> pb.ResumeTransactionResponse:
        if not request.transaction_id:
            raise errors.InvalidTransactionId("transaction_id is empty")
        self._require_admin(context)
        self.engine.resume(request.transaction_id)
        return pb.ResumeTransactionResponse(status=ok_status())

    # ---- offsets -----------------------------------------------------------
    def _moved_to(self, topic: str, queue_id: int) -> str:
        return "" if self.core.routes is None else self.core.routes.moved_to(topic, queue_id, sealed=True)

    def _refuse_moved(self, current: Iterable[tuple[str, Iterable[int]]]) -> None:
        """QueueMoved for the first of these queues (a caller's routes place them here as current)
        that a move took to another group: its end grows there now, so the caller's routes are stale."""
        routes = self.core.routes
        sealed = self.store.sealed_queues()
        if routes is None or not sealed:
            return
        for topic, queue_ids in current:
            for q in queue_ids:
                to = routes.moved_to(topic, q, sealed=True) if (topic, q) in sealed else ""
                if to:
                    raise errors.QueueMoved(f"queue {q} of topic {topic!r} on group {routes.group} moved to group "
                                            f"{to}: refresh the routes", moved_to=to)

    def SnapshotOffsets(self, request: pb.OffsetsRequest, context) -> pb.OffsetsResponse:
        if not request.topics:
            raise errors.BadRequest("give at least one topic")
        self._require_subscribe(context, request.topics)
        self._refuse_moved((c.topic, c.queue_ids) for c in request.current)
        return pb.OffsetsResponse(status=ok_status(), topics=_offsets_to_pb(self._cut(list(request.topics))))

    def MinOffsets(self, request: pb.OffsetsRequest, context) -> pb.OffsetsResponse:
        self._require_subscribe(context, request.topics)
        offsets = self._per_queue(list(request.topics), self.store.min_offset)
        return pb.OffsetsResponse(status=ok_status(), topics=_offsets_to_pb(offsets))

    def OffsetsForTimestamp(self, request: pb.OffsetsRequest, context) -> pb.OffsetsResponse:
        self._require_subscribe(context, request.topics)
        ts = request.timestamp_ms
        offsets = self._per_queue(list(request.topics), lambda t, q: self.store.offset_for_timestamp(t, q, ts))
        return pb.OffsetsResponse(status=ok_status(), topics=_offsets_to_pb(offsets))

    def CrossGroupCommits(self, request: pb.CrossGroupCommitsRequest, context) -> pb.CrossGroupCommitsResponse:
        self._require_subscribe(context, sorted({w.topic for w in request.windows}))
        # states first, then the scan: a transaction seen COMMITTED here has its records in the scanned
        # ranges once all that was dispatched is visible (a replicated leader publishes what is confirmed)
        states = [pb.TransactionState(transaction_id=i, state=self._state_of(i)) for i in request.transaction_ids]
        if states and not self.store.wait_visible(VISIBLE_WAIT_S):
            raise errors.RequestTimeout(f"this group's replicas did not confirm its latest records within "
                                        f"{VISIBLE_WAIT_S} s: the transactions' records cannot be located yet")
        windows = []
        for w in request.windows:
            end = self.store.max_offset(w.topic, w.queue_id)
            if not w.to_end:
                if not 0 <= w.start <= w.end <= end:
                    raise errors.IllegalOffset(f"window [{w.start}, {w.end}) of {w.topic}/{w.queue_id} is not "
                                               f"within the queue [0, {end})")
                end = w.end
            windows.append((w.topic, w.queue_id, min(w.start, end), end))
        records = [pb.CrossGroupRecord(transaction_id=r.transaction_id, topic=r.topic, queue_id=r.queue_id,
                                       offset=r.offset, participants=list(r.participants))
                   for r in cross_group_records(self.store, windows, self.engine.cross_commits)]
        return pb.CrossGroupCommitsResponse(status=ok_status(), records=records, states=states)

    def _state_of(self, transaction_id: str) -> str:
        try:
            return self.engine.get(transaction_id).state.name
        except errors.UnknownTransaction:
            return "UNKNOWN"

    def CutBefore(self, request: pb.CutBeforeRequest, context) -> pb.CutBeforeResponse:
        if not request.topics:
            raise errors.BadRequest("give at least one topic")
        self._require_subscribe(context, list(request.topics))
        cut = self.store.cut_before(request.topic, request.queue_id, request.offset, list(request.topics))
        if cut is None:
            return pb.CutBeforeResponse(status=ok_status(), known=False)
        result: dict[str, dict[int, int]] = {t: {} for t in request.topics}
        for (topic, queue_id), offset in cut.items():
            result[topic][queue_id] = offset
        return pb.CutBeforeResponse(status=ok_status(), known=True, topics=_offsets_to_pb(result))

    def WaitForOffsets(self, request: pb.WaitForOffsetsRequest, context) -> pb.WaitForOffsetsResponse:
        topics = list(request.topics)
        if not topics:
            raise errors.BadRequest("give at least one topic")
        if request.timeout_ms < 0 or request.timeout_ms > MAX_WAIT_MS:
            raise errors.IllegalPollingTime(f"timeout_ms must be within 0..{MAX_WAIT_MS}, got {request.timeout_ms}")
        self._require_subscribe(context, topics)
        known = _offsets_from_pb(request.known)
        self._refuse_moved((c.topic, c.queue_ids) for c in request.current)
        deadline = time.monotonic() + request.timeout_ms / 1000.0
        moved, cut = self.waiters.wait(lambda: self._cut(topics), topics, known, deadline, context.is_active)
        return pb.WaitForOffsetsResponse(status=ok_status(), topics=_offsets_to_pb(cut), moved=moved)

    # ---- reads -------------------------------------------------------------
    def DataPlane(self, request, context) -> pb.DataPlaneResponse:
        if self.data_plane is None:
            raise errors.BrokerUnavailable("this broker serves no Flight data plane")
        host, port, tls = self.data_plane
        return pb.DataPlaneResponse(status=ok_status(), flight_host=host, flight_port=port, tls=tls)

    def pull_stream(self, identity, request: pb.PullRequest) -> Iterator[tuple[pa.RecordBatch, pb.PullProgress]]:
        """Queue range [start_offset, end_offset) as PULL_SCHEMA batches of about max_bytes of
        records each, every one with where the next starts (at least one batch, maybe empty).
        The request is checked before this returns; reading happens as the caller iterates."""
        topic, queue_id, start, end = request.topic, request.queue_id, request.start_offset, request.end_offset
        if not topic:
            raise errors.BadRequest("the pull names no topic")
        identity.require_subscribe(topic)
        config = self._topic(topic)
        if not 0 <= queue_id < config.queue_count and queue_id not in self.store.queue_ids(topic):
            raise errors.BadRequest(f"topic {topic!r} has no queue {queue_id} (it has {config.queue_count})")
        if start < 0 or end < start:
            raise errors.IllegalOffset(f"pull range [{start}, {end}) of {topic}/{queue_id} is not a range "
                                       "(0 <= start <= end)")
        top = self.store.max_offset(topic, queue_id)
        if end > top:
            raise errors.IllegalOffset(f"pull end {end} is beyond {topic}/{queue_id}'s last offset {top} "
                                       "(take ends from a consistent cut)")
        low = self.store.min_offset(topic, queue_id)
        if start < min(low, end):
            raise errors.DataDeleted(f"offsets [{start}, {low}) of {topic}/{queue_id} were deleted by retention",
                                     min_offset=low)
        if not 0 <= request.max_bytes <= MAX_PULL_BYTES:
            raise errors.BadRequest(f"max_bytes must be in [0, {MAX_PULL_BYTES}], got {request.max_bytes}")
        if request.max_batches < 0:
            raise errors.BadRequest(f"max_batches must not be negative, got {request.max_batches}")
        message_filter = MessageFilter.parse(request.tags, request.sql)
        if request.records and not message_filter.matches_all:
            raise errors.BadRequest("a records pull takes no filter (it copies a queue's records as stored)")
        plans = request.read_plans and self.core.config.local_reads and not request.records
        return self._pull_batches(topic, queue_id, start, end, request.max_bytes or DEFAULT_PULL_BYTES,
                                  request.max_batches, message_filter, plans, request.records)

    def subscribe_stream(self, identity, request: pb.SubscribeRequest,
                         is_cancelled: Callable[[], bool]) -> Iterator[tuple[pa.RecordBatch, pb.PullProgress]]:
        """A push subscription: each queue's messages from its start offset, up to a consistent cut
        and then past every new one as publishes move it, until the caller goes away
        (`is_cancelled`) or the broker stops (BrokerUnavailable). Each range is read as a pull's
        (`_pull_batches`), so a subscriber sees exactly what a pull of the same cut would; every
        batch's progress names its queue. The request is checked once, before this returns."""
        positions: dict[str, dict[int, int]] = {}
        for item in request.start:
            identity.require_subscribe(item.topic)
            queue_ids = self._queue_ids(item.topic)
            for queue_id, offset in item.offsets.items():
                if queue_id not in queue_ids:
                    raise errors.BadRequest(f"topic {item.topic!r} has no queue {queue_id}")
                if offset < 0:
                    raise errors.IllegalOffset(f"start offset of {item.topic}/{queue_id} is negative: {offset}")
            positions.setdefault(item.topic, {}).update(item.offsets)
        if not any(positions.values()):
            raise errors.BadRequest("a subscription names no queue: give start offsets per topic and queue")
        if not 0 <= request.max_bytes <= MAX_PULL_BYTES:
            raise errors.BadRequest(f"max_bytes must be in [0, {MAX_PULL_BYTES}], got {request.max_bytes}")
        message_filter = MessageFilter.parse(request.tags, request.sql)  # a bad one fails the call, not a batch
        return self._pushed_batches(positions, message_filter, request.max_bytes or DEFAULT_PULL_BYTES,
                                    is_cancelled)

    def _pushed_batches(self, positions: dict[str, dict[int, int]], message_filter: MessageFilter, max_bytes: int,
                        is_cancelled: Callable[[], bool]) -> Iterator[tuple[pa.RecordBatch, pb.PullProgress]]:
        topics = list(positions)

        def active() -> bool:
            return not self.closing and not is_cancelled()

        def cut_of_subscribed() -> dict[str, dict[int, int]]:
            whole = self._cut(topics)
            return {t: {q: whole.get(t, {}).get(q, 0) for q in queues} for t, queues in positions.items()}

        cut = cut_of_subscribed()
        while True:
            for topic, queues in positions.items():
                for queue_id, pos in queues.items():
                    end = cut.get(topic, {}).get(queue_id, 0)
                    if pos >= end:
                        continue
                    # a range of the cut, checked with the subscription: no pull request to check again
                    started = time.perf_counter()
                    for batch, progress in self._pull_batches(topic, queue_id, pos, end, max_bytes, 0,
                                                              message_filter, False):
                        progress.topic, progress.queue_id = topic, queue_id
                        queues[queue_id] = progress.next_offset
                        self.metrics.observe("push", batch.num_rows, time.perf_counter() - started)
                        yield batch, progress  # resumes once the batch is on the wire (flow control)
                        started = time.perf_counter()
            # woken by the store's next dispatch; the liveness checks notice a consumer that went away
            _, cut = self.waiters.wait(cut_of_subscribed, topics, positions, time.monotonic() + MAX_WAIT_MS / 1000,
                                       active)
            self._check_open()
            if is_cancelled():
                return

    def _pull_batches(self, topic: str, queue_id: int, start: int, end: int, max_bytes: int, max_batches: int,
                      message_filter: MessageFilter, plans: bool,
                      records: bool = False) -> Iterator[tuple[pa.RecordBatch, pb.PullProgress]]:
        if start == end:
            empty = records_arrays((), ()) if records else empty_pull_batch()
            yield empty, pb.PullProgress(next_offset=end, min_offset=self.store.min_offset(topic, queue_id),
                                         max_offset=self.store.max_offset(topic, queue_id))
            return
        pos, sent = start, 0
        while pos < end and (max_batches == 0 or sent < max_batches):
            self._check_open()
            started = time.perf_counter()
            plan = read_plan(self.store, topic, queue_id, pos, end - pos, max_bytes=max_bytes,
                             message_filter=message_filter) if plans else None
            if plan is not None:  # a same-host client decodes these records itself
                batch = empty_pull_batch()
                progress = pb.PullProgress(next_offset=plan.next_offset, min_offset=plan.min_offset,
                                           max_offset=plan.max_offset, plan=plan_message(plan))
                self.metrics.observe("pull_plan", len(plan.phys), time.perf_counter() - started)
            else:
                read: PullBatch = (records_batch(self.store, topic, queue_id, pos, end - pos, max_bytes=max_bytes)
                                   if records else
                                   pull_batch(self.store, topic, queue_id, pos, end - pos, max_bytes=max_bytes,
                                              message_filter=message_filter))
                batch = read.batch
                progress = pb.PullProgress(next_offset=read.next_offset, min_offset=read.min_offset,
                                           max_offset=read.max_offset)
                self.metrics.observe("pull", batch.num_rows, time.perf_counter() - started)
            assert pos < progress.next_offset <= end, f"a read of {topic}/{queue_id} at {pos} left [{pos}, {end}]"
            pos, sent = progress.next_offset, sent + 1
            yield batch, progress

    def _check_open(self) -> None:
        if self.closing:
            raise errors.BrokerUnavailable("the broker is shutting down")

    def flight_endpoints(self, identity, topic: str) -> list[pb.PullRequest]:
        """One ticket per queue of `topic`, from its first readable offset to a consistent cut:
        what a plain Flight client reads to get the topic's committed messages."""
        identity.require_subscribe(topic)
        cut = self._cut([topic])[topic]
        return [pb.PullRequest(topic=topic, queue_id=q, start_offset=min(self.store.min_offset(topic, q), end),
                               end_offset=end) for q, end in sorted(cut.items())]

    def GetMessage(self, request, context) -> pb.GetMessageResponse:
        if not request.message_id:
            raise errors.IllegalMessageId("message_id is empty")
        found = self.store.get_by_message_id(request.message_id)
        self._require_subscribe(context, [found.topic])
        return pb.GetMessageResponse(status=ok_status(), message=message_view(found))

    def QueryMessages(self, request, context) -> pb.QueryMessagesResponse:
        if not request.topic or not request.key:
            raise errors.BadRequest("query needs a topic and a key")
        self._require_subscribe(context, [request.topic])
        found = self.store.query_by_key(request.topic, request.key, begin_ms=request.begin_ms,
                                        end_ms=request.end_ms or None, max_count=request.max_count or 64)
        return pb.QueryMessagesResponse(status=ok_status(), messages=[message_view(m) for m in found])

    # ---- check-back --------------------------------------------------------
    def CheckbackSession(self, request, context) -> Iterator[pb.CheckRequestFrame]:
        if not request.producer_group and not request.topics:
            raise errors.BadRequest("a check-back session needs a producer group or topics")
        self._identity(context).require_producer_group(request.producer_group, "check-back session")
        session = NativeCheckbackSession(request.producer_group, request.topics, request.client_id)
        context.add_callback(session.close)
        router = self.core.router
        router.register(session)
        try:
            yield from session.frames(context.is_active)
        finally:
            session.close()
            router.unregister(session)

    # ---- admin -------------------------------------------------------------
    def CreateTopic(self, request, context) -> pb.TopicResponse:
        self._require_admin(context)
        if not request.name:
            raise errors.IllegalTopic("topic name is empty")
        queue_count = request.queue_count or self.core.config.default_queue_count
        if queue_count < 0:
            raise errors.BadRequest(f"queue_count must be positive, got {queue_count}")
        topic_type = TopicType.parse(request.message_type) if request.message_type else None
        routes = self.core.routes
        if routes is not None and not request.group_only:
            # a cluster topic: its queues spread over the groups, this group creating its share
            layout = routes.create_topic(request.name, queue_count, topic_type.value if topic_type else "")
            # the view of this group's share, counting the whole topic's queues (Routes lists where they are)
            view = (self._topic_view(self._topic(request.name)) if self.store.topics.exists(request.name)
                    else pb.TopicView(name=request.name, message_type=layout.message_type or "MIXED"))
            view.queue_count = len(layout.queues)
            return pb.TopicResponse(status=ok_status(), topic=view)
        if routes is not None:  # another group registered this topic: route it from now on
            routes.refresh()
            self.store.seal_queues(*routes.sealed())  # before the queues exist: one a history copy fills takes no send
        config = self.store.topics.create(request.name, queue_count)
        if topic_type is not None:
            self.core.topic_types.set(request.name, topic_type)
        return pb.TopicResponse(status=ok_status(), topic=self._topic_view(config))

    def ConsumerHeartbeat(self, request, context) -> pb.ConsumerHeartbeatResponse:
        self._identity(context)  # signed like every call when auth is on
        info = MemberInfo(address=peer_address(context.peer()), client=request.client,
                          last_heartbeat_ms=int(time.time() * 1000),
                          queues=tuple((q.topic, q.group, q.queue_id) for q in request.queues))
        members = self.core.membership.heartbeat(request.group, request.member_id, request.ttl_ms,
                                                 leave=request.leave, info=info)
        return pb.ConsumerHeartbeatResponse(status=ok_status(), members=members)

    def ListGroupMembers(self, request, context) -> pb.ListGroupMembersResponse:
        self._identity(context)
        if not request.group:
            raise errors.BadRequest("ListGroupMembers names no consumer group")
        members = self.core.membership.members(request.group)
        return pb.ListGroupMembersResponse(status=ok_status(), members=[
            pb.GroupMember(client_id=m, address=i.address, client=i.client, last_heartbeat_ms=i.last_heartbeat_ms,
                           pop=i.pop, queues=[pb.HeldQueue(topic=t, group=g, queue_id=q) for t, g, q in i.queues])
            for m, i in members.items()])

    def Routes(self, request, context) -> pb.RoutesResponse:
        identity = self._identity(context)
        for topic in request.topics:
            if not (identity.may_subscribe(topic) or identity.may_publish(topic)):
                identity.require_subscribe(topic)
        routes = self.core.routes
        if routes is None:  # one group, unnamed, holding every queue of its topics
            host, port = self.core.advertised or self.core.config.listen_host_port
            me = f"{host}:{port}"
            names = list(request.topics) or [t.name for t in self.store.topics.list()]
            with_entries = self.store.queue_ids_by_topic()
            topics = [pb.TopicRoute(name=n, message_type=self.core.topic_types.get(n).value,
                                    queues=[pb.QueueRoute(group="", queue_id=q) for q in self._queue_ids(n, with_entries)])
                      for n in names]
            return pb.RoutesResponse(status=ok_status(), cluster=False, topics=topics,
                                     groups=[pb.GroupRoute(name="", leader=me, endpoints=[me])])
        layouts = routes.topics()
        with_entries = self.store.queue_ids_by_topic()
        topics = []
        for name in list(request.topics) or sorted(layouts):
            layout = routes.topic(name)
            if layout is not None:
                queues = [pb.QueueRoute(group=q.group, queue_id=q.queue_id, sealing=q.sealing,
                                        moves=[pb.QueueSegment(group=m.group, queue_id=m.queue_id, base=m.base)
                                               for m in q.moves])
                          for q in layout.queues]
                mtype = layout.message_type
            else:  # a topic of this group alone (auto-created by a send, or made before the cluster)
                queues = [pb.QueueRoute(group=routes.group, queue_id=q) for q in self._queue_ids(name, with_entries)]
                mtype = self.core.topic_types.get(name).value
            topics.append(pb.TopicRoute(name=name, queues=queues, message_type=mtype))
        groups = [pb.GroupRoute(name=g.name, leader=g.leader or "", endpoints=list(g.endpoints), retired=g.retired)
                  for g in routes.groups().values()]
        return pb.RoutesResponse(status=ok_status(), cluster=True, groups=groups, topics=topics)

    def SealQueue(self, request, context) -> pb.SealQueueResponse:
        """A move's seal of this group's queue (cluster/moves.py): refuse new writes to it, wait for
        the halves it holds to end, answer its end once acknowledged; or release the seal."""
        self._require_admin(context)
        if self.core.moves is None:
            raise errors.Unsupported("queues move only between the groups of a cluster")
        self._topic(request.topic)
        if request.release:  # a move rolled back: the registry, read afresh, says what stays sealed
            self.store.hold_seal(request.topic, request.queue_id, False)
            routes = self.core.routes
            if routes is not None:
                routes.refresh()
                self.store.seal_queues(*routes.sealed())
            return pb.SealQueueResponse(status=ok_status())
        wait_s = (request.wait_ms or 30_000) / 1000.0
        self.store.hold_seal(request.topic, request.queue_id)
        self.engine.settle_queue(request.topic, request.queue_id, wait_s)
        end = self.store.sealed_end(request.topic, request.queue_id, wait_s)
        key = (request.topic, request.queue_id)
        self.core.pop.flush_offsets()  # the pop consumers' acks so far travel with the queue too
        offsets = {g: held[key] for g in self.store.offsets.groups() if key in (held := self.store.offsets.group(g))}
        return pb.SealQueueResponse(status=ok_status(), end_offset=end, consumer_offsets=offsets)

    def MoveQueues(self, request, context) -> pb.MoveQueuesResponse:
        """Move a queue, even out a topic or drain a group (cluster/moves.py), from this broker."""
        self._require_admin(context)
        moves = self.core.moves
        if moves is None:
            raise errors.Unsupported("queues move only between the groups of a cluster (brokers with --etcd)")
        from txmq.broker.cluster.copier import DEFAULT_RATE
        result = moves.run(topic=request.topic, queue=request.queue, to=request.to, even=request.even,
                           drain=request.drain, dry_run=request.dry_run,
                           wait_s=(request.wait_ms or 30_000) / 1000.0,
                           rate=request.rate if request.HasField("rate") else DEFAULT_RATE,
                           keep_history=request.keep_history,
                           copy_wait_s=(request.copy_wait_ms if request.HasField("copy_wait_ms") else 600_000) / 1000.0)
        return pb.MoveQueuesResponse(status=ok_status(), json=json.dumps(result))

    def ListTopics(self, request, context) -> pb.ListTopicsResponse:
        identity = self._identity(context)
        with_entries = self.store.queue_ids_by_topic()
        views = [self._topic_view(t, with_entries) for t in self.store.topics.list(include_system=request.include_system)
                 if identity.may_subscribe(t.name) or identity.may_publish(t.name)]
        return pb.ListTopicsResponse(status=ok_status(), topics=views)

    def DescribeTopic(self, request, context) -> pb.TopicResponse:
        self._require_subscribe(context, [request.name])
        return pb.TopicResponse(status=ok_status(), topic=self._topic_view(self._topic(request.name)))

    def DeleteTopic(self, request, context) -> pb.DeleteTopicResponse:
        self._require_admin(context)
        self._topic(request.name)
        self.store.topics.delete(request.name)
        self.core.topic_types.forget(request.name)
        return pb.DeleteTopicResponse(status=ok_status())

    # ---- consumer groups ---------------------------------------------------
    def UpdateConsumerGroup(self, request, context) -> pb.ConsumerGroupResponse:
        self._require_admin(context)
        settings = self.core.consumer_groups.update(
            request.name, fifo=request.fifo if request.HasField("fifo") else None,
            retry_max_times=request.retry_max_times if request.HasField("retry_max_times") else None,
            must_exist=request.must_exist)
        return pb.ConsumerGroupResponse(status=ok_status(), group=_group_view(settings))

    def DescribeConsumerGroup(self, request, context) -> pb.ConsumerGroupResponse:
        self._identity(context)  # signed like every call when auth is on
        settings = self.core.consumer_groups.describe(request.name)
        return pb.ConsumerGroupResponse(status=ok_status(), group=_group_view(settings))

    def ListConsumerGroups(self, request, context) -> pb.ListConsumerGroupsResponse:
        self._identity(context)
        # as Kafka's ListGroups: a group is known by its settings, its committed offsets or its live members
        groups = self.core.consumer_groups
        names = {g.name for g in groups.list()} | set(self.store.offsets.groups()) | set(self.core.membership.groups())
        return pb.ListConsumerGroupsResponse(status=ok_status(),
                                             groups=[_group_view(groups.get(n)) for n in sorted(names)])

    def DeleteConsumerGroup(self, request, context) -> pb.DeleteConsumerGroupResponse:
        self._require_admin(context)
        self.core.consumer_groups.delete(request.name)
        return pb.DeleteConsumerGroupResponse(status=ok_status())

    def CommitOffsets(self, request, context) -> pb.CommitOffsetsResponse:
        if not request.group:
            raise errors.IllegalConsumerGroup("consumer group is empty")
        self._require_subscribe(context, [item.topic for item in request.offsets])
        for item in request.offsets:
            for queue_id, offset in item.offsets.items():
                if offset < 0:
                    raise errors.IllegalOffset(f"offset for {item.topic}/{queue_id} is negative: {offset}")
        offsets = {(item.topic, q): o for item in request.offsets for q, o in item.offsets.items()}
        if offsets:
            self.store.offsets.commit_many(request.group, offsets)
        return pb.CommitOffsetsResponse(status=ok_status())

    def GroupLag(self, request, context) -> pb.GroupLagResponse:
        if not request.group:
            raise errors.IllegalConsumerGroup("consumer group is empty")
        committed = self.store.offsets.group(request.group)
        topics = list(request.topics) or sorted({t for t, _ in committed})
        self._require_subscribe(context, topics)
        if not topics:
            raise errors.ConsumerGroupNotFound(f"consumer group {request.group!r} has no committed offsets")
        entries = []
        for topic in topics:
            for q in self._queue_ids(topic):
                done = committed.get((topic, q), -1)
                top = self.store.max_offset(topic, q)
                entries.append(pb.GroupLagEntry(topic=topic, queue_id=q, committed=done, max_offset=top,
                                                lag=top - max(done, self.store.min_offset(topic, q), 0)))
        return pb.GroupLagResponse(status=ok_status(), entries=entries)

    def Stats(self, request, context) -> pb.StatsResponse:
        self._require_admin(context)
        data = {"store": self.store.stats(), "transactions": self.engine.metrics.snapshot(),
                "rpc": self.metrics.snapshot()}
        if self.core.moves is not None:
            data["moves"] = {**self.core.moves.status(),
                             "sealed_queues": sorted(f"{t}:{q}" for t, q in self.store.sealed_queues())}
        return pb.StatsResponse(status=ok_status(), json=json.dumps(data, default=str))

    def ClusterStatus(self, request, context) -> pb.ClusterStatusResponse:
        """Each group's replicas as etcd records them (what `txmq cluster status` prints); a lone
        broker is one group named "" whose one replica leads."""
        self._require_admin(context)
        if not self.core.config.etcd:
            host, port = self.core.advertised or self.core.config.listen_host_port
            me = pb.ReplicaStatus(endpoint=f"{host}:{port}", role="leader", in_sync=True, alive=True,
                                  log_end=int(self.store.stats()["commitlog_max_offset"]),
                                  lag_bytes=0, lag_seconds=0.0)
            return pb.ClusterStatusResponse(status=ok_status(), cluster=False,
                                            groups=[pb.GroupStatus(name="", leader=me.endpoint, members=[me])])
        from txmq.broker.cluster.coordination import CoordinationUnavailable, cluster_status

        try:
            data = cluster_status(self.core.config.etcd_endpoints, request.group or None)
        except CoordinationUnavailable as exc:
            raise errors.BrokerUnavailable(f"etcd: {exc}") from None
        groups = [pb.GroupStatus(name=name, leader=g["leader"] or "", epoch=g["epoch"] or 0,
                                 members=[_replica_status(m) for m in g["members"]],
                                 elections=[pb.Election(epoch=e["epoch"], leader=e["endpoint"], at_ms=e["at_ms"])
                                            for e in g.get("elections", ())])
                  for name, g in sorted(data["groups"].items())]
        return pb.ClusterStatusResponse(status=ok_status(), cluster=True, groups=groups)

    def TransactionSummary(self, request, context) -> pb.TransactionSummaryResponse:
        self._require_admin(context)
        counts, discarded = self.engine.pending_summary()
        pending = [pb.PendingGroup(producer_group=group, topic=topic, transactions=c.transactions,
                                   oldest_age_ms=c.oldest_age_ms, max_check_times=c.max_check_times)
                   for (group, topic), c in sorted(counts.items())]
        return pb.TransactionSummaryResponse(status=ok_status(), pending=pending, discarded=discarded)

    def ListScheduled(self, request, context) -> pb.ScheduledResponse:
        self._require_admin(context)
        view = self.core.timer.scheduled(bucket_ms=max(0, request.bucket_ms), limit=max(0, request.limit))
        return pb.ScheduledResponse(
            status=ok_status(), pending=view.pending, bucket_ms=view.bucket_ms,
            bucket_starts_ms=[b for b, _ in view.buckets], bucket_counts=[c for _, c in view.buckets],
            soonest=[pb.ScheduledMessageView(deliver_ms=m.deliver_ms, topic=m.topic, message_id=m.message_id,
                                             recall_handle=m.recall_handle) for m in view.soonest])

    def RecallScheduled(self, request, context) -> pb.RecallScheduledResponse:
        """Cancel a scheduled message (RocketMQ 5's RecallMessage, natively): a producer of its topic may."""
        self._identity(context).require_publish(request.topic)
        message_id = self.core.timer.recall(request.recall_handle, request.topic)
        return pb.RecallScheduledResponse(status=ok_status(), message_id=message_id)


def _replica_status(m: dict) -> pb.ReplicaStatus:
    unknown = -1  # not reported (a replica that is down): the client reads it as None
    return pb.ReplicaStatus(endpoint=m["endpoint"], role=m["role"], in_sync=m["in_sync"], alive=m["alive"],
                            log_end=m["log_end"] if m["log_end"] is not None else unknown,
                            lag_bytes=m["lag_bytes"] if m["lag_bytes"] is not None else unknown,
                            lag_seconds=m["lag_seconds"] if m["lag_seconds"] is not None else unknown,
                            replica_id=str(m.get("replica_id") or ""), may_not_lead=str(m.get("may_not_lead", "")))


def _group_view(settings: GroupSettings) -> pb.ConsumerGroupView:
    return pb.ConsumerGroupView(name=settings.name, fifo=settings.fifo, retry_max_times=settings.retry_max_times,
                                max_delivery_attempts=settings.max_delivery_attempts)


def _client_id(context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return value
    return ""


def _slices(topics: list[str], queue_ids: list[int], queue_offsets: list[int]) -> list[pb.QueueSlice]:
    """Where a send's messages landed, per queue, from the append's columns (not its
    AppendResults, whose offset message ids a send not asking for ids never reads). One append gives each queue consecutive offsets, so a
    queue's first is its last minus its count plus one."""
    assert len(topics) == len(queue_ids) == len(queue_offsets), "zip would drop a send's last messages"
    keys = list(zip(topics, queue_ids))
    counts = Counter(keys)
    last = dict(zip(keys, queue_offsets))
    return [pb.QueueSlice(topic=topic, queue_id=queue_id, first_offset=last[(topic, queue_id)] - n + 1, count=n)
            for (topic, queue_id), n in counts.items()]


def unary_answering(fn: Callable, response_class: type, service: str = "native") -> Callable:
    """`fn` as a unary handler of a service answering with a native Status: every failure becomes
    the Status of its typed error (the one place errors meet codes), unexpected ones logged."""
    def handle(request, context):
        try:
            return fn(request, context)
        except Exception as exc:  # every failure becomes a Status the client can read
            if not isinstance(exc, errors.TxmqError):
                log.exception("%s %s failed", service, fn.__name__)
            return response_class(status=status_for(exc))
    handle.__name__ = fn.__name__
    return handle


def _stream(fn: Callable, response_class: type) -> Callable:
    def handle(request, context):
        try:
            yield from fn(request, context)
        except Exception as exc:
            if not isinstance(exc, errors.TxmqError):
                log.exception("native %s failed", fn.__name__)
            yield response_class(status=status_for(exc))
    handle.__name__ = fn.__name__
    return handle


def build_native_handler(service: "NativeService") -> grpc.GenericRpcHandler:
    """The generic handler serving TxmqService over `service`."""
    return grpc.method_handlers_generic_handler(SERVICE_NAME, native_method_handlers(service))


def native_method_handlers(service: "NativeService") -> dict[str, grpc.RpcMethodHandler]:
    """{method name: handler} of TxmqService over `service`, for `add_registered_method_handlers`."""
    handlers = {}
    for method in NATIVE_METHODS:
        impl = getattr(service, method.name)  # the method table names the RPCs: a lookup by name is the dispatch
        if method.kind == UNARY_UNARY:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                unary_answering(impl, method.response_class), request_deserializer=method.request_class.FromString,
                response_serializer=method.response_class.SerializeToString)
        elif method.kind == UNARY_STREAM:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _stream(impl, method.response_class), request_deserializer=method.request_class.FromString,
                response_serializer=method.response_class.SerializeToString)
        else:  # pragma: no cover - the .proto has no client-streaming RPCs
            raise RuntimeError(f"unsupported RPC kind {method.kind} for {method.path}")
    return handlers
