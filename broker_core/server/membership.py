"""Consumer group membership for client-side rebalancing (the native ConsumerHeartbeat call).

Each member of a consumer group heartbeats with a time to live; every member then derives the
same allocation of queues from the sorted list of live members (client/allocation.py), as
RocketMQ's consumers do from the broker's list of a group's client ids. A single broker keeps
the list in memory; a cluster keeps it in etcd (cluster/membership.py) so any broker answers.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Protocol

from txmq.broker.errors import BadRequest

MAX_TTL_MS = 300_000


def check_heartbeat(group: str, member: str, ttl_ms: int) -> None:
    if not group:
        raise BadRequest("the heartbeat names no consumer group")
    if not member or len(member) > 256:
        raise BadRequest("a member id must be 1-256 characters")
    if not 0 < ttl_ms <= MAX_TTL_MS:
        raise BadRequest(f"ttl_ms must be within 1..{MAX_TTL_MS}, got {ttl_ms}")


class Membership(Protocol):
    def heartbeat(self, group: str, member: str, ttl_ms: int, *, leave: bool = False) -> list[str]:
        """Record that `member` is alive for `ttl_ms` (or leaves); the group's live members, sorted."""
        ...


class LocalMembership:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._groups: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def heartbeat(self, group: str, member: str, ttl_ms: int, *, leave: bool = False) -> list[str]:
        check_heartbeat(group, member, ttl_ms)
        now = self.clock()
        with self._lock:
            members = self._groups.setdefault(group, {})
            if leave:
                members.pop(member, None)
            else:
                members[member] = now + ttl_ms / 1000.0
            for m in [m for m, until in members.items() if until <= now]:
                del members[m]
            return sorted(members)
