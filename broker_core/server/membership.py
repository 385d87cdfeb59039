"""Consumer group membership for client-side rebalancing (the native ConsumerHeartbeat call).

Each member of a consumer group heartbeats with a time to live; every member then derives the
same allocation of queues from the sorted list of live members (client/allocation.py), as
RocketMQ's consumers do from the broker's list of a group's client ids. A single broker keeps
the list in memory; a cluster keeps it in etcd (cluster/membership.py) so any broker answers.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from txmq.broker.errors import BadRequest

MAX_TTL_MS = 300_000


@dataclass(frozen=True)
class MemberInfo:
    """What the console shows of a member: who, from where, when last, and which queues it holds.
    `pop` members (RocketMQ 5 pop consumers) hold no queue of their own and take no share in
    the native allocation, so they are left out of the member list a heartbeat answers."""
    address: str = ""
    client: str = ""
    last_heartbeat_ms: int = 0
    pop: bool = False
    queues: tuple[tuple[str, str, int], ...] = field(default=())  # (topic, broker group, queue id)

    def to_json(self) -> bytes:
        return json.dumps({"address": self.address, "client": self.client, "at": self.last_heartbeat_ms,
                           "pop": self.pop, "queues": [list(q) for q in self.queues]}).encode()

    @staticmethod
    def from_json(raw: bytes) -> "MemberInfo":
        try:
            d = json.loads(raw)
        except ValueError:
            d = None
        if not isinstance(d, dict):  # written by a broker from before members carried details
            return MemberInfo()
        return MemberInfo(d.get("address", ""), d.get("client", ""), int(d.get("at", 0)), bool(d.get("pop")),
                          tuple((t, g, int(q)) for t, g, q in d.get("queues", ())))


def heard_now(info: MemberInfo | None) -> MemberInfo:
    """The heartbeat's details, or bare ones stamped now (a caller that gave none)."""
    return info or MemberInfo(last_heartbeat_ms=int(time.time() * 1000))


def check_heartbeat(group: str, member: str, ttl_ms: int) -> None:
    if not group:
        raise BadRequest("the heartbeat names no consumer group")
    if not member or len(member) > 256:
        raise BadRequest("a member id must be 1-256 characters")
    if not 0 < ttl_ms <= MAX_TTL_MS:
        raise BadRequest(f"ttl_ms must be within 1..{MAX_TTL_MS}, got {ttl_ms}")


class Membership(Protocol):
    def heartbeat(self, group: str, member: str, ttl_ms: int, *, leave: bool = False,
                  info: MemberInfo | None = None) -> list[str]:
        """Record that `member` is alive for `ttl_ms` (or leaves); the group's live members that
        share queues by allocation (not pop members), sorted."""
        ...

    def members(self, group: str) -> dict[str, MemberInfo]:
        """The group's live members (pop ones too) with what their last heartbeats said."""
        ...

    def groups(self) -> list[str]:
        """The consumer groups with a live member, sorted."""
        ...


class LocalMembership:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._groups: dict[str, dict[str, tuple[float, MemberInfo]]] = {}
        self._lock = threading.Lock()

    def heartbeat(self, group: str, member: str, ttl_ms: int, *, leave: bool = False,
                  info: MemberInfo | None = None) -> list[str]:
        check_heartbeat(group, member, ttl_ms)
        now = self.clock()
        with self._lock:
            members = self._groups.setdefault(group, {})
            if leave:
                members.pop(member, None)
            else:
                members[member] = (now + ttl_ms / 1000.0, heard_now(info))
            self._expire(members, now)
            return sorted(m for m, (_, i) in members.items() if not i.pop)

    def members(self, group: str) -> dict[str, MemberInfo]:
        with self._lock:
            members = self._groups.get(group, {})
            self._expire(members, self.clock())
            return {m: i for m, (_, i) in sorted(members.items())}

    def groups(self) -> list[str]:
        with self._lock:
            now = self.clock()
            for members in self._groups.values():
                self._expire(members, now)
            return sorted(g for g, members in self._groups.items() if members)

    @staticmethod
    def _expire(members: dict[str, tuple[float, MemberInfo]], now: float) -> None:
        for m in [m for m, (until, _) in members.items() if until <= now]:
            del members[m]
