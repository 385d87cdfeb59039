"""Transactions across broker groups, on the broker: the coordinator service and the way a
participant reaches a coordinator.

- `CoordinatorService` serves `txmq.coordinator.v1.TransactionCoordinator` on a group's
  leader: Decide records the first decision of a transaction as a DECIDE op record
  (TransactionEngine.decide: in the CommitLog, replicated, derived again by recovery and
  by whichever replica leads next), GetDecision reads it.
- `ClusterDecisions` is the engine's `DecisionAuthority`: a transaction coordinated by
  this group is decided in this engine; one coordinated by another group is decided by
  that group's leader, found under `/txmq/groups/<group>/leader` in etcd and called over
  a broker-to-broker channel signed with the replicas' admin account.

What is guaranteed and why is in docs/replication.md, "Transactions across groups".
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Callable, Protocol

import grpc

from txmq.broker import errors
from txmq.broker.protocol import coordinator_pb2 as cpb
from txmq.broker.protocol import keepalive
from txmq.broker.protocol.coordinator_methods import COORDINATOR_METHODS, SERVICE_NAME
from txmq.broker.protocol.native_status import ok_status, raise_for, status_for
from txmq.broker.server.auth import ANONYMOUS, Authenticator, authorization_header, format_date_time
from txmq.broker.server.config import BrokerConfig
from txmq.broker.server.native_service import unary_answering
from txmq.broker.transaction.decision import CrossGroup, Decision, check_group_name
from txmq.broker.transaction.engine import TransactionEngine
from txmq.broker.transaction.half import check_transaction_id
from txmq.broker.transaction.state import Resolution

log = logging.getLogger(__name__)

# How long a participant keeps trying to reach a coordinator (its leader may be failing over)
# before it reports CoordinatorUnavailable; check-back tries again on its next round.
REACH_TIMEOUT_S = 3.0
CALL_TIMEOUT_S = 2.0
LEADER_CACHE_S = 5.0
# After a coordinator could not be reached, calls to it fail at once for this long: a check-back
# round over many transactions of one dead coordinator must not wait REACH_TIMEOUT_S for each.
DOWN_HOLD_S = 1.0

_TO_PB = {Resolution.COMMIT: cpb.DECISION_COMMIT, Resolution.ROLLBACK: cpb.DECISION_ROLLBACK}
_FROM_PB = {v: k for k, v in _TO_PB.items()}


def resolution_from_pb(value: int) -> Resolution | None:
    """The wire's Decision as a Resolution (None for DECISION_UNKNOWN)."""
    if value == cpb.DECISION_UNKNOWN:
        return None
    if value not in _FROM_PB:
        raise errors.BadRequest(f"decision {value} is neither COMMIT nor ROLLBACK")
    return _FROM_PB[value]


def resolution_to_pb(resolution: Resolution | None) -> int:
    return cpb.DECISION_UNKNOWN if resolution is None else _TO_PB[resolution]


# --- the coordinator's side ------------------------------------------------------------


class CoordinatorService:
    """Decide / GetDecision over this group's engine. Each handler answers with a Status."""

    def __init__(self, engine: TransactionEngine, group: str | None, auth: Authenticator) -> None:
        self.engine = engine
        self.group = group
        self.auth = auth

    def _check(self, context, transaction_id: str, coordinator: str, producer_group: str) -> None:
        check_transaction_id(transaction_id)
        if not self.group:
            raise errors.Unsupported("this broker is not in a broker group: it coordinates no cross-group transaction")
        if coordinator and coordinator != self.group:
            # a misrouted call must never record a decision at a group participants will not ask
            raise errors.BadRequest(f"transaction {transaction_id} is coordinated by group {coordinator!r}, "
                                    f"not by {self.group!r}")
        identity = self.auth.authenticate(context.invocation_metadata()) if self.auth.enabled else ANONYMOUS
        if identity.authenticated and not identity.admin:
            identity.require_producer_group(producer_group)

    def Decide(self, request: cpb.DecideRequest, context) -> cpb.DecideResponse:
        self._check(context, request.transaction_id, request.coordinator, request.producer_group)
        proposal = resolution_from_pb(request.decision)
        if proposal is None:
            raise errors.BadRequest("Decide needs COMMIT or ROLLBACK")
        participants = [check_group_name(g) for g in request.participants]
        senders = list(request.include_senders) if request.restrict_senders else None
        decision = self.engine.decide(request.transaction_id, proposal, participants, senders)
        if decision.resolution is not proposal:
            log.info("transaction %s: %s refused, %s was decided first", request.transaction_id, proposal.name,
                     decision.resolution.name)
        return _decide_response(decision)

    def GetDecision(self, request: cpb.GetDecisionRequest, context) -> cpb.GetDecisionResponse:
        self._check(context, request.transaction_id, request.coordinator, request.producer_group)
        decision = self.engine.decision(request.transaction_id)
        if decision is None:
            return cpb.GetDecisionResponse(status=ok_status(), decision=cpb.DECISION_UNKNOWN)
        return cpb.GetDecisionResponse(status=ok_status(), decision=resolution_to_pb(decision.resolution),
                                       participants=list(decision.participants), decided_ms=decision.at_ms,
                                       restrict_senders=decision.senders is not None,
                                       include_senders=list(decision.senders or ()))


