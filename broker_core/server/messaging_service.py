"""The RocketMQ 5 `apache.rocketmq.v2.MessagingService`, as thin adapters over the broker core.

Each RPC converts protobuf to core types, calls the store, the transaction
engine or the pop service, and converts back. Every response carries a
`status`: errors are caught at one place (`_unary` / `_streaming`) and mapped
by `status.py`, so a bad request, a refused transaction or even a bug becomes a
status with an explanatory message and the broker keeps serving. Requests
whose bytes do not parse are answered with BAD_REQUEST the same way.

Per-call work is kept small: metadata is read once, auth (when on) caches
verified headers, and queue selection is a counter or a CRC.
"""

from __future__ import annotations

import itertools
import logging
import time
import zlib
from concurrent import futures
from typing import Callable, Iterator

import grpc

from txmq.broker.errors import (BadRequest, IllegalDeliveryTime, IllegalInvisibleTime, IllegalOffset,
                                IllegalPollingTime, IllegalQueue, InvalidTransactionId, MessageCorrupted,
                                QueueSealed, Unsupported)
from txmq.broker.protocol import rocketmq_v2_pb2 as pb
from txmq.broker.protocol.rocketmq_methods import (ROCKETMQ_METHODS, STREAM_STREAM,
                                                   UNARY_STREAM, UNARY_UNARY)
from txmq.broker.protocol import status as st
from txmq.broker.store.message import PROP_TIMER_DELIVER_MS, TIMER_TOPIC
from txmq.broker.timer.service import recall_handle
from txmq.broker.server.convert import (check_group, check_topic, delivery_timestamp_ms, message_type_of,
                                        to_store_message, to_wire_message)
from txmq.broker.server.moved_queues import queue_base, to_physical, to_stored
from txmq.broker.server.pop import parse_filter
from txmq.broker.store.message_filter import MessageFilter
from txmq.broker.server.short_calls import run_on
from txmq.broker.server.telemetry import serve_telemetry
from txmq.broker.server.topic_types import TopicType, check_accepts
from txmq.broker.transaction.state import Resolution
from txmq.broker.server.core_seam import ServiceCore
from txmq.broker.server.membership import MemberInfo
from txmq.broker.server.peers import peer_address

# RocketMQ 5 clients heartbeat every 10 s: a member missing three is gone
POP_MEMBER_TTL_MS = 30_000
POP_CONSUMERS = frozenset((pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER))

log = logging.getLogger("txmq.broker.rocketmq")

OK_STATUS = st.ok()  # copied into each response by protobuf; built once instead of per call
# The proxy's limits on a receive (ProxyConfig, ProxyUtils): at most 32 messages; a long poll the call's
# deadline sets is held within 5..20 s; a client whose Settings name no request timeout has the
# clients' default of 3 s.
MAX_RECEIVE_BATCH = 32
MIN_DEADLINE_POLL_MS = 5_000
MAX_DEADLINE_POLL_MS = 20_000
DEFAULT_REQUEST_TIMEOUT_MS = 3_000
_MAX_REMEMBERED_CLIENTS = 100_000


def _end_responses() -> dict[tuple[str, bool], pb.EndTransactionResponse]:
    """Every EndTransaction answer there can be (state x first ending), built once and shared:
    gRPC only serializes a response, so one immutable instance serves all calls."""
    from txmq.broker.transaction.state import TxState

    return {(state.name, newly): pb.EndTransactionResponse(
                status=st.ok(state.name if newly else f"already {state.name}"))
            for state in TxState for newly in (True, False)}


_END_RESPONSES = _end_responses()


class Undecodable:
    """Stands in for a request whose bytes are not a valid protobuf message."""

    def __init__(self, cls: type, error: Exception) -> None:
        self.text = f"request bytes are not a valid {cls.DESCRIPTOR.name}: {error}"

    def __str__(self) -> str:
        return self.text


def _deserializer(cls: type) -> Callable[[bytes], object]:
    def parse(data: bytes):
        try:
            return cls.FromString(data)
        except Exception as exc:  # DecodeError, RecursionError on hostile nesting, ...
            return Undecodable(cls, exc)
    return parse


