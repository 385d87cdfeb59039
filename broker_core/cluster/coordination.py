"""etcd: the leader lease, the epoch counter, the in-sync set and the members of each group.

Keys under /txmq/groups/<group>/:
- leader   {"endpoint", "epoch"}; attached to the leader's lease, so it goes when the
           leader stops renewing (a crash, a pause, a partition).
- epoch    the last epoch handed out; raised by one in the transaction that elects.
- isr      {"epoch", "members", "ids", "vouched"}: replicas holding every acknowledged
           write, each with the id of its data directory (replica.json), and a log end
           they all held (the end of the last write acknowledged under sync, raised about
           once a second).
           Only the leader changes it, in a transaction that checks it still is the
           leader; only a member with that same data directory and a log at least that
           long may become leader (may_lead).
- replicas/<endpoint>  the id of the data directory a replica serves from (no lease):
           how many replicas the group has had, its size for the --min-insync default.
- members/<endpoint>  a replica's status (role, log end, lag), on its own lease.
- elections/<epoch, 12 digits>  {"endpoint", "epoch", "at_ms"}: who won each election and
           when (the winner's clock), written by the electing transaction, kept (no lease): the
           console's elections over time. ELECTIONS_KEPT of them are read back.

Everything goes through etcd's v3 JSON gateway (etcd3gw's HTTP session): compare-and-
swap transactions carry every decision, so no consensus is made here.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

ROOT = "/txmq/groups/"


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(data: str) -> bytes:
    return base64.b64decode(data)


def _prefix_end(prefix: str) -> str:
    """The range end that covers every key starting with `prefix` (etcd's prefix idiom)."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


class CoordinationUnavailable(Exception):
    """No etcd endpoint answered."""


ELECTIONS_KEPT = 50  # the newest elections cluster_status reports per group


@dataclass(frozen=True)
class LeaderRecord:
    endpoint: str
    epoch: int
    raw: bytes  # the key's value as stored: a leader's guard compares it
    lease: int = 0  # the lease the key lives on

    @classmethod
    def parse(cls, raw: bytes, lease: int = 0) -> "LeaderRecord":
        data = json.loads(raw)
        return cls(str(data["endpoint"]), int(data["epoch"]), raw, lease)


@dataclass(frozen=True)
class InSyncSet:
    epoch: int
    members: tuple[str, ...]
    revision: int  # mod revision of the key (0: absent)
    ids: dict[str, str] = field(default_factory=dict)  # member -> the id of the data directory vouched for
    vouched: int = 0  # a log end every member held (the end of the last write acknowledged under sync)


def may_lead(isr: InSyncSet, me: str, replica_id: str, log_end: int) -> str | None:
    """Why this replica may not lead the group (None: it may). Only a member of the in-sync set
    holds every acknowledged write, and only with the log that was vouched for: a wiped or
    replaced data directory has a new id, and a log shorter than what the set held lost
    acknowledged writes (Kafka's last-replica-standing problem, KIP-966; directory ids, KIP-858)."""
    if not isr.revision:
        return None  # a new group: nothing was acknowledged yet
    if me not in isr.members:
        return f"{me} is not in the in-sync set {list(isr.members)}: it may lack acknowledged writes"
    vouched_id = isr.ids.get(me)
    if vouched_id is not None and vouched_id != replica_id:
        return (f"{me} serves from data directory {replica_id}, not the one the in-sync set vouched for "
                f"({vouched_id}): it was wiped or replaced, so it follows until it has copied the log")
    if log_end < isr.vouched:
        return (f"{me}'s log ends at {log_end}, shorter than the {isr.vouched} bytes the in-sync set held: "
                f"it lost acknowledged writes")
    return None


class Coordination(Protocol):
    """What a replica needs of its coordinator (etcd here; a test may give another)."""

    ttl: int  # the lease's time to live, seconds
    lease_id: int | None

    def keepalive(self) -> bool: ...
    def lease_alive(self) -> bool: ...
    def leader(self) -> LeaderRecord | None: ...
    def in_sync(self) -> InSyncSet: ...
    def members(self) -> dict[str, dict]: ...
    def replicas(self) -> dict[str, str]: ...
    def register(self, endpoint: str, replica_id: str) -> None: ...
    def campaign(self, me: str, replica_id: str, log_end: int, alive: dict[str, str]) -> LeaderRecord | str: ...
    def set_in_sync(self, leader: LeaderRecord, ids: dict[str, str], vouched: int) -> bool: ...
    def put_member(self, endpoint: str, info: dict) -> None: ...
    def resign(self, leader: LeaderRecord) -> None: ...
    def abdicate(self, leader: LeaderRecord, ids: dict[str, str], vouched: int) -> bool: ...
    def close(self) -> None: ...


class EtcdGroup:
    """One replica's view of its group in etcd, with the replica's lease."""

    def __init__(self, endpoints: list[tuple[str, int]], group: str, lease_ttl_s: float,
                 *, timeout_s: float = 1.0) -> None:
        import etcd3gw  # a dependency, loaded here so only replicas pay for its import

        self.group = group
        self.prefix = f"{ROOT}{group}/"
        self.ttl = max(1, int(round(lease_ttl_s)))
        self._clients = [etcd3gw.Etcd3Client(host=h, port=p, timeout=timeout_s, api_path="/v3/")
                         for h, p in endpoints]
        self._errors = (etcd3gw.exceptions.ConnectionFailedError, etcd3gw.exceptions.ConnectionTimeoutError)
        self._answered_error = etcd3gw.exceptions.Etcd3Exception  # etcd answered, with an error
        self.lease_id: int | None = None
        # monotonic time until which the lease is surely alive: it was renewed (or granted) by a
        # request sent at t, so etcd holds it until at least t + ttl
        self.lease_valid_until = 0.0

    # --- transport ------------------------------------------------------------

    def _post(self, path: str, body: dict) -> dict:
        last: Exception | None = None
        for i, client in enumerate(self._clients):
            try:
                result = client.post(client.get_url(path), json=body)
                if i:  # the one that answered goes first next time
                    self._clients.insert(0, self._clients.pop(i))
                return result
            except self._errors as exc:
                last = exc
        raise CoordinationUnavailable(f"no etcd endpoint answered: {last}")

    def _get(self, key: str) -> dict | None:
        kvs = self._post("/kv/range", {"key": _b64(key)}).get("kvs") or []
        return kvs[0] if kvs else None

    def _txn(self, compare: list[dict], success: list[dict]) -> bool:
        return bool(self._post("/kv/txn", {"compare": compare, "success": success, "failure": []}).get("succeeded"))

    # --- the lease ----------------------------------------------------------------

    def keepalive(self) -> bool:
        """Renew (or first grant) this replica's lease; False when it was lost (expired)."""
        sent = time.monotonic()
        if self.lease_id is None:
            result = self._post("/lease/grant", {"TTL": self.ttl, "ID": 0})
            self.lease_id = int(result["ID"])
            self.lease_valid_until = sent + int(result.get("TTL", self.ttl))
            return True
        result = self._post("/lease/keepalive", {"ID": self.lease_id})
        ttl = int(result.get("result", {}).get("TTL", -1))
        if ttl <= 0:
            self.lease_id = None
            self.lease_valid_until = 0.0
            return False
        self.lease_valid_until = sent + ttl
        return True

    def lease_alive(self) -> bool:
        return time.monotonic() < self.lease_valid_until

    # --- reads ----------------------------------------------------------------------

    def leader(self) -> LeaderRecord | None:
        kv = self._get(self.prefix + "leader")
        return LeaderRecord.parse(_unb64(kv["value"]), int(kv.get("lease", 0))) if kv else None

    def in_sync(self) -> InSyncSet:
        kv = self._get(self.prefix + "isr")
        if kv is None:
            return InSyncSet(0, (), 0)
        data = json.loads(_unb64(kv["value"]))
        return InSyncSet(int(data["epoch"]), tuple(data["members"]), int(kv["mod_revision"]),
                         {str(k): str(v) for k, v in (data.get("ids") or {}).items()}, int(data.get("vouched", 0)))

    def replicas(self) -> dict[str, str]:
        """Every replica the group has had: endpoint -> the id of its data directory."""
        start = self.prefix + "replicas/"
        kvs = self._post("/kv/range", {"key": _b64(start), "range_end": _prefix_end(start)}).get("kvs") or []
        return {_unb64(kv["key"]).decode()[len(start):]: _unb64(kv["value"]).decode() for kv in kvs}

    def register(self, endpoint: str, replica_id: str) -> None:
        """Record the data directory `endpoint` serves from (kept when it stops: the group's size)."""
        self._post("/kv/put", {"key": _b64(self.prefix + "replicas/" + endpoint), "value": _b64(replica_id)})

    def epoch(self) -> tuple[int, int]:
        kv = self._get(self.prefix + "epoch")
        return (int(_unb64(kv["value"])), int(kv["mod_revision"])) if kv else (0, 0)

    def members(self) -> dict[str, dict]:
        start = self.prefix + "members/"
        kvs = self._post("/kv/range", {"key": _b64(start), "range_end": _prefix_end(start)}).get("kvs") or []
        out = {}
        for kv in kvs:
            info = json.loads(_unb64(kv["value"]))
            out[str(info["endpoint"])] = info
        return out

    # --- writes ---------------------------------------------------------------------

    def campaign(self, me: str, replica_id: str, log_end: int, alive: dict[str, str]) -> LeaderRecord | str:
        """Become leader if the group has none and may_lead allows it: one transaction creates
        the leader key on this lease, raises the epoch and writes the in-sync set (its live
        members still on the data directory vouched for; `alive`: endpoint -> the id each
        reports). The record, or why not (another replica won, or this one may not lead)."""
        isr = self.in_sync()
        refused = may_lead(isr, me, replica_id, log_end)
        if refused is not None:
            return refused
        epoch, epoch_rev = self.epoch()
        record_raw = json.dumps({"endpoint": me, "epoch": epoch + 1}).encode()
        ids = {m: alive[m] for m in isr.members if m in alive and isr.ids.get(m, alive[m]) == alive[m]}
        ids[me] = replica_id
        won = self._txn(
            [{"key": _b64(self.prefix + "leader"), "result": "EQUAL", "target": "CREATE", "create_revision": 0},
             {"key": _b64(self.prefix + "epoch"), "result": "EQUAL", "target": "MOD", "mod_revision": epoch_rev},
             {"key": _b64(self.prefix + "isr"), "result": "EQUAL", "target": "MOD", "mod_revision": isr.revision}],
            [{"request_put": {"key": _b64(self.prefix + "leader"), "value": _b64(record_raw), "lease": self.lease_id}},
             {"request_put": {"key": _b64(self.prefix + "epoch"), "value": _b64(str(epoch + 1))}},
             {"request_put": {"key": _b64(f"{self.prefix}elections/{epoch + 1:012d}"),
                              "value": _b64(json.dumps({"endpoint": me, "epoch": epoch + 1,
                                                        "at_ms": int(time.time() * 1000)}).encode())}},
             {"request_put": {"key": _b64(self.prefix + "isr"),
                              "value": _b64(self._isr_value(epoch + 1, ids, isr.vouched))}}])
        return LeaderRecord(me, epoch + 1, record_raw, self.lease_id or 0) if won else "another replica won"

    @staticmethod
    def _isr_value(epoch: int, ids: dict[str, str], vouched: int) -> str:
        return json.dumps({"epoch": epoch, "members": sorted(ids), "ids": dict(sorted(ids.items())),
                           "vouched": vouched})

    def set_in_sync(self, leader: LeaderRecord, ids: dict[str, str], vouched: int) -> bool:
        """Write the in-sync set (member -> its data directory's id) and the log end they all
        hold, only while `leader` still holds the leader key."""
        return self._txn(
            [{"key": _b64(self.prefix + "leader"), "result": "EQUAL", "target": "VALUE", "value": _b64(leader.raw)}],
            [{"request_put": {"key": _b64(self.prefix + "isr"), "value": _b64(self._isr_value(leader.epoch, ids,
                                                                                               vouched))}}])

    def put_member(self, endpoint: str, info: dict) -> None:
        self._post("/kv/put", {"key": _b64(self.prefix + "members/" + endpoint),
                               "value": _b64(json.dumps(info)), "lease": self.lease_id})

    def resign(self, leader: LeaderRecord) -> None:
        """Give the leader key up (a clean stop), if this replica still holds it."""
        self._txn(
            [{"key": _b64(self.prefix + "leader"), "result": "EQUAL", "target": "VALUE", "value": _b64(leader.raw)}],
            [{"request_delete_range": {"key": _b64(self.prefix + "leader")}}])

    def abdicate(self, leader: LeaderRecord, ids: dict[str, str], vouched: int) -> bool:
        """Give the leader key up and leave the in-sync set in one transaction, while `leader` still
        holds the key: `ids` (the other members, each with its data directory) hold every
        acknowledged write, so one of them is elected, and this replica may not lead again until it
        has caught up with the next leader (no election ping-pong back to a leader cut off)."""
        assert ids, "a leader abdicates only to in-sync followers"
        return self._txn(
            [{"key": _b64(self.prefix + "leader"), "result": "EQUAL", "target": "VALUE", "value": _b64(leader.raw)}],
            [{"request_delete_range": {"key": _b64(self.prefix + "leader")}},
             {"request_put": {"key": _b64(self.prefix + "isr"),
                              "value": _b64(self._isr_value(leader.epoch, ids, vouched))}}])

    # --- plain keys (the route registry) ------------------------------------------------

    def range_prefix(self, prefix: str) -> list[tuple[str, bytes, int]]:
        """(key, value, mod revision) of every key under `prefix`."""
        kvs = self._post("/kv/range", {"key": _b64(prefix), "range_end": _prefix_end(prefix)}).get("kvs") or []
        return [(_unb64(kv["key"]).decode(), _unb64(kv["value"]), int(kv["mod_revision"])) for kv in kvs]

    def put_if_revision(self, key: str, value: bytes, mod_revision: int) -> bool:
        """Write `key` only if its mod revision is still `mod_revision` (0: only if absent)."""
        target = ({"target": "CREATE", "create_revision": 0} if mod_revision == 0
                  else {"target": "MOD", "mod_revision": mod_revision})
        return self._txn([{"key": _b64(key), "result": "EQUAL", **target}],
                         [{"request_put": {"key": _b64(key), "value": _b64(value)}}])

    def put(self, key: str, value: bytes, lease: int = 0) -> None:
        self._post("/kv/put", {"key": _b64(key), "value": _b64(value), **({"lease": lease} if lease else {})})

    def delete(self, key: str) -> None:
        self._post("/kv/deleterange", {"key": _b64(key)})

    def grant(self, ttl_s: int) -> int:
        """A new lease of its own (not this replica's): for keys that outlive no client."""
        return int(self._post("/lease/grant", {"TTL": max(1, int(ttl_s)), "ID": 0})["ID"])

    def refresh(self, lease: int) -> bool:
        """Renew `lease`; False when it has expired."""
        return int(self._post("/lease/keepalive", {"ID": lease}).get("result", {}).get("TTL", -1)) > 0

    def close(self) -> None:
        if self.lease_id is not None:
            try:
                self._post("/kv/lease/revoke", {"ID": self.lease_id})
            except CoordinationUnavailable:
                pass  # etcd unreachable: the lease expires by itself
            except self._answered_error:
                pass  # the lease had already expired: nothing left to revoke
            self.lease_id = None


class EtcdKV(Protocol):
    """Plain reads and compare-and-swap writes: what the route registry needs of etcd."""

    def range_prefix(self, prefix: str) -> list[tuple[str, bytes, int]]: ...
    def put_if_revision(self, key: str, value: bytes, mod_revision: int) -> bool: ...
    def put(self, key: str, value: bytes, lease: int = 0) -> None: ...
    def delete(self, key: str) -> None: ...
    def grant(self, ttl_s: int) -> int: ...
    def refresh(self, lease: int) -> bool: ...


def cluster_status(endpoints: list[tuple[str, int]], group: str | None = None) -> dict[str, Any]:
    """{"groups": {name: {"leader", "epoch", "members": [...]}}} for `txmq cluster status`."""
    probe = EtcdGroup(endpoints, "_", 1)
    kvs = probe._post("/kv/range", {"key": _b64(ROOT), "range_end": _prefix_end(ROOT)}).get("kvs") or []
    names = sorted({_unb64(kv["key"]).decode()[len(ROOT):].split("/", 1)[0] for kv in kvs})
    out: dict[str, Any] = {"groups": {}}
    for name in names:
        if group is not None and name != group:
            continue
        g = EtcdGroup(endpoints, name, 1)
        leader = g.leader()
        isr = g.in_sync()
        epoch, _ = g.epoch()
        members = g.members()
        leader_end = members.get(leader.endpoint, {}).get("log_end", 0) if leader else 0
        rows = []
        for endpoint in sorted(set(members) | set(isr.members)):
            info = members.get(endpoint, {})
            rows.append({
                "endpoint": endpoint,
                "role": "leader" if leader and leader.endpoint == endpoint else ("follower" if info else "down"),
                "in_sync": endpoint in isr.members,
                "alive": bool(info),
                "log_end": info.get("log_end"),
                "lag_bytes": max(0, leader_end - info.get("log_end", 0)) if info else None,
                "lag_seconds": info.get("lag_seconds"),
                "replica_id": info.get("replica_id"),
                # a replica of a release before versions reports none of these: wire 1, format 1
                "version": info.get("version"), "replication_wire": info.get("replication_wire", 1 if info else None),
                "store_format": info.get("store_format", 1 if info else None),
                **({"may_not_lead": info["may_not_lead"]} if info.get("may_not_lead") else {}),
                **({"last_take_over": info["last_take_over"]} if info.get("last_take_over") else {}),
            })
        elections = [json.loads(value) for _, value, _ in g.range_prefix(g.prefix + "elections/")]
        out["groups"][name] = {"leader": leader.endpoint if leader else None, "epoch": epoch,
                               "vouched": isr.vouched, "members": rows,
                               "elections": elections[-ELECTIONS_KEPT:][::-1]}  # newest first
    out.update(_moves_status(probe))
    return out


def _moves_status(etcd: EtcdGroup) -> dict[str, Any]:
    """Moves in the route registry (routes.py, moves.py): queues being moved, queues that moved
    (each with where it is written now and from which offset), retired groups."""
    from .routes import RETIRED_ROOT, TOPICS_ROOT, TopicLayout

    moving, moved = [], []
    for key, value, rev in etcd.range_prefix(TOPICS_ROOT):
        layout = TopicLayout.parse(key[len(TOPICS_ROOT):], value, rev)
        for q in layout.queues:
            name = f"{q.group}:{q.queue_id}"
            if q.sealing:
                moving.append({"topic": layout.name, "queue": name, "from": q.current.group, "to": q.sealing})
            if q.moves:
                moved.append({"topic": layout.name, "queue": name, "on": q.current.group,
                              "segments": [{"group": s.group, "queue_id": s.queue_id, "from_offset": s.base}
                                           for s in q.segments]})
    retired = sorted(k[len(RETIRED_ROOT):] for k, _, _ in etcd.range_prefix(RETIRED_ROOT))
    from .copier import copy_progress
    return {"moving": moving, "moved": moved, "retired": retired, "copies": copy_progress(etcd)}
