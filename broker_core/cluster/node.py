"""One replica of a broker group through its roles: follower, candidate, leader, fenced.

The replica keeps one gRPC server for its life (the endpoint clients and peers know).
Its Replication service answers while it leads; its client services are routed by
role (roles.py). One thread runs the replica's decisions every TICK_S: it renews the
etcd lease, watches the leader key, campaigns when the group has no leader and this
replica is in sync, keeps the in-sync set while it leads, and steps down the moment
its lease or leadership is gone. A leader serves through the same BrokerCore as a
single broker, built on the store it replicated into while it followed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import grpc

from txmq.broker import __version__, versions
from txmq.broker.server.auth import Authenticator, authorization_header, format_date_time
from txmq.broker.server.addresses import announced_host
from txmq.broker.server.broker import (Broker, BrokerCore, bind, make_grpc_server, start_loading_serving_code,
                                       store_config, transaction_config)
from txmq.broker.errors import BrokerUnavailable, NotLeader
from txmq.broker.protocol import keepalive
from txmq.broker.server.config import BrokerConfig
from txmq.broker.server.topic_types import TopicType
from txmq.broker.store.durable import write_bytes_atomically
from txmq.broker.store.message_store import MessageStore
from txmq.broker.transaction.standby import StandbyTable

from .coordination import Coordination, CoordinationUnavailable, EtcdGroup, LeaderRecord
from .epochs import LeaderEpochs
from .replication import SERVICE_NAME, Follower, ReplicationLeader, replication_method_handlers
from .roles import RoleRouter
from .membership import EtcdMembership
from .copier import HistoryCopier
from .moves import QueueMover
from .routes import GroupRoute, RouteRegistry, RouteView

log = logging.getLogger("txmq.cluster")

TICK_S = 0.1
STATUS_EVERY_S = 0.5
RECONCILE_EVERY_S = 1.0
# How often a follower reads the leader key while that leader answers its fetches: a leader
# that dies, is fenced or stops answering sends it back to reading it every tick.
LEADER_READ_WHILE_SERVED_S = 1.0
# How often a leader records in etcd the log end its in-sync set holds (the vouched offset): a
# replica whose log is shorter may not lead.
VOUCH_EVERY_S = 1.0
# A leader under sync replication that has heard no fetch from its in-sync followers for CUT_OFF_S,
# too few left to acknowledge, while one of them reports in etcd (its member status, on its own
# lease) that this leader has not answered it for REPORT_SILENT_S, is cut off from them but not
# from etcd: it abdicates to them instead of holding a lease under which it can acknowledge nothing.
CUT_OFF_S = 1.5
REPORT_SILENT_S = 1.0  # also how long a follower forwards client calls to a leader that does not answer it
STANDBY_EVERY_S = 0.5  # how often a follower replays what it replicated into its standby transaction table
REPORT_GRACE_S = 1.0  # how much longer such a follower stays in the set, for its report to reach etcd
IDENTITY_FILE = "replica.json"
EPOCH_FILE = "leader-epochs.json"


class ReplicaNode:
    def __init__(self, config: BrokerConfig) -> None:
        assert config.etcd and config.group, "a replica needs etcd endpoints and a group"
        self.config = config
        self.group = config.group
        self.data_dir = Path(config.data_dir)
        self.store: MessageStore | None = None
        self.epochs: LeaderEpochs | None = None
        self.lead: ReplicationLeader | None = None
        self.broker: Broker | None = None
        self.follower: Follower | None = None
        self.waiting_on: LeaderRecord | None = None  # a leader key this replica does not follow (its own old one)
        self.elections_won = 0
        self.demotions = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_keepalive = 0.0
        self._next_status = 0.0
        self._next_reconcile = 0.0
        self._next_leader_read = 0.0
        self._next_vouch = 0.0
        self.vouched = 0  # the log end this leader last recorded as its in-sync set's
        self.registered = False  # this replica's data directory is in etcd's registry of the group
        self.refused: str | None = None  # why this replica may not lead now (logged once)
        self.replica_id = ""  # the id of the data directory (replica.json): a wiped one gets a new one
        self.etcd_ok = False
        self.last_take_over: dict | None = None  # this replica's last promotion: its phases and replay

    # --- start and stop -------------------------------------------------------------

    def start(self) -> tuple[str, int]:
        cfg = self.config
        self.replica_id = self._check_identity()
        self.epochs = LeaderEpochs(self.data_dir / EPOCH_FILE)
        self.store = MessageStore(store_config(cfg, replica=True))
        self.store.retain(self)
        self.standby: StandbyTable | None = StandbyTable(self.store, transaction_config(cfg))
        try:
            self.auth = Authenticator.from_file(cfg.auth_file) if cfg.auth_file else Authenticator.disabled()
            if self.auth.enabled and self.auth.replica_account() is None:
                raise ValueError(f"auth file {cfg.auth_file} has no admin account: the replicas of a group sign "
                                 f"their replication calls with the first one")
            self.router = RoleRouter(self._peer_channel)
            self.server = make_grpc_server(cfg, self.auth, [self.router])
            self.server.add_registered_method_handlers(
                SERVICE_NAME, replication_method_handlers(lambda: self.lead, self.group, self._authorize_replica))
            host, port = cfg.listen_host_port
            self.listener = bind(self.server, cfg, host, port)
            self.port = self.listener.port
            self.me = f"{announced_host(host, cfg.advertised_host)}:{self.port}"
            self.server.start()
            self.etcd: Coordination = EtcdGroup(cfg.etcd_endpoints, self.group, cfg.lease_ttl_s)
            self.membership = EtcdMembership(EtcdGroup(cfg.etcd_endpoints, self.group, cfg.lease_ttl_s))
            self.routes = RouteView(RouteRegistry(EtcdGroup(cfg.etcd_endpoints, self.group, cfg.lease_ttl_s)),
                                    self.group, self._create_share)
            self.moves = QueueMover(self.routes, self._call_leader, resume_after_s=cfg.move_resume_after_s)
            self.moves.copier = self.copier = HistoryCopier(self.routes, self._open_group)
        except BaseException:
            self.store.close()
            raise
        self._thread = threading.Thread(target=self._run, name="txmq-replica", daemon=True)
        self._thread.start()
        # a warm standby: the transaction table and the code its first minute as leader would need
        self._standby_thread = threading.Thread(target=self._keep_standby, name="txmq-standby", daemon=True)
        self._standby_thread.start()
        start_loading_serving_code()
        return host, self.port

    def lowest_needed_offset(self) -> int | None:
        """The store's RetentionFloor while this replica does not lead: a follower deletes nothing
        its leader still keeps (the leader's retention knows what its timer and readers still
        need; a follower does not, and may lead next). A leader's own floors decide alone."""
        if self.lead is not None:
            return None
        follower = self.follower
        if follower is None or follower.leader_log_start is None:
            return 0  # no leader heard from yet: keep everything
        return follower.leader_log_start

    # --- peers --------------------------------------------------------------------

    def _peer_channel(self, endpoint: str) -> grpc.Channel:
        """A channel to another replica of the group: TLS with the replicas' certificate when they
        serve TLS (they share it), plain otherwise."""
        cfg = self.config
        options = [("grpc.max_receive_message_length", cfg.max_message_bytes),
                   ("grpc.max_send_message_length", cfg.max_message_bytes), *keepalive.CHANNEL_OPTIONS]
        if cfg.tls_cert:
            creds = grpc.ssl_channel_credentials(root_certificates=Path(cfg.tls_cert).read_bytes())
            return grpc.secure_channel(endpoint, creds, options=options)
        return grpc.insecure_channel(endpoint, options=options)

    def _peer_metadata(self) -> list[tuple[str, str]]:
        """What a follower's replication calls carry: a signature of the shared admin account."""
        account = self.auth.replica_account()
        if account is None:
            return []
        now = format_date_time()
        return [("x-mq-date-time", now),
                ("authorization", authorization_header(account.access_key, account.secret_key, now))]

    def _authorize_replica(self, context) -> None:
        """Only a replica (a caller signed with an admin account) may read the log."""
        if self.auth.enabled:
            self.auth.authenticate(context.invocation_metadata()).require_admin()

    def _check_identity(self) -> str:
        """The data directory's id. A data directory belongs to one group for life: another group's
        log would be taken for this group's and its tail cut or, worse, served. Its id, made when
        the directory is (KIP-858's directory id), binds the replica to its log: a wiped or
        replaced directory is a new replica, which may not lead until it has copied the log."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / IDENTITY_FILE
        if path.exists():
            identity = json.loads(path.read_text())
            owner = identity.get("group")
            if owner != self.group:
                raise ValueError(f"data directory {self.data_dir} holds a replica of group {owner!r}, "
                                 f"not {self.group!r}: give this replica an empty data directory")
            if identity.get("replica_id"):
                return str(identity["replica_id"])
        elif (self.data_dir / "commitlog").exists() and any((self.data_dir / "commitlog").iterdir()):
            raise ValueError(f"data directory {self.data_dir} holds a single broker's data, not a replica's: "
                             f"a replica starts empty and copies its group's log")
        replica_id = uuid.uuid4().hex
        write_bytes_atomically(path, json.dumps({"group": self.group, "replica_id": replica_id}).encode())
        return replica_id

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        try:
            if self.lead is not None:
                record = self.lead.record
                self._step_down("the replica is stopping", reopen=False)
                try:
                    self.etcd.resign(record)  # the group elects at once instead of after the lease
                except CoordinationUnavailable:
                    pass
            else:
                self._stop_following()
                self._take_standby()  # its last advance ends before the store closes
                if self.store is not None:
                    self.store.close()
        finally:
            self.server.stop(2).wait(5)
            self.listener.close()  # after the server: its calls end through the TLS forwarder
            self.etcd.close()

    # --- the decision loop -------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
                self.etcd_ok = True
            except CoordinationUnavailable as exc:
                if self.etcd_ok:
                    log.error("group %s: etcd unreachable (%s)%s", self.group, exc,
                              "; the leader stops acknowledging when its lease runs out" if self.lead else "")
                self.etcd_ok = False
                if self.lead is not None and not self.etcd.lease_alive():
                    self._step_down("its etcd lease could not be renewed (etcd unreachable)")
            except Exception:
                log.exception("group %s: replica step failed", self.group)
            self._stop.wait(TICK_S)

    def _keep_standby(self) -> None:
        while not self._stop.wait(STANDBY_EVERY_S):
            standby = self.standby
            if standby is None or self.lead is not None:
                continue
            try:
                standby.advance()
            except Exception:
                log.exception("group %s: the standby transaction table could not advance", self.group)

    def _take_standby(self):
        standby, self.standby = self.standby, None
        return standby.take() if standby is not None else None

    def _tick(self) -> None:
        now = time.monotonic()
        if not self.registered:
            self.etcd.register(self.me, self.replica_id)
            self.registered = True
        if now >= self._next_keepalive:
            alive = self.etcd.keepalive()
            self._next_keepalive = now + self.etcd.ttl / 4
            if not alive and self.lead is not None:
                self._step_down("its etcd lease expired")
            if not alive:
                self.etcd.keepalive()  # a new lease: this replica is a member again
            self._put_status()
        elif now >= self._next_status:
            self._put_status()
        if self.lead is None and now < self._next_leader_read and self.follower is not None \
                and self.follower.served_recently() and self.router.role == "follower":
            return  # the leader it follows answers it and client calls go there: nothing to decide
        leader = self.etcd.leader()
        self._next_leader_read = now + LEADER_READ_WHILE_SERVED_S
        if self.lead is not None:
            self._lead_tick(leader)
        else:
            self._follow_tick(leader)

    def _lead_tick(self, leader: LeaderRecord | None) -> None:
        lead = self.lead
        assert lead is not None
        if leader is None or leader.raw != lead.record.raw:
            self._step_down(f"the leader key now names {leader.endpoint if leader else 'nobody'}")
            return
        if not self.etcd.lease_alive() or lead.fenced:
            self._step_down(lead.fenced_reason or "its etcd lease expired")
            self.etcd.resign(leader)  # the key may outlive the fencing (etcd restored the lease): an election follows
            return
        if self._abdicate_if_cut_off(lead):
            return
        if time.monotonic() >= self._next_reconcile:
            self._next_reconcile = time.monotonic() + RECONCILE_EVERY_S
            self._reconcile_topics()
            lead.min_insync = self._min_insync()  # the group may have grown
        acked = lead.acked_through  # read first: a follower added below holds at least this much
        drop, add = lead.in_sync_changes()
        if drop and lead.sync and len(lead.in_sync - drop) < lead.min_insync:
            # too few would be left to acknowledge: a follower that stopped fetching may yet report this
            # leader silent (then it abdicates to it, and a follower out of the set could not lead), so
            # it is dropped only once it had time to say so; one that fetches but lags is dropped now
            drop = {f for f in drop if lead.fetch_silence(f) < CUT_OFF_S
                    or lead.fetch_silence(f) >= self.config.replica_lag_max_s + REPORT_GRACE_S}
        if drop or add:
            members = lead.in_sync_ids((set(lead.in_sync) - drop) | add)
            if self.etcd.set_in_sync(lead.record, {**members, self.me: self.replica_id}, self._vouch(acked)):
                log.warning("group %s: in-sync set now %s (dropped %s, added %s)", self.group,
                            sorted(set(members) | {self.me}), sorted(drop), sorted(add))
                lead.set_in_sync(members)
        elif acked > self.vouched and time.monotonic() >= self._next_vouch:
            self.etcd.set_in_sync(lead.record, {**lead.ids, self.me: self.replica_id}, self._vouch(acked))

    def _abdicate_if_cut_off(self, lead: ReplicationLeader) -> bool:
        """Hand leadership to the in-sync followers when this leader is cut off from them but not
        from etcd (see CUT_OFF_S): they report it silent on their own leases, so they are alive
        and reach etcd, and they hold every acknowledged write. A follower that is dead or cut
        from etcd reports nothing (its status key goes with its lease) and is dropped from the
        in-sync set as usual. True when it abdicated."""
        if not lead.sync:
            return False
        silent = lead.silent_in_sync(CUT_OFF_S)
        if not silent or len(lead.in_sync) - len(silent) >= lead.min_insync:
            return False
        reporters = self._silent_reporters(lead, silent)
        if not reporters:
            return False
        reason = (f"cut off from its in-sync followers {reporters} (no fetch for {CUT_OFF_S:g}s) while they "
                  f"reach etcd: it abdicates so that one of them leads")
        record = lead.record
        lead.fence(reason)  # acknowledges nothing from here on, before etcd hears of it
        ids = dict(lead.ids)  # the in-sync followers, each on the data directory vouched for
        abdicated = self.etcd.abdicate(record, ids, self._vouch(lead.acked_through))
        self._step_down(reason)
        if not abdicated:
            log.warning("group %s: the leader key changed before %s could abdicate", self.group, self.me)
        return True

    def _silent_reporters(self, lead: ReplicationLeader, silent: set[str]) -> list[str]:
        """Those of `silent` (in-sync followers this leader has not heard from) that report in etcd,
        on their own leases, following this leader's epoch on the data directory vouched for and not
        answered by it for REPORT_SILENT_S: alive, reaching etcd, and cut off from this leader."""
        members = self.etcd.members()
        return sorted(
            f for f in silent
            if (info := members.get(f)) is not None and info.get("role") == "follower"
            and info.get("leader") == self.me and info.get("epoch") == lead.record.epoch
            and info.get("replica_id") == lead.ids.get(f) and info.get("leader_silent_s", 0) >= REPORT_SILENT_S)

    def _drop_unreachable_before_serving(self, lead: ReplicationLeader, end: int) -> None:
        """A new leader waiting for its in-sync followers to hold its log drops, before
        --replica-lag-max, the behind ones that both sides say cannot reach it (no fetch for
        CUT_OFF_S here, and their own report of it silent), when enough stay in sync to acknowledge.
        Dropping a member loses nothing acknowledged (this leader and the rest hold it all; the
        dropped one may only no longer lead), the same step the deadline takes, on better evidence."""
        behind = {f for f in lead.silent_in_sync(CUT_OFF_S) if lead.followers[f].offset < end}
        if not behind or len(lead.in_sync) - len(behind) < max(lead.min_insync, 1):
            return  # none to drop, or too few would be left: the deadline decides, as before
        dropped = set(self._silent_reporters(lead, behind))
        if not dropped or len(lead.in_sync) - len(dropped) < max(lead.min_insync, 1):
            return
        members = {f: i for f, i in lead.ids.items() if f not in dropped}
        if not self.etcd.set_in_sync(lead.record, {**members, self.me: self.replica_id}, self.vouched):
            raise RuntimeError("the in-sync set could not be written: another replica leads")
        log.warning("group %s: in-sync set now %s (dropped %s: alive in etcd, cannot reach the new leader)",
                    self.group, sorted(set(members) | {self.me}), sorted(dropped))
        lead.set_in_sync(members)

    def _vouch(self, acked: int) -> int:
        """The log end the in-sync set holds, as the next write to etcd records it: the end of the
        last write acknowledged under sync (a write boundary, so a replica's recovery never cuts
        below it; under async, acknowledged writes are not promised to survive the leader)."""
        self._next_vouch = time.monotonic() + VOUCH_EVERY_S
        self.vouched = max(self.vouched, acked)
        return self.vouched

    def _min_insync(self) -> int:
        """Followers a sync write waits for: --min-insync, or by default one in a group of two or
        more replicas and none in a group of one. The group's size is --replicas, or else the
        replicas that have joined it so far (etcd's registry, which outlives them)."""
        if self.config.min_insync is not None:
            return self.config.min_insync
        size = max(self.config.replicas or 0, len(self.etcd.replicas()), 1)
        return min(1, size - 1)

    def _follow_tick(self, leader: LeaderRecord | None) -> None:
        if leader is None:
            self.waiting_on = None
            if self.follower is not None and self.follower.error:
                return  # this replica cannot hold the group's log
            alive = {m: str(info.get("replica_id", "")) for m, info in self.etcd.members().items()}
            won = self.etcd.campaign(self.me, self.replica_id, self.store.commitlog.write_end, alive)
            if isinstance(won, LeaderRecord):
                self.refused = None
                self._promote(won)
            elif won != self.refused:
                self.refused = won
                log.warning("group %s: %s may not lead: %s", self.group, self.me, won)
            return
        if leader.endpoint == self.me:
            if leader.lease == self.etcd.lease_id:
                self.etcd.resign(leader)  # this replica stepped down while etcd was away: let the group elect
                return
            # this replica's own key from before a restart: not this lease, so wait for it to expire
            if self.waiting_on != leader:
                self.waiting_on = leader
                self._stop_following()
                self.router.unavailable(f"group {self.group}: waiting for the previous leader's lease to expire")
            return
        if self.follower is None or self.follower.leader != leader:
            self._stop_following()
            self.router.unavailable(f"group {self.group}: replica {self.me} has not reached its new leader "
                                    f"{leader.endpoint} yet")
            self.follower = Follower(self.store, self.epochs, leader, group=self.group, me=self.me,
                                     sync_flush=self.config.flush == "sync",
                                     state_dir=self.data_dir / "transaction",
                                     channel=self._peer_channel(leader.endpoint), metadata=self._peer_metadata,
                                     replica_id=self.replica_id)
            self.follower.start()
            log.info("group %s: following %s (epoch %d)", self.group, leader.endpoint, leader.epoch)
        self._route_to_leader(leader)

    def _route_to_leader(self, leader: LeaderRecord) -> None:
        """Forward client calls to the leader only while it answers this replica's fetches: a call
        passed to a leader that does not answer hangs until the client's deadline (one-way and
        partial partitions), where a refusal sends the client to another replica at once."""
        follower = self.follower
        assert follower is not None and follower.leader == leader
        if follower.reaches_leader(REPORT_SILENT_S):
            if self.router.role != "follower":
                self.router.forward_to(leader.endpoint)
        elif self.router.role == "follower":  # its calls in flight to the leader end with the channel
            silent = follower.leader_silent_s()
            self.router.unavailable(f"group {self.group}: replica {self.me} cannot reach the leader "
                                    f"{leader.endpoint} now (no answer for {silent:.1f}s)")
            log.warning("group %s: %s stops forwarding client calls: the leader %s has not answered it for %.1fs",
                        self.group, self.me, leader.endpoint, silent)

    def _stop_following(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None

    # --- cluster topics ---------------------------------------------------------------

    def _create_share(self, route: GroupRoute, topic: str, share: int, message_type: str) -> None:
        """Create a group's share of a cluster topic: here when it is this group, else through
        that group's leader (signed as a replica: only an admin may create topics)."""
        if route.name == self.group:
            self.routes.refresh()  # sealed first: a queue a history copy fills never takes a send
            if self.broker is not None:
                self.broker.core.store.seal_queues(*self.routes.sealed())
            self._create_local(topic, share, message_type)
            return
        from txmq.broker.protocol import native_pb2
        self._call_endpoint(route.leader, "CreateTopic", native_pb2.CreateTopicRequest(
            name=topic, queue_count=share, message_type=message_type, group_only=True), 5.0)

    def _call_leader(self, group: str, method_name: str, request, timeout_s: float):
        """A native call to `group`'s leader now (signed as a replica); NotLeader while it has none."""
        route = self.routes.snapshot(fresh=True).groups.get(group)
        if route is None or not route.leader:
            raise NotLeader(f"group {group} has no leader now")
        return self._call_endpoint(route.leader, method_name, request, timeout_s)

    def _call_endpoint(self, endpoint: str | None, method_name: str, request, timeout_s: float):
        from txmq.broker.protocol.native_methods import NATIVE_METHODS_BY_NAME
        from txmq.broker.protocol.native_status import raise_for
        method = NATIVE_METHODS_BY_NAME[method_name]
        channel = self._peer_channel(endpoint)
        try:
            call = channel.unary_unary(method.path, request_serializer=method.request_class.SerializeToString,
                                       response_deserializer=method.response_class.FromString)
            try:
                response = call(request, metadata=self._peer_metadata(), timeout=timeout_s)
            except grpc.RpcError as exc:
                raise BrokerUnavailable(f"{endpoint}: {exc.code().name}: {exc.details()}") from exc
            raise_for(response.status)
            return response
        finally:
            channel.close()

    def _create_local(self, topic: str, share: int, message_type: str) -> None:
        broker = self.broker
        if broker is None:
            raise NotLeader(f"group {self.group}: {self.me} does not lead")
        core = broker.core
        existing = core.store.topics.exists(topic) and core.store.topics.get(topic).queue_count
        if not existing or existing < share:  # a share only grows: its queues never move
            core.store.topics.create(topic, share)
        if message_type:
            core.topic_types.set(topic, TopicType.parse(message_type))

    def _reconcile_topics(self) -> None:
        """Create what the registry gives this group and it lacks (a create while it was down)."""
        if self.broker is None:
            return
        topics = self.routes.topics()  # one snapshot: a queue a copy fills is sealed before it is created
        self.broker.core.store.seal_queues(*self.routes.sealed(topics))
        self.moves.resume_stuck(self.group)
        for topic, (share, message_type) in self.routes.shares(topics).items():
            try:
                self._create_local(topic, share, message_type)
            except Exception:
                log.exception("group %s: could not create its share of topic %s", self.group, topic)
        broker = self.broker
        try:  # a registry read that fails here is tried again at the next reconcile, leadership unharmed
            self.copier.poll(broker.core.store, self._carry_offsets_to_copy, lambda: self.broker is broker)
        except (CoordinationUnavailable, BrokerUnavailable) as exc:
            log.warning("group %s: history copies not polled: %s", self.group, exc)

    def _open_group(self, group: str):
        """A client of `group`'s replicas (signed as a replica), for reading history a copy takes."""
        from txmq.broker.client.native_client import NativeClient  # the cluster reads another group as a client
        route = self.routes.snapshot(fresh=True).groups.get(group)
        if route is None or not route.endpoints:
            raise BrokerUnavailable(f"group {group} has no live replica to copy from")
        account = self.auth.replica_account()
        cfg = self.config
        return NativeClient(";".join(route.endpoints), access_key=account.access_key if account else None,
                            secret_key=account.secret_key if account else None, tls=bool(cfg.tls_cert),
                            ca_file=cfg.tls_cert or None, timeout_s=30.0, retry_unavailable_s=5.0)

    def _carry_offsets_to_copy(self, topic: str, copy_queue: int, current_queue: int) -> None:
        """The consumer groups' offsets of a queue (logical) also for its copied history's physical
        queue: the official clients pop physical queues, each with its own committed offset."""
        broker = self.broker
        if broker is None:
            raise NotLeader(f"group {self.group}: {self.me} does not lead")
        offsets = broker.core.store.offsets
        for consumer_group in offsets.groups():
            held = offsets.group(consumer_group)
            if (topic, current_queue) in held and (topic, copy_queue) not in held:
                offsets.commit_many(consumer_group, {(topic, copy_queue): held[(topic, current_queue)]})

    # --- role changes ----------------------------------------------------------------

    def _promote(self, record: LeaderRecord) -> None:
        cfg = self.config
        t0 = time.monotonic()
        self.router.unavailable(f"group {self.group}: replica {self.me} is taking over as leader")
        store = self.store
        leading = False
        try:
            # the lease is renewed meanwhile: stopping the follower waits for its threads (a call to a
            # leader gone silent), and the store's take-over dispatches what was fetched last
            with self._lease_renewed_meanwhile():
                self._stop_following()
                # etcd is read before the store leads: a failure here (etcd cut off) leaves the store a
                # replica's, so the next election can promote it (a store that led cannot be promoted
                # again: each later win failed, raising the epoch, an election storm)
                isr = self.etcd.in_sync()
                min_insync = self._min_insync()
                leading = True
                end = store.lead()
                self.epochs.begin(record.epoch, end)
                warm = self._take_standby()  # after lead(): its cut of an unfinished tail voids what it covers
            t_store = time.monotonic()
        except BaseException:
            if leading:  # in no state to follow: reopened as a replica's, as after a step-down
                store.close()
                self.store = MessageStore(store_config(cfg, replica=True))
                self.standby = StandbyTable(self.store, transaction_config(cfg))
            self._give_up_taking_over(record, "it could not take over its store and etcd's in-sync set")
            raise
        self.vouched = isr.vouched
        in_sync = {m: isr.ids.get(m, "") for m in isr.members if m != self.me}
        lead = ReplicationLeader(store, self.epochs, record, group=self.group, sync=cfg.replication == "sync",
                                 min_insync=min_insync, lag_max_s=cfg.replica_lag_max_s,
                                 timeout_s=cfg.replication_timeout_s, in_sync=in_sync,
                                 lease_alive=self.etcd.lease_alive)
        self.lead = lead
        try:
            # Serve only once the in-sync followers hold this log's whole tail (which may hold
            # writes of the last epoch nobody confirmed): readers must never see what a later
            # failover could lose. With none in sync there is none to wait for: only this replica
            # may lead next, and under sync its tail stays unpublished until a follower holds it.
            deadline = time.monotonic() + cfg.replica_lag_max_s
            while not lead.wait_confirmed(end, max(0.0, min(deadline - time.monotonic(), self.etcd.ttl / 4))
                                          if lead.in_sync else 0.0):
                if not lead.in_sync:
                    break
                if time.monotonic() >= deadline:
                    behind = {f for f in lead.in_sync if lead.followers[f].offset < end}
                    members = {f: i for f, i in lead.ids.items() if f not in behind}
                    if not self.etcd.set_in_sync(record, {**members, self.me: self.replica_id}, self.vouched):
                        raise RuntimeError("the in-sync set could not be written: another replica leads")
                    lead.set_in_sync(members)
                    break
                self._drop_unreachable_before_serving(lead, end)
                self._renew_lease_taking_over()
            self._renew_lease_taking_over()
            t_confirmed = time.monotonic()
            store.write_lock.replication = lead
            with self._lease_renewed_meanwhile():  # the core rebuilds the transaction table: long after a busy epoch
                core = BrokerCore(cfg, store=store, warm_table=warm)
            t_core = time.monotonic()
            core.replication_status = self.status
            core.routes = self.routes
            core.moves = self.moves
            core.timer.moved = self.moves  # timer messages due to queues moved away go where they live now
            self.routes.refresh()  # queues sealed by moves refuse writes from the first one on
            store.seal_queues(*self.routes.sealed())
            t_routes = time.monotonic()
            core.membership = self.membership
            broker = Broker(cfg, core)
            handlers = broker.service_handlers()
            broker.start_beside(self.port, name_flight_host=True)
        except BaseException:
            log.exception("group %s: %s could not start serving as leader", self.group, self.me)
            self.broker = None
            self._step_down("it could not start serving")  # another replica may do better
            self._give_up_taking_over(record, "it could not start serving")
            return
        self.broker = broker
        self.router.serve(handlers, itself=self.me)  # relayed Telemetry streams go on here
        self.elections_won += 1
        now = time.monotonic()
        replayed = core.engine.recovery_stats
        took = self.last_take_over = {
            "epoch": record.epoch, "seconds": round(now - t0, 3), "store_s": round(t_store - t0, 3),
            "confirmed_s": round(t_confirmed - t_store, 3), "core_s": round(t_core - t_confirmed, 3),
            "serving_s": round(now - t_core, 3), "standby_table": warm is not None,
            "halves_replayed": replayed["halves_replayed"], "ops_replayed": replayed["ops_replayed"]}
        log.warning("group %s: %s leads epoch %d from offset %d (%.2fs to take over: %.2fs to stop following and "
                    "open the store as leader, %.2fs until the in-sync followers held its log, %.2fs to rebuild "
                    "its transaction table (%s, %d halves and %d ops replayed), %.2fs to start serving: %.2fs "
                    "routes, %.2fs services)", self.group, self.me, record.epoch, end, took["seconds"],
                    took["store_s"], took["confirmed_s"], took["core_s"],
                    "its standby table" if warm is not None else "from its snapshots", took["halves_replayed"],
                    took["ops_replayed"], took["serving_s"], t_routes - t_core, now - t_routes)

    def _give_up_taking_over(self, record: LeaderRecord, reason: str) -> None:
        """Give back a leader key this replica won but cannot serve under (another replica may do
        better); if etcd is away the lease runs out instead."""
        log.warning("group %s: %s gives up epoch %d: %s", self.group, self.me, record.epoch, reason)
        try:
            self.etcd.resign(record)
        except CoordinationUnavailable:
            pass

    def _renew_lease_taking_over(self) -> None:
        """Renew the lease as the tick would (this thread runs the tick, and a take-over on a loaded
        host can outlast the lease: the new leader would be fenced as it starts serving)."""
        if not self.etcd.keepalive():
            raise RuntimeError("its etcd lease expired while it took over")
        self._next_keepalive = time.monotonic() + self.etcd.ttl / 4

    @contextmanager
    def _lease_renewed_meanwhile(self) -> Iterator[None]:
        """Renew the lease from another thread while the body runs (this thread, which renews it,
        is busy); raise on leaving if it was lost meanwhile."""
        done = threading.Event()
        lost: list[str] = []

        def renew() -> None:
            while not done.wait(self.etcd.ttl / 4):
                try:
                    if not self.etcd.keepalive():
                        lost.append("its etcd lease expired while it took over")
                        return
                except CoordinationUnavailable as exc:
                    lost.append(f"etcd unreachable while it took over: {exc}")
                    return

        renewer = threading.Thread(target=renew, name="txmq-take-over-lease", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            done.set()
            renewer.join()
        if lost:
            raise RuntimeError(lost[0])
        self._renew_lease_taking_over()

    def _step_down(self, reason: str, *, reopen: bool = True) -> None:
        """Stop acknowledging at once, close the leader's services, and (unless stopping) reopen
        the store as a follower, which cuts whatever the next leader does not hold."""
        lead = self.lead
        assert lead is not None
        lead.fence(reason)
        self.router.unavailable(f"group {self.group}: replica {self.me} stepped down ({reason})")
        log.warning("group %s: %s steps down: %s", self.group, self.me, reason)
        if self.broker is not None:
            self.broker.stop(grace_s=1.0)  # closes the core and the store
            self.broker = None
        else:
            self.store.close()
        self.lead = None
        self.demotions += 1
        if reopen:
            self.store = MessageStore(store_config(self.config, replica=True))
            self.standby = StandbyTable(self.store, transaction_config(self.config))

    # --- status -----------------------------------------------------------------------------

    def _put_status(self) -> None:
        self._next_status = time.monotonic() + STATUS_EVERY_S
        if self.etcd.lease_id is None:
            return
        self.etcd.put_member(self.me, self.status())

    def status(self) -> dict:
        store = self.store
        info = {"endpoint": self.me, "group": self.group, "updated_ms": int(time.time() * 1000),
                "replica_id": self.replica_id,
                "role": "leader" if self.lead is not None else "follower",
                "log_end": store.commitlog.write_end if store is not None else 0,
                "elections_won": self.elections_won, "demotions": self.demotions,
                # what a rolling upgrade watches: each replica's release and what it speaks and reads
                "version": __version__, "replication_wire": versions.REPLICATION.version,
                "store_format": store.store_format if store is not None else None}
        if self.lead is not None:
            info.update(epoch=self.lead.record.epoch, confirmed=self.lead.confirmed, lag_seconds=0.0,
                        acks_refused=self.lead.acks_refused, followers=self.lead.status())
        elif self.follower is not None:
            f = self.follower
            info.update(epoch=f.leader.epoch, confirmed=f.confirmed, leader=f.leader.endpoint,
                        lag_bytes=max(0, f.leader_end - info["log_end"]),
                        lag_seconds=round(time.monotonic() - f.caught_up_at, 3),
                        leader_silent_s=round(f.leader_silent_s(), 3),
                        truncated_bytes=f.truncated_bytes, error=f.error)
        if self.refused is not None and self.lead is None:
            info["may_not_lead"] = self.refused
        if self.last_take_over is not None:
            info["last_take_over"] = self.last_take_over
        return info