class Call:
    """What a handler knows about its caller: identity, client id, peer.

    The client id is looked up in the metadata only when a handler asks for it
    (transactional sends and telemetry do; most calls never need it).
    """

    __slots__ = ("context", "metadata", "identity", "_client_id")

    def __init__(self, core: ServiceCore, context: grpc.ServicerContext) -> None:
        self.context = context
        self.metadata = context.invocation_metadata() or ()
        self._client_id: str | None = None
        self.identity = core.auth.authenticate(self.metadata)

    @property
    def peer_host(self) -> str:
        """The caller's address as host:port (gRPC's peer is 'ipv4:h:p', 'ipv6:[h]:p' or 'unix:...')."""
        return peer_address(self.context.peer())

    def header(self, name: str) -> str:
        """The first value of metadata key `name` as text ("" when absent)."""
        for key, value in self.metadata:
            if key == name:
                return value if isinstance(value, str) else value.decode(errors="replace")
        return ""

    @property
    def client_id(self) -> str:
        if self._client_id is None:
            client_id = ""
            for key, value in self.metadata:
                if key == "x-mq-client-id":
                    client_id = value if isinstance(value, str) else value.decode(errors="replace")
                    break
            self._client_id = client_id
        return self._client_id


def wire_filter(expression: pb.FilterExpression) -> MessageFilter | None:
    """The filter of a receive or pull: a tag expression (TAG, or no type) or SQL92 (SQL)."""
    return parse_filter("SQL92" if expression.type == pb.SQL else "TAG", expression.expression)


def _duration_ms(d) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def _endpoints_of(host_port: str) -> pb.Endpoints:
    host, _, port = host_port.rpartition(":")
    scheme = pb.IPv6 if ":" in host else (pb.IPv4 if host.replace(".", "").isdigit() else pb.DOMAIN_NAME)
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=int(port))])


def spread(endpoints: pb.Endpoints, k: int) -> pb.Endpoints:
    """Queue `k`'s list of a group's replicas, so that an official client's queues go through
    different replicas. A client keeps a channel per list and gRPC's pick_first sticks to the
    first address that answers; the Python client (5.1.2) keys its channels by the list's
    addresses sorted as "host:port" strings, so lists that only differ in order are one channel,
    pinned to the lowest address, and a replica alive but cut from its leader stops its every send.
    So queue k lists the addresses in that sorted order from the (k mod n-1)-th on: the lists
    differ as sets, each begins at another replica for either kind of client, and each keeps at
    least one more address to fall back on (a group of two has one list)."""
    n = len(endpoints.addresses)
    if n < 3:
        return endpoints
    ordered = sorted(endpoints.addresses, key=lambda a: f"{a.host}:{a.port}")
    out = pb.Endpoints(scheme=endpoints.scheme)
    out.addresses.extend(ordered[k % (n - 1):])
    assert len(out.addresses) >= 2, "every queue keeps an address to fall back on"
    return out


