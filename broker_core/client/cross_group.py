"""One transaction over several broker groups: all of its messages become visible, on every
group, or none does.

    tx = CrossGroupTransaction({"orders": NativeClient(...), "billing": NativeClient(...)},
                               producer_group="shop")
    tx.prepare("orders", [Message("orders", b"...")])
    tx.prepare("billing", [Message("invoices", b"...")])
    tx.commit()          # Decide(COMMIT) at the coordinator, then EndTransaction on each group

1. Halves go to each group as usual, each carrying the transaction's coordinator group
   (derived from the id over the sorted group names: decision.coordinator_for) and the
   participant groups.
2. commit()/rollback() records the decision at the coordinator (the first decision wins,
   so a check-back that rolled the transaction back first is reported as a
   TransactionConflict). When the coordinator group holds halves, its own EndTransaction
   records it (a coordinator resolves its halves only after recording the decision): one
   round trip less than Decide followed by EndTransaction. Otherwise Decide records it.
3. Then every other participant is told the decision (EndTransaction, retried: it is
   idempotent). A participant applies nothing but the coordinator's decision: it asks the
   coordinator itself before it commits. One that is not reached settles through
   check-back, which asks the coordinator first.

With a single group there is no coordinator: the transaction is a plain one (no extra
round trip, no properties added).
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol, Sequence

from txmq.broker import errors
from txmq.broker.protocol import coordinator_pb2 as cpb
from txmq.broker.transaction.decision import coordinator_for, cross_group_properties

from .types import EndSummary, Message, PrepareSummary

_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="txmq-cross-group")
# Errors after which a participant's EndTransaction is worth sending again (it is idempotent).
_RETRYABLE = (errors.CoordinatorUnavailable, errors.BrokerUnavailable, errors.NotLeader, errors.RequestTimeout,
              errors.TooManyRequests)
_DECISIONS = {"COMMIT": cpb.DECISION_COMMIT, "ROLLBACK": cpb.DECISION_ROLLBACK}
_NAMES = {v: k for k, v in _DECISIONS.items()}


class GroupClient(Protocol):
    """What a cross-group transaction needs of one group's client (NativeClient implements it)."""

    def prepare(self, transaction_id: str, messages: Sequence[Message], *, topic: str | None = None,
                producer_group: str = "", sender: str = "", return_message_ids: bool = True) -> PrepareSummary: ...

    def end_transaction(self, transaction_id: str, resolution: str, *, include_senders: Sequence[str] | None = None,
                        producer_group: str | None = None, source: str = "client") -> EndSummary: ...

    def _call(self, name: str, request: Any, *, timeout_s: float | None = None) -> Any: ...


@dataclass(frozen=True)
class CrossGroupResult:
    transaction_id: str
    decision: str  # COMMIT or ROLLBACK: the coordinator's (the only one any group applies)
    coordinator: str | None  # None: a single-group transaction
    ended: dict[str, EndSummary]  # per group told the decision
    unsettled: dict[str, str]  # group -> why it was not told within end_retry_s (check-back settles it)


