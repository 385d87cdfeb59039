"""Consumer group membership across a cluster: /txmq/consumers/<group>/<member> in etcd, each
key on a lease of the member's time to live, so a member that stops heartbeating drops out
whichever broker it last talked to."""

from __future__ import annotations

import math
import threading

from txmq.broker.server.membership import MemberInfo, check_heartbeat, heard_now

from .coordination import EtcdKV

CONSUMERS_ROOT = "/txmq/consumers/"


class EtcdMembership:
    def __init__(self, etcd: EtcdKV) -> None:
        self.etcd = etcd
        self._leases: dict[tuple[str, str], int] = {}  # the leases this broker granted, by member
        self._lock = threading.Lock()

    def heartbeat(self, group: str, member: str, ttl_ms: int, *, leave: bool = False,
                  info: MemberInfo | None = None) -> list[str]:
        check_heartbeat(group, member, ttl_ms)
        value = heard_now(info).to_json()
        key = f"{CONSUMERS_ROOT}{group}/{member}"
        with self._lock:
            lease = self._leases.get((group, member))
        if leave:
            self.etcd.delete(key)
            with self._lock:
                self._leases.pop((group, member), None)
        elif lease is None or not self.etcd.refresh(lease):
            # first heartbeat here (or the lease ran out): a lease of the member's own
            lease = self.etcd.grant(math.ceil(ttl_ms / 1000))
            self.etcd.put(key, value, lease)
            with self._lock:
                self._leases[(group, member)] = lease
        else:
            self.etcd.put(key, value, lease)  # its last heartbeat's time and queues, for the console
        return sorted(m for m, i in self.members(group).items() if not i.pop)

    def members(self, group: str) -> dict[str, MemberInfo]:
        prefix = f"{CONSUMERS_ROOT}{group}/"
        return {k[len(prefix):]: MemberInfo.from_json(v) for k, v, _ in sorted(self.etcd.range_prefix(prefix))}

    def groups(self) -> list[str]:
        # a member's key lives on its own lease, so every group listed has a live member
        return sorted({k[len(CONSUMERS_ROOT):].split("/", 1)[0] for k, _, _ in self.etcd.range_prefix(CONSUMERS_ROOT)})