class MessagingService:
    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.store = core.store
        self.engine = core.engine
        self.pop = core.pop
        self.config = core.config
        self._round_robin: dict[str, itertools.count] = {}
        # client id -> the request timeout its Settings named (ms): a receive's long poll leaves half
        # of it before the call's deadline, as the proxy does
        self._request_timeouts: dict[str, int] = {}

    def _listen_port(self) -> int:
        advertised = self.core.advertised
        return advertised[1] if advertised else 0

    # --- routes -----------------------------------------------------------------

    def _endpoints(self, requested: pb.Endpoints | None) -> pb.Endpoints:
        advertised = self.core.advertised
        if not self.config.advertised_host and requested is not None and requested.addresses:
            out = pb.Endpoints()
            out.CopyFrom(requested)
            if out.scheme == pb.ADDRESS_SCHEME_UNSPECIFIED:
                out.scheme = pb.IPv4
            return out
        host, port = advertised or self.config.listen_host_port
        scheme = pb.IPv6 if ":" in host else (pb.IPv4 if host.replace(".", "").isdigit() else pb.DOMAIN_NAME)
        return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])

    def _queues(self, topic_res: pb.Resource, count: int, endpoints: pb.Endpoints, *,
                accepted: tuple[int, ...] = ()) -> list[pb.MessageQueue]:
        # a group's replicas are one RocketMQ broker, named for the group; each queue lists them
        # from another one (spread)
        name = self.config.group or self.config.broker_name
        topic = pb.Resource(name=topic_res.name, resource_namespace=topic_res.resource_namespace)
        return [pb.MessageQueue(topic=topic, id=i, permission=pb.READ_WRITE,
                                broker=pb.Broker(name=name, id=0, endpoints=spread(endpoints, i)),
                                accept_message_types=accepted) for i in range(count)]

    def _cluster_brokers(self, topic: str, requested: pb.Endpoints | None) -> list[tuple[pb.Broker, dict[int, bool]]]:
        """In a cluster, each group holding queues of a registered `topic` (with a leader now) as
        a RocketMQ broker named for the group, with its physical queue ids, each writable or not
        (a queue moved away stays readable where its history lies); [] for any other topic."""
        routes = self.core.routes
        layout = routes.topic(topic) if routes is not None else None
        if layout is None:
            return []
        groups = routes.groups()
        out = []
        for name in sorted({s.group for q in layout.queues for s in q.segments}):
            route = groups.get(name)
            if route is None or not route.leader:
                continue  # a group electing a leader is left out until it has one
            endpoints = (self._endpoints(requested) if name == routes.group
                         else _endpoints_of(route.leader))
            out.append((pb.Broker(name=name, id=0, endpoints=endpoints), layout.physical(name)))
        return out

    def QueryRoute(self, req: pb.QueryRouteRequest, call: Call) -> pb.QueryRouteResponse:
        topic = check_topic(req.topic.name)
        if not (call.identity.may_publish(topic) or call.identity.may_subscribe(topic)):
            call.identity.require_publish(topic)
        cluster = self._cluster_brokers(topic, req.endpoints)
        if cluster:
            mtype = self.core.routes.topic(topic).message_type
            accepted = (TopicType.parse(mtype) if mtype else TopicType.MIXED).accepted
            res = pb.Resource(name=req.topic.name, resource_namespace=req.topic.resource_namespace)
            queues = [pb.MessageQueue(topic=res, id=q, permission=pb.READ_WRITE if writable else pb.READ,
                                      broker=pb.Broker(name=broker.name, id=0, endpoints=spread(broker.endpoints, k)),
                                      accept_message_types=accepted)
                      for broker, ids in cluster for k, (q, writable) in enumerate(sorted(ids.items()))]
            return pb.QueryRouteResponse(status=st.ok(), message_queues=queues)
        count = self.core.topic_queue_count(topic)
        # each queue announces the topic's type, as the proxy does: producers refuse any other
        accepted = self.core.topic_types.get(topic).accepted
        queues = self._queues(req.topic, count, self._endpoints(req.endpoints), accepted=accepted)
        return pb.QueryRouteResponse(status=st.ok(), message_queues=queues)

    def QueryAssignment(self, req: pb.QueryAssignmentRequest, call: Call) -> pb.QueryAssignmentResponse:
        topic = check_topic(req.topic.name)
        group = check_group(req.group.name)
        call.identity.require_subscribe(topic)
        # Pop consumption spans every queue of the topic, so (like RocketMQ's proxy)
        # one assignment per broker with queue id -1 is enough: a push consumer then
        # holds one long poll per topic instead of one per queue. A FIFO group gets one
        # assignment per queue, as from the proxy: its consumers pop queue by queue.
        fifo = self.core.consumer_groups.get(group).fifo
        res = pb.Resource(name=req.topic.name, resource_namespace=req.topic.resource_namespace)
        cluster = self._cluster_brokers(topic, req.endpoints)
        if not cluster:
            count = self.core.topic_queue_count(topic)
            broker = self._queues(req.topic, 1, self._endpoints(req.endpoints))[0].broker
            cluster = [(broker, list(range(count)))]
        # one assignment per group in a cluster: its consumers pop across that group's queues
        return pb.QueryAssignmentResponse(status=st.ok(), assignments=[
            pb.Assignment(message_queue=pb.MessageQueue(topic=res, id=queue_id, permission=pb.READ_WRITE,
                                                        broker=broker))
            for broker, ids in cluster for queue_id in (sorted(ids) if fifo else (-1,))])

    # --- client lifecycle ---------------------------------------------------------

    def Heartbeat(self, req: pb.HeartbeatRequest, call: Call) -> pb.HeartbeatResponse:
        if req.HasField("group") and req.group.name:
            check_group(req.group.name)
            if req.client_type in POP_CONSUMERS and call.client_id:
                # a pop consumer is a member for the console; it pops any queue, so holds none
                client = " ".join(filter(None, (call.header("x-mq-language"), call.header("x-mq-client-version"),
                                                pb.ClientType.Name(req.client_type))))
                self.core.membership.heartbeat(req.group.name, call.client_id, POP_MEMBER_TTL_MS, info=MemberInfo(
                    address=call.peer_host, client=client, last_heartbeat_ms=int(time.time() * 1000), pop=True))
        return pb.HeartbeatResponse(status=st.ok())

    def NotifyClientTermination(self, req: pb.NotifyClientTerminationRequest,
                                call: Call) -> pb.NotifyClientTerminationResponse:
        if req.HasField("group") and req.group.name:
            check_group(req.group.name)
            if call.client_id:
                self.core.membership.heartbeat(req.group.name, call.client_id, POP_MEMBER_TTL_MS, leave=True)
        return pb.NotifyClientTerminationResponse(status=st.ok())

    # --- publishing ------------------------------------------------------------------

    def _select_queue(self, topic: str, count: int, message_group: str | None) -> int:
        sealed = self.store.sealed_queue_ids(topic)  # moved to another group: no new writes here
        ids = [q for q in range(count) if q not in sealed] if sealed else range(count)
        if not ids:
            raise QueueSealed(f"every queue of topic {topic!r} on this group moved to another group: "
                              "query the route again")
        if message_group:  # FIFO: one group always lands on one queue, so its order is kept
            return ids[zlib.crc32(message_group.encode()) % len(ids)]
        counter = self._round_robin.get(topic)
        if counter is None:
            counter = self._round_robin.setdefault(topic, itertools.count())
        first = next(counter) % len(ids)
        for step in range(len(ids)):  # a queue a large COMMIT is writing would refuse: any other will do
            queue_id = ids[(first + step) % len(ids)]
            if not self.store.queue_reserved(topic, queue_id):
                return queue_id
        return ids[first]  # every queue is held: the append answers TOO_MANY_REQUESTS

    def SendMessage(self, req: pb.SendMessageRequest, call: Call) -> pb.SendMessageResponse:
        if not req.messages:
            raise MessageCorrupted("SendMessage carries no message to send")
        try:
            return self._send(req, call)
        except Exception as exc:
            status = st.status_for(exc)
            if status.code == pb.INTERNAL_ERROR:
                log.exception("SendMessage failed")
            entries = [pb.SendResultEntry(status=status, message_id=m.system_properties.message_id)
                       for m in req.messages]
            return pb.SendMessageResponse(status=status, entries=entries)

    def _send(self, req: pb.SendMessageRequest, call: Call) -> pb.SendMessageResponse:
        identity = call.identity
        messages = req.messages
        types = [message_type_of(m) for m in messages]
        transactional = types[0] == pb.TRANSACTION
        if any((t == pb.TRANSACTION) != transactional for t in types):
            raise BadRequest("one SendMessage request cannot mix TRANSACTION and other message types")
        converted = []
        queue_counts: dict[str, int] = {}  # one topic lookup per topic, not per message
        topic_types = self.core.topic_types
        for m, mtype in zip(messages, types):
            # a message without a born host was born where the call came from, as the proxy records it
            sm = to_store_message(m, born_host_fallback="" if m.system_properties.born_host else call.peer_host)
            count = queue_counts.get(sm.topic)
            if count is None:
                identity.require_publish(sm.topic)
                count = queue_counts[sm.topic] = self.core.topic_queue_count(sm.topic)
            # after the message's own checks and before DELAY's refusal, in the proxy's order
            check_accepts(sm.topic, topic_types.get(sm.topic), mtype)
            if mtype == pb.TRANSACTION and delivery_timestamp_ms(m) is not None:
                raise IllegalDeliveryTime("transactional messages cannot have a delivery time (delay)")
            if mtype == pb.DELAY:  # scheduled below, once its real queue is chosen
                sm.properties[PROP_TIMER_DELIVER_MS] = str(delivery_timestamp_ms(m))
            group = m.system_properties.message_group if mtype == pb.FIFO else None
            sm.queue_id = self._select_queue(sm.topic, count, group)
            converted.append(sm)
        if transactional:
            prepared = self.engine.prepare(converted, producer_group=identity.producer_group,
                                           sender=call.client_id)
            tx_id, results = prepared.transaction_id, prepared.results
            for topic in queue_counts:
                self.core.router.note_half(tx_id, call.client_id, topic)
        else:
            # never wait for a large COMMIT here: this call holds one of the few short-call
            # threads, which every RocketMQ client's sends and acks share (short_calls.py)
            # a DELAY message goes to the timer's system topic; the user's topics were checked above
            scheduling = pb.DELAY in types
            if scheduling:
                converted = self.core.schedule(converted)
            tx_id, results = "", self.store.append(converted, allow_system=scheduling, wait_reserved=False)
        self.core.metrics.messages_in += len(converted)
        response = pb.SendMessageResponse(status=OK_STATUS)
        add_entry = response.entries.add
        for m, r in zip(messages, results):
            message_id = m.system_properties.message_id  # never blank: to_store_message refuses that
            # RocketMQ's broker answers every send with the message id as its transaction id;
            # a transactional send gets txmq's transaction id, which EndTransaction takes
            add_entry(status=OK_STATUS, message_id=message_id, transaction_id=tx_id or message_id,
                      offset=r.queue_offset,
                      recall_handle=recall_handle(r.queue_offset, message_id) if r.topic == TIMER_TOPIC else "")
        return response

    def EndTransaction(self, req: pb.EndTransactionRequest, call: Call) -> pb.EndTransactionResponse:
        check_topic(req.topic.name)  # the proxy checks the topic before anything else
        tx_id = req.transaction_id
        if not tx_id.strip():
            raise InvalidTransactionId("transaction_id is empty")
        if req.resolution == pb.COMMIT:
            resolution = Resolution.COMMIT
        elif req.resolution == pb.ROLLBACK:
            resolution = Resolution.ROLLBACK
        else:
            raise BadRequest("resolution must be COMMIT or ROLLBACK")
        source = "check" if req.source == pb.SOURCE_SERVER_CHECK else "client"
        identity = call.identity
        if identity.authenticated:
            info = self.engine.get(tx_id)
            if info.producer_group or info.state.name == "PENDING":
                identity.require_producer_group(info.producer_group)
        result = self.engine.end(tx_id, resolution, source=source,
                                 producer_group=identity.producer_group if identity.authenticated else None,
                                 wait_reserved=False)  # as for sends: refused, it stays pending for check-back
        self.core.router.forget(tx_id)
        response = _END_RESPONSES.get((result.state.name, bool(result.newly_ended)))
        if response is None:  # a state the table does not know: answer it the long way
            text = result.state.name if result.newly_ended else f"already {result.state.name}"
            response = pb.EndTransactionResponse(status=st.ok(text))
        return response

    def RecallMessage(self, req: pb.RecallMessageRequest, call: Call) -> pb.RecallMessageResponse:
        topic = check_topic(req.topic.name)
        # the proxy refuses a recall on a topic that takes no DELAY messages as a type conflict first
        check_accepts(topic, self.core.topic_types.get(topic), pb.DELAY)
        call.identity.require_publish(topic)  # only a producer of the topic may cancel its messages
        message_id = self.core.timer.recall(req.recall_handle, topic)
        return pb.RecallMessageResponse(status=OK_STATUS, message_id=message_id)

    def SyncLiteSubscription(self, req: pb.SyncLiteSubscriptionRequest,
                             call: Call) -> pb.SyncLiteSubscriptionResponse:
        raise Unsupported("lite topics (SyncLiteSubscription) are not supported by txmq")

    # --- pop consumption ------------------------------------------------------------

    def _invisible_ms(self, d, *, default_s: float, min_ms: int) -> int:
        """The invisible duration of a receive or change, refused outside min_ms .. max_invisible_s
        with the proxy's texts (clients and users match on them)."""
        if d is None:
            return int(default_s * 1000)
        ms = _duration_ms(d)
        if ms < min_ms:
            raise IllegalInvisibleTime(f"the invisibleTime is too small. min is {min_ms}")
        max_ms = int(self.config.max_invisible_s * 1000)
        if ms > max_ms:
            raise IllegalInvisibleTime(f"the invisibleTime is too large. max is {max_ms}")
        return ms

    def _long_poll_s(self, req: pb.ReceiveMessageRequest, call: Call) -> float:
        """How long a receive may wait for messages: the request's long_polling_timeout (0..max), else
        what the call's deadline leaves after half the client's request timeout, held within 5..20 s
        as the proxy holds it; never so long that the answer would miss the deadline."""
        remaining = call.context.time_remaining()  # seconds; None without a deadline
        half_request_s = self._request_timeouts.get(call.client_id, DEFAULT_REQUEST_TIMEOUT_MS) / 2000
        if req.HasField("long_polling_timeout"):
            poll_s = _duration_ms(req.long_polling_timeout) / 1000
            if poll_s < 0 or poll_s > self.config.max_long_polling_s:
                raise IllegalPollingTime(f"long polling timeout {poll_s:g} s is out of range "
                                         f"(0 .. {self.config.max_long_polling_s:g} s)")
        elif remaining is None:
            return self.config.default_long_polling_s
        else:
            poll_s = min(max(remaining - half_request_s, MIN_DEADLINE_POLL_MS / 1000), MAX_DEADLINE_POLL_MS / 1000)
        if remaining is not None and poll_s > remaining - half_request_s:
            # the proxy refuses a deadline under 5 s (ILLEGAL_POLLING_TIME); txmq answers within it
            poll_s = max(0.0, remaining - half_request_s)
        return poll_s

    def _note_settings(self, requests, client_id: str):
        """Pass a Telemetry stream's commands on, remembering the request timeout its Settings name."""
        for command in requests:
            if (client_id and isinstance(command, pb.TelemetryCommand) and command.WhichOneof("command") == "settings"
                    and command.settings.HasField("request_timeout")):
                if len(self._request_timeouts) >= _MAX_REMEMBERED_CLIENTS:
                    self._request_timeouts.clear()  # bounded: forgotten clients fall back to the default
                self._request_timeouts[client_id] = _duration_ms(command.settings.request_timeout)
            yield command

    def ReceiveMessage(self, req: pb.ReceiveMessageRequest, call: Call) -> Iterator[pb.ReceiveMessageResponse]:
        group = check_group(req.group.name)
        topic = check_topic(req.message_queue.topic.name)
        call.identity.require_subscribe(topic)
        message_filter = wire_filter(req.filter_expression)
        if req.batch_size <= 0:
            raise BadRequest(f"batch_size must be positive, got {req.batch_size}")
        batch = min(req.batch_size, MAX_RECEIVE_BATCH)
        # a push consumer's receive (auto_renew) is not held to the minimum, as the proxy's; txmq renews
        # nothing, so what it names is kept (the proxy would renew its default instead)
        invisible_ms = self._invisible_ms(req.invisible_duration if req.HasField("invisible_duration") else None,
                                          default_s=self.config.default_invisible_s,
                                          min_ms=1 if req.auto_renew else int(self.config.min_invisible_s * 1000))
        poll_s = self._long_poll_s(req, call)
        count = self.core.topic_queue_count(topic)
        start = req.message_queue.id if 0 <= req.message_queue.id < count else -1
        deadline = time.monotonic() + poll_s
        context = call.context
        with self.pop.arrivals.watching([topic]) as arrived:
            while True:
                arrived.clear()  # before the look: a message dispatched after it wakes the wait
                deliveries = self.pop.receive(group, topic, count, start_queue=start, batch=batch,
                                              invisible_ms=invisible_ms, message_filter=message_filter,
                                              attempt_id=req.attempt_id if req.HasField("attempt_id") else None)
                remaining = deadline - time.monotonic()
                if deliveries or remaining <= 0 or not context.is_active():
                    break
                wait = min(remaining, 1.0)
                next_visible = self.pop.next_deadline_s(group, topic)
                if next_visible is not None:
                    wait = min(wait, next_visible + 0.005)
                self.pop.arrivals.wait(arrived, wait)
        if not deliveries:
            yield pb.ReceiveMessageResponse(status=st.status(pb.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield pb.ReceiveMessageResponse(status=st.ok())
            for d in deliveries:
                yield pb.ReceiveMessageResponse(message=to_wire_message(
                    d.message, receipt_handle=d.receipt_handle, delivery_attempt=d.attempt,
                    invisible_ms=d.invisible_ms, listen_port=self._listen_port()))
            self.core.metrics.messages_out += len(deliveries)
        # Clients measure delivery latency from this timestamp; the proxy ends every receive with it.
        now = pb.ReceiveMessageResponse()
        now.delivery_timestamp.GetCurrentTime()
        yield now

    def AckMessage(self, req: pb.AckMessageRequest, call: Call) -> pb.AckMessageResponse:
        group = check_group(req.group.name)
        topic = check_topic(req.topic.name)
        call.identity.require_subscribe(topic)
        if not req.entries:
            raise BadRequest("AckMessage carries no entries")
        results = []
        for entry in req.entries:
            try:
                self.pop.ack(group, topic, entry.receipt_handle)
                s = st.ok()
            except Exception as exc:
                s = st.status_for(exc)
            results.append(pb.AckMessageResultEntry(message_id=entry.message_id,
                                                    receipt_handle=entry.receipt_handle, status=s))
        codes = {r.status.code for r in results}
        if codes == {pb.OK}:
            overall = st.ok()
        elif len(codes) == 1:
            overall = results[0].status
        else:
            overall = st.status(pb.MULTIPLE_RESULTS, "some entries failed: see each entry's status")
        return pb.AckMessageResponse(status=overall, entries=results)

    def ChangeInvisibleDuration(self, req: pb.ChangeInvisibleDurationRequest,
                                call: Call) -> pb.ChangeInvisibleDurationResponse:
        group = check_group(req.group.name)
        topic = check_topic(req.topic.name)
        call.identity.require_subscribe(topic)
        invisible_ms = self._invisible_ms(req.invisible_duration, default_s=0, min_ms=0)
        handle = self.pop.change_invisible(group, topic, req.receipt_handle, invisible_ms)
        return pb.ChangeInvisibleDurationResponse(status=st.ok(), receipt_handle=handle)

    def ForwardMessageToDeadLetterQueue(self, req: pb.ForwardMessageToDeadLetterQueueRequest,
                                        call: Call) -> pb.ForwardMessageToDeadLetterQueueResponse:
        group = check_group(req.group.name)
        topic = check_topic(req.topic.name)
        call.identity.require_subscribe(topic)
        self.pop.forward_to_dead_letter(group, topic, req.receipt_handle)
        return pb.ForwardMessageToDeadLetterQueueResponse(status=st.ok())

    # --- pull consumption and offsets ----------------------------------------------------

    def _queue_of(self, mq: pb.MessageQueue, call: Call, *, subscribe: bool = True) -> tuple[str, int]:
        topic = check_topic(mq.topic.name)
        if subscribe:
            call.identity.require_subscribe(topic)
        count = self.core.topic_queue_count(topic, create=False)
        if not 0 <= mq.id < count:
            raise IllegalQueue(f"queue {mq.id} does not exist: topic {topic!r} has queues 0..{count - 1}")
        return topic, mq.id

    def PullMessage(self, req: pb.PullMessageRequest, call: Call) -> Iterator[pb.PullMessageResponse]:
        check_group(req.group.name)
        topic, qid = self._queue_of(req.message_queue, call)
        if req.offset < 0:
            raise IllegalOffset(f"offset {req.offset} is negative")
        if req.batch_size <= 0:
            raise BadRequest(f"batch_size must be positive, got {req.batch_size}")
        message_filter = wire_filter(req.filter_expression)
        poll_s = _duration_ms(req.long_polling_timeout) / 1000
        if poll_s < 0 or poll_s > self.config.max_long_polling_s:
            raise IllegalPollingTime(f"long polling timeout {poll_s:g} s is out of range")
        batch = min(req.batch_size, self.config.max_batch_size)
        deadline = time.monotonic() + poll_s
        with self.pop.arrivals.watching([topic]) as arrived:
            while True:
                arrived.clear()
                # The store confirms the filter while it scans, so a read past only filtered-out
                # messages returns none but moves next_offset on.
                read = self.store.read_queue(topic, qid, req.offset, batch, tag_filter=message_filter)
                remaining = deadline - time.monotonic()
                if read.messages or read.next_offset > req.offset or remaining <= 0 or not call.context.is_active():
                    break
                self.pop.arrivals.wait(arrived, min(remaining, 1.0))
        messages = read.messages
        if read.messages or read.next_offset > req.offset:
            yield pb.PullMessageResponse(status=st.ok())
        else:
            yield pb.PullMessageResponse(status=st.status(pb.MESSAGE_NOT_FOUND, "no new message"))
        for m in messages:
            yield pb.PullMessageResponse(message=to_wire_message(m, listen_port=self._listen_port()))
        yield pb.PullMessageResponse(next_offset=read.next_offset)
        self.core.metrics.messages_out += len(messages)

    def UpdateOffset(self, req: pb.UpdateOffsetRequest, call: Call) -> pb.UpdateOffsetResponse:
        group = check_group(req.group.name)
        topic, qid = self._queue_of(req.message_queue, call)
        max_offset = self.store.max_offset(topic, qid)
        if not 0 <= req.offset <= max_offset:
            raise IllegalOffset(f"offset {req.offset} is outside 0..{max_offset} of {topic}:{qid}")
        self.store.offsets.commit(group, topic, qid, to_stored(queue_base(self.core, topic, qid), req.offset))
        return pb.UpdateOffsetResponse(status=st.ok())

    def GetOffset(self, req: pb.GetOffsetRequest, call: Call) -> pb.GetOffsetResponse:
        group = check_group(req.group.name)
        topic, qid = self._queue_of(req.message_queue, call)
        stored = self.store.offsets.get(group, topic, qid)
        return pb.GetOffsetResponse(status=st.ok(), offset=to_physical(queue_base(self.core, topic, qid), stored))

    def QueryOffset(self, req: pb.QueryOffsetRequest, call: Call) -> pb.QueryOffsetResponse:
        topic, qid = self._queue_of(req.message_queue, call)
        policy = req.query_offset_policy
        if policy == pb.BEGINNING:
            offset = self.store.min_offset(topic, qid)
        elif policy == pb.END:
            offset = self.store.max_offset(topic, qid)
        elif policy == pb.TIMESTAMP:
            if not req.HasField("timestamp"):
                raise BadRequest("policy TIMESTAMP needs a timestamp")
            ts = req.timestamp.seconds * 1000 + req.timestamp.nanos // 1_000_000
            offset = self.store.offset_for_timestamp(topic, qid, ts)
        else:
            raise BadRequest(f"unknown query offset policy {policy}")
        return pb.QueryOffsetResponse(status=st.ok(), offset=offset)

    # --- telemetry -------------------------------------------------------------------

    def Telemetry(self, requests, call: Call) -> Iterator[pb.TelemetryCommand]:
        return serve_telemetry(self.core, self._note_settings(requests, call.client_id), call.context,
                               client_id=call.client_id,
                               identity=call.identity, bad_request_type=Undecodable)


# --- gRPC plumbing -----------------------------------------------------------------------


def rocketmq_method_handlers(core: ServiceCore, short_calls: futures.ThreadPoolExecutor | None = None
                             ) -> dict[str, grpc.RpcMethodHandler]:
    """{method name: handler} for every RPC of the method table. The broker registers them with
    `add_registered_method_handlers`, so gRPC matches a call's method in C instead of a Python lookup.
    Unary calls run on `short_calls` when given (see short_calls.py), streams on the main pool."""
    service = MessagingService(core)
    handlers = {}
    for method in ROCKETMQ_METHODS:
        fn = getattr(service, method.name)  # the method table names the RPCs: a lookup by name is the dispatch
        deserialize = _deserializer(method.request_class)
        serialize = method.response_class.SerializeToString
        if method.kind == UNARY_UNARY:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                run_on(short_calls, _unary(core, method.name, fn, method.response_class)),
                request_deserializer=deserialize, response_serializer=serialize)
        elif method.kind == UNARY_STREAM:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _server_stream(core, method.name, fn, method.response_class),
                request_deserializer=deserialize, response_serializer=serialize)
        elif method.kind == STREAM_STREAM:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                _bidi(core, method.name, fn, method.response_class),
                request_deserializer=deserialize, response_serializer=serialize)
    return handlers