def _decide_response(decision: Decision) -> cpb.DecideResponse:
    return cpb.DecideResponse(status=ok_status(), decision=resolution_to_pb(decision.resolution),
                              newly_decided=decision.newly_decided, participants=list(decision.participants),
                              decided_ms=decision.at_ms, restrict_senders=decision.senders is not None,
                              include_senders=list(decision.senders or ()))


def decision_from_pb(response: cpb.DecideResponse | cpb.GetDecisionResponse) -> Decision | None:
    """A Decide or GetDecision answer as a Decision (None: nothing decided yet)."""
    resolution = resolution_from_pb(response.decision)
    if resolution is None:
        return None
    return Decision(resolution, tuple(response.participants), response.decided_ms,
                    senders=tuple(response.include_senders) if response.restrict_senders else None)


def coordinator_method_handlers(service: CoordinatorService) -> dict[str, grpc.RpcMethodHandler]:
    """{method name: handler} of TransactionCoordinator, for `add_registered_method_handlers`."""
    handlers = {}
    for method in COORDINATOR_METHODS:
        impl = getattr(service, method.name)  # the method table names the RPCs
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            unary_answering(impl, method.response_class, "coordinator"),
            request_deserializer=method.request_class.FromString,
            response_serializer=method.response_class.SerializeToString)
    return handlers


# --- the participant's side ------------------------------------------------------------


class LeaderDirectory(Protocol):
    """Where a group's leader is (etcd here; a test may give another)."""

    def leader_of(self, group: str) -> str | None: ...


class EtcdLeaders:
    """Group leaders read from etcd's `/txmq/groups/<group>/leader` keys."""

    def __init__(self, endpoints: list[tuple[str, int]]) -> None:
        self.endpoints = endpoints
        self._views: dict[str, object] = {}
        self._lock = threading.Lock()

    def leader_of(self, group: str) -> str | None:
        from .coordination import CoordinationUnavailable, EtcdGroup

        with self._lock:
            view = self._views.get(group)
            if view is None:
                view = self._views[group] = EtcdGroup(self.endpoints, group, 2)
        try:
            record = view.leader()  # type: ignore[attr-defined]
        except CoordinationUnavailable:
            return None
        return record.endpoint if record is not None else None