class CrossGroupTransaction:
    """A transaction id whose halves span the groups of `clients` (see the module docstring)."""

    def __init__(self, clients: Mapping[str, GroupClient], *, producer_group: str = "", sender: str = "",
                 transaction_id: str | None = None, groups: Sequence[str] | None = None,
                 end_retry_s: float = 30.0) -> None:
        """`groups`: the participant groups, fixed now (every half names them); all of `clients`'
        groups by default. `end_retry_s`: how long commit()/rollback() keep telling a participant."""
        self.groups = tuple(sorted(set(groups if groups is not None else clients)))
        if not self.groups:
            raise ValueError("a transaction needs at least one group")
        missing = [g for g in self.groups if g not in clients]
        if missing:
            raise ValueError(f"no client for groups {missing}")
        self.clients = {g: clients[g] for g in self.groups}
        self.transaction_id = transaction_id or uuid.uuid4().hex.upper()
        self.producer_group = producer_group
        self.sender = sender
        self.end_retry_s = end_retry_s
        self.cross = len(self.groups) > 1
        self.coordinator = coordinator_for(self.transaction_id, self.groups) if self.cross else None
        self._properties = cross_group_properties(self.transaction_id, self.groups) if self.cross else {}
        self.prepared: dict[str, int] = {}  # group -> halves acknowledged there
        self.decision: str | None = None

    # --- phase 1: halves ----------------------------------------------------------------

    def prepare(self, group: str, messages: Sequence[Message], *, topic: str | None = None) -> PrepareSummary:
        """Store `messages` as halves of this transaction on `group`."""
        if group not in self.groups:
            raise ValueError(f"group {group!r} is not a participant of this transaction ({', '.join(self.groups)})")
        if self.decision is not None:
            raise errors.TransactionAlreadyEnded(f"transaction {self.transaction_id} is decided {self.decision}",
                                                 state=self.decision)
        tagged = [replace(m, properties={**m.properties, **self._properties}) for m in messages] if self.cross \
            else list(messages)
        summary = self.clients[group].prepare(self.transaction_id, tagged, topic=topic,
                                              producer_group=self.producer_group, sender=self.sender)
        self.prepared[group] = self.prepared.get(group, 0) + summary.count
        return summary

    def prepare_many(self, messages_by_group: Mapping[str, Sequence[Message]]) -> dict[str, PrepareSummary]:
        """prepare() on several groups at once (in parallel)."""
        return in_parallel(self.prepare, messages_by_group)

    # --- phase 2: the decision -------------------------------------------------------------

    def decide(self, resolution: str, include_senders: Sequence[str] | None = None) -> str:
        """Record `resolution` at the coordinator unless it holds a decision already; returns the
        decision in force (the first one wins). `include_senders`: a COMMIT of those senders'
        halves only, on every group (the others roll back). Single-group: nothing to record."""
        resolution = resolution.upper()
        if resolution not in _DECISIONS:
            raise errors.BadRequest(f"resolution must be COMMIT or ROLLBACK, not {resolution!r}")
        if not self.cross:
            self.decision = resolution
            return resolution
        request = cpb.DecideRequest(transaction_id=self.transaction_id, decision=_DECISIONS[resolution],
                                    participants=list(self.groups), coordinator=self.coordinator,
                                    producer_group=self.producer_group,
                                    restrict_senders=include_senders is not None,
                                    include_senders=list(include_senders or ()))
        response = self.clients[self.coordinator]._call("Decide", request)
        self.decision = _NAMES[response.decision]
        return self.decision

    def get_decision(self) -> str | None:
        """The coordinator's decision (None: none yet)."""
        if not self.cross:
            return self.decision
        request = cpb.GetDecisionRequest(transaction_id=self.transaction_id, coordinator=self.coordinator,
                                         producer_group=self.producer_group)
        return _NAMES.get(self.clients[self.coordinator]._call("GetDecision", request).decision)

    # --- phase 3: the participants ---------------------------------------------------------

    def end_on(self, group: str, resolution: str, include_senders: Sequence[str] | None = None) -> EndSummary | None:
        """Tell one participant the decision (idempotent; a participant applies the coordinator's
        senders whatever it is told); None when it holds no half of this transaction."""
        try:
            return self.clients[group].end_transaction(self.transaction_id, resolution, include_senders=include_senders,
                                                       producer_group=self.producer_group or None)
        except errors.UnknownTransaction:
            return None

    def commit(self, include_senders: Sequence[str] | None = None) -> CrossGroupResult:
        """Decide COMMIT (of `include_senders`' halves only, when given) at the coordinator, then
        commit on every participant. TransactionConflict (after rolling the participants back)
        when ROLLBACK was decided first."""
        return self._finish("COMMIT", include_senders)

    def rollback(self) -> CrossGroupResult:
        return self._finish("ROLLBACK")

    def _finish(self, wanted: str, include_senders: Sequence[str] | None = None) -> CrossGroupResult:
        if not self.cross:  # a plain transaction: EndTransaction alone, as TransactionProducer does
            group = self.groups[0]
            ended = self.end_on(group, wanted, include_senders)
            self.decision = wanted
            return CrossGroupResult(self.transaction_id, wanted, None, {group: ended} if ended else {}, {})
        decided, first = self._decide_at_coordinator(wanted, include_senders)
        result = self.settle(decided, skip=first, include_senders=include_senders)
        if decided != wanted:
            raise errors.TransactionConflict(
                f"transaction {self.transaction_id} was decided {decided} by its coordinator group "
                f"{self.coordinator} first: {wanted} refused ({decided} applied on every group)")
        return result

    def _decide_at_coordinator(self, wanted: str,
                               include_senders: Sequence[str] | None) -> tuple[str, dict[str, EndSummary]]:
        """(the decision, {coordinator: its EndSummary} when its EndTransaction recorded it)."""
        if self.prepared.get(self.coordinator):
            try:
                summary = self._end_retrying(self.coordinator, wanted, include_senders)
            except errors.TransactionConflict:
                pass  # decided otherwise first: read it below, then apply it everywhere
            else:
                if summary is not None:
                    self.decision = wanted
                    return wanted, {self.coordinator: summary}
        return self.decide(wanted, include_senders), {}

    def settle(self, decision: str, *, skip: Mapping[str, EndSummary] | None = None,
               include_senders: Sequence[str] | None = None) -> CrossGroupResult:
        """Tell every participant `decision` (the coordinator's), in parallel, each retried for
        end_retry_s; what is left unsettled then is settled by check-back. `skip`: groups told
        already, with their answers."""
        ended: dict[str, EndSummary] = dict(skip or {})
        unsettled: dict[str, str] = {}

        def end(group: str, _: object) -> None:
            try:
                summary = self._end_retrying(group, decision, include_senders)
                if summary is not None:
                    ended[group] = summary
            except _RETRYABLE as exc:
                unsettled[group] = f"{type(exc).__name__}: {exc}"

        in_parallel(end, {g: None for g in self.groups if g not in ended})
        return CrossGroupResult(self.transaction_id, decision, self.coordinator, ended, unsettled)

    def _end_retrying(self, group: str, decision: str, include_senders: Sequence[str] | None = None) -> EndSummary | None:
        deadline = time.monotonic() + self.end_retry_s
        backoff = 0.05
        while True:
            try:
                return self.end_on(group, decision, include_senders if decision == "COMMIT" else None)
            except _RETRYABLE:
                if time.monotonic() + backoff >= deadline:
                    raise
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)


def in_parallel(fn, args_by_group: Mapping[str, Any]) -> dict[str, Any]:
    """{group: fn(group, args)}, the calls in parallel: all but the last on the pool, the last
    in this thread (a hand-off less; with one group, none)."""
    items = list(args_by_group.items())
    futures = {g: _POOL.submit(fn, g, a) for g, a in items[:-1]}
    out = {}
    if items:
        last, args = items[-1]
        out[last] = fn(last, args)
    out.update((g, f.result()) for g, f in futures.items())
    return {g: out[g] for g, _ in items}


__all__ = ["CrossGroupResult", "CrossGroupTransaction", "GroupClient", "in_parallel"]