def _failure(response_class: type, rpc: str, exc: Exception):
    status = st.status_for(exc)
    if status.code == pb.INTERNAL_ERROR:
        log.exception("%s failed", rpc)
    return response_class(status=status)


def _unary(core: ServiceCore, rpc: str, fn, response_class: type):
    metrics = core.metrics

    def handle(request, context):
        started = time.perf_counter()
        try:
            if isinstance(request, Undecodable):
                raise BadRequest(str(request))
            response = fn(request, Call(core, context))
        except Exception as exc:
            response = _failure(response_class, rpc, exc)
        metrics.record(rpc, response.status.code, time.perf_counter() - started)
        return response
    return handle


def _server_stream(core: ServiceCore, rpc: str, fn, response_class: type):
    metrics = core.metrics

    def handle(request, context):
        started = time.perf_counter()
        code = pb.OK
        try:
            if isinstance(request, Undecodable):
                raise BadRequest(str(request))
            for response in fn(request, Call(core, context)):
                if response.WhichOneof("content") == "status":
                    code = response.status.code
                yield response
        except Exception as exc:
            failure = _failure(response_class, rpc, exc)
            code = failure.status.code
            yield failure
        metrics.record(rpc, code, time.perf_counter() - started)
    return handle


def _bidi(core: ServiceCore, rpc: str, fn, response_class: type):
    def handle(requests, context):
        try:
            call = Call(core, context)
        except Exception as exc:
            yield _failure(response_class, rpc, exc)
            return
        yield from fn(requests, call)
    return handle
