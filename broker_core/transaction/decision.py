"""Transactions across broker groups: the coordinator, its decision, and what a participant asks.

One transaction id may prepare halves on several groups. Exactly one group, the
coordinator, holds the transaction's decision: a DECIDE op record in its op queue,
written (and replicated) before any participant is told to commit. The first decision
wins; a later conflicting one gets the first back. Participants never resolve a
cross-group transaction on their own: their engine asks the coordinator (through a
`DecisionAuthority`) before it commits or rolls back, and applies what it answers.

Every half of a cross-group transaction carries the coordinator's name and the
participant groups (PROP_COORDINATOR, PROP_PARTICIPANTS), so a participant knows whom to
ask after a restart, a failover, or a change of the cluster's groups.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from txmq.broker.errors import BadRequest

from .state import Resolution

# The coordinator group of a cross-group transaction, on each of its halves (and so on its final records).
PROP_COORDINATOR = "__TXMQ_COORD__"
# The participant groups, comma-separated and sorted, on each half: what a cluster-wide cut needs to know.
PROP_PARTICIPANTS = "__TXMQ_GROUPS__"
CROSS_GROUP_PROPERTIES = frozenset({PROP_COORDINATOR, PROP_PARTICIPANTS})
_GROUP = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


@dataclass(frozen=True)
class Decision:
    """The coordinator's durable answer for one cross-group transaction."""

    resolution: Resolution
    participants: tuple[str, ...]
    at_ms: int
    newly_decided: bool = False  # this call wrote it (False: it was there already)
    # a COMMIT of only these senders' halves, on every participant (the others roll back): a
    # Spark batch's successful task attempts; None: every half
    senders: tuple[str, ...] | None = None


@dataclass(frozen=True)
class CrossGroup:
    """What the halves of a cross-group transaction say about it."""

    coordinator: str
    participants: tuple[str, ...]


def coordinator_for(transaction_id: str, groups: Sequence[str]) -> str:
    """The coordinator of `transaction_id` among `groups`: a stable hash of the id over the sorted,
    distinct names, so every client and broker derives the same group without asking anyone."""
    names = sorted(set(groups))
    if not names:
        raise BadRequest("a cross-group transaction needs at least one group")
    return names[zlib.crc32(transaction_id.encode()) % len(names)]


def cross_group_properties(transaction_id: str, groups: Sequence[str]) -> dict[str, str]:
    """The properties each half of a cross-group transaction carries."""
    names = sorted(set(groups))
    for name in names:
        check_group_name(name)
    return {PROP_COORDINATOR: coordinator_for(transaction_id, names), PROP_PARTICIPANTS: ",".join(names)}


def check_group_name(name: str) -> str:
    if not isinstance(name, str) or not _GROUP.fullmatch(name):
        raise BadRequest(f"group name {name!r} is invalid: 1..128 letters, digits, '_', '.', '-'")
    return name


def cross_group_of(properties: Mapping[str, str]) -> CrossGroup | None:
    """The cross-group part of a half's properties (None: a single-group half); BadRequest when
    it is malformed (a coordinator that is not among the participants)."""
    coordinator = properties.get(PROP_COORDINATOR)
    if coordinator is None:
        if PROP_PARTICIPANTS in properties:
            raise BadRequest(f"{PROP_PARTICIPANTS} without {PROP_COORDINATOR}")
        return None
    participants = tuple(sorted(set(filter(None, properties.get(PROP_PARTICIPANTS, "").split(",")))))
    for name in (coordinator, *participants):
        check_group_name(name)
    if coordinator not in participants:
        raise BadRequest(f"coordinator group {coordinator!r} is not among the participants {participants}")
    return CrossGroup(coordinator, participants)


class DecisionAuthority(Protocol):
    """How a participant's engine reaches a transaction's coordinator (cluster/cross_tx.py)."""

    def is_coordinator(self, cross: CrossGroup) -> bool:
        """Whether this group coordinates `cross` (its engine then holds the decision itself)."""

    def settle(self, transaction_id: str, cross: CrossGroup, proposal: Resolution,
               senders: tuple[str, ...] | None = None) -> Decision:
        """Record `proposal` (of `senders`' halves; None: all) at the coordinator unless it holds a
        decision already, and return the decision (the first one wins). Raises
        CoordinatorUnavailable when it cannot be reached."""

    def lookup(self, transaction_id: str, cross: CrossGroup) -> Decision | None:
        """The coordinator's decision, None when it has none yet. Raises CoordinatorUnavailable."""