class ClusterDecisions:
    """The engine's DecisionAuthority in a broker group (see the module docstring)."""

    def __init__(self, engine: TransactionEngine, group: str, leaders: LeaderDirectory,
                 channel_to: Callable[[str], grpc.Channel], metadata: Callable[[], list[tuple[str, str]]], *,
                 reach_timeout_s: float = REACH_TIMEOUT_S) -> None:
        self.engine = engine
        self.group = group
        self.leaders = leaders
        self.channel_to = channel_to
        self.metadata = metadata
        self.reach_timeout_s = reach_timeout_s
        self._lock = threading.Lock()
        self._leader: dict[str, tuple[str, float]] = {}  # group -> (endpoint, monotonic time read)
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, dict[str, Callable]] = {}
        self._down_until: dict[str, tuple[float, str]] = {}  # group -> (monotonic time, why)

    @classmethod
    def for_broker(cls, engine: TransactionEngine, config: BrokerConfig, auth: Authenticator) -> "ClusterDecisions":
        def metadata() -> list[tuple[str, str]]:
            account = auth.replica_account() if auth.enabled else None
            if account is None:
                return []
            now = format_date_time()
            return [("x-mq-date-time", now),
                    ("authorization", authorization_header(account.access_key, account.secret_key, now))]

        return cls(engine, str(config.group), EtcdLeaders(config.etcd_endpoints), lambda e: peer_channel(config, e),
                   metadata)

    # --- DecisionAuthority --------------------------------------------------------

    def is_coordinator(self, cross: CrossGroup) -> bool:
        return cross.coordinator == self.group

    def settle(self, transaction_id: str, cross: CrossGroup, proposal: Resolution,
               senders: tuple[str, ...] | None = None) -> Decision:
        if cross.coordinator == self.group:
            return self.engine.decide(transaction_id, proposal, cross.participants, senders)
        request = cpb.DecideRequest(transaction_id=transaction_id, decision=resolution_to_pb(proposal),
                                    participants=list(cross.participants), coordinator=cross.coordinator,
                                    restrict_senders=senders is not None, include_senders=list(senders or ()))
        decided = decision_from_pb(self._call(cross.coordinator, "Decide", request))
        assert decided is not None, "a Decide always answers a decision"
        return decided

    def lookup(self, transaction_id: str, cross: CrossGroup) -> Decision | None:
        if cross.coordinator == self.group:
            return self.engine.decision(transaction_id)
        request = cpb.GetDecisionRequest(transaction_id=transaction_id, coordinator=cross.coordinator)
        return decision_from_pb(self._call(cross.coordinator, "GetDecision", request))

    def close(self) -> None:
        with self._lock:
            channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            channel.close()

    # --- calls to another group's leader ---------------------------------------------

    def _call(self, group: str, name: str, request):
        """One call to `group`'s leader, retried across its failover for reach_timeout_s;
        CoordinatorUnavailable after that (the caller's transaction stays pending)."""
        with self._lock:
            down = self._down_until.get(group)
        if down is not None and time.monotonic() < down[0]:
            raise errors.CoordinatorUnavailable(
                f"coordinator group {group!r} could not be reached ({down[1]}); the transaction stays pending")
        deadline = time.monotonic() + self.reach_timeout_s
        last = "no leader in etcd"
        while True:
            endpoint = self._leader_of(group)
            if endpoint is not None:
                try:
                    response = self._stub(endpoint, name)(request, timeout=CALL_TIMEOUT_S, metadata=self.metadata())
                    raise_for(response.status)
                    return response
                except grpc.RpcError as exc:
                    last = f"{endpoint}: {exc.code() if isinstance(exc, grpc.Call) else exc}"
                except (errors.NotLeader, errors.ReplicationTimeout, errors.RequestTimeout, errors.StoreError) as exc:
                    last = f"{endpoint}: {type(exc).__name__}: {exc}"
                self._forget_leader(group, endpoint)
            if time.monotonic() >= deadline:
                with self._lock:
                    self._down_until[group] = (time.monotonic() + DOWN_HOLD_S, last)
                raise errors.CoordinatorUnavailable(
                    f"coordinator group {group!r} could not be reached ({last}); the transaction stays pending")
            time.sleep(0.1)

    def _leader_of(self, group: str) -> str | None:
        with self._lock:
            cached = self._leader.get(group)
        if cached is not None and time.monotonic() - cached[1] < LEADER_CACHE_S:
            return cached[0]
        endpoint = self.leaders.leader_of(group)
        if endpoint is not None:
            with self._lock:
                self._leader[group] = (endpoint, time.monotonic())
        return endpoint

    def _forget_leader(self, group: str, endpoint: str) -> None:
        with self._lock:
            if self._leader.get(group, ("",))[0] == endpoint:
                del self._leader[group]

    def _stub(self, endpoint: str, name: str) -> Callable:
        with self._lock:
            stubs = self._stubs.get(endpoint)
            if stubs is None:
                channel = self._channels[endpoint] = self.channel_to(endpoint)
                stubs = self._stubs[endpoint] = {
                    m.name: channel.unary_unary(m.path, request_serializer=m.request_class.SerializeToString,
                                                response_deserializer=m.response_class.FromString)
                    for m in COORDINATOR_METHODS}
            return stubs[name]


def peer_channel(config: BrokerConfig, endpoint: str) -> grpc.Channel:
    """A channel to another group's broker: TLS trusting the brokers' shared certificate when they
    serve TLS (as a group's replicas trust each other), plain otherwise."""
    options = [("grpc.max_receive_message_length", config.max_message_bytes),
               ("grpc.max_send_message_length", config.max_message_bytes),
               ("grpc.initial_reconnect_backoff_ms", 50), ("grpc.max_reconnect_backoff_ms", 1000),
               *keepalive.CHANNEL_OPTIONS]
    if config.tls_cert:
        creds = grpc.ssl_channel_credentials(root_certificates=Path(config.tls_cert).read_bytes())
        return grpc.secure_channel(endpoint, creds, options=options)
    return grpc.insecure_channel(endpoint, options=options)


__all__ = ["SERVICE_NAME", "ClusterDecisions", "CoordinatorService", "EtcdLeaders", "LeaderDirectory",
           "coordinator_method_handlers", "peer_channel", "resolution_from_pb", "resolution_to_pb"]
