"""The broker process: the core objects, the gRPC server around them, and the entry point.

`BrokerCore` owns the pieces every service adapts (store, transaction engine,
check-back service and its router, pop consumption, auth, metrics, config).
`Broker` puts a thread-pool `grpc.server` in front with the RocketMQ 5 service
and txmq's native service, and an Arrow Flight server beside it for bulk data
(server/flight_service.py; clients find it with the native DataPlane call, so
users configure one address). `run_broker(argv)` is what
`python -m txmq.broker.server` and `txmq broker start` run: it prints
`txmq broker ready on HOST:PORT` once serving and stops cleanly on SIGTERM or
SIGINT, closing the store so no abort marker is left.

A thread-pool server, not grpc.aio, because the store and the engine are blocking code that
every aio call would hand to an executor anyway (figures: docs/benchmarks.md). Long polls and
telemetry streams each hold a worker, hence the large default pool (`max_workers`); the RocketMQ
protocol's unary calls run on a small pool of their own (short_calls.py). Both services are
registered method handlers, so the C core matches a call's method path.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from txmq.broker.errors import StoreFormatUnsupported, TopicNotFound
from txmq.broker.server.auth import Authenticator, AuthInterceptor
from txmq.broker.server.checkback_router import CheckbackRouter
from txmq.broker.server.config import BrokerConfig, parse_duration, parse_host_port
from txmq.broker.server.listen_port import TLS_MODES, Listener, bind_grpc, generated_certificate
from txmq.broker.server.membership import LocalMembership, Membership
from txmq.broker.server.addresses import WILDCARD_HOSTS, announced_host
from txmq.broker.server.metrics import ServerMetrics
from txmq.broker.server.metrics_http import MetricsServer, start_metrics_server
from txmq.broker.server.rpc_metrics import RpcMetrics
from txmq.broker.server.short_calls import short_call_pool
from txmq.broker.store.record_block import load_compiled
from txmq.broker.store.commit_ref import load_compiled_finals
from txmq.broker.store.record_copy import load_compiled_scan

if TYPE_CHECKING:  # the store loads when a BrokerCore is made
    from txmq.broker.store.message_store import MessageStore
    from txmq.broker.transaction.config import TransactionConfig
    from txmq.broker.transaction.recovery import RecoveredTable
    from txmq.broker.store.metadata import TopicConfig

log = logging.getLogger("txmq.broker")

def load_serving_code() -> None:
    """Load, off the serving path, what Python loads on first use: the modules a leader's services
    import, the compiled record encoder, source scan and final-record writer (numba; the last for
    the first pull of messages committed by reference) and pyarrow.compute (the columnar reads'
    take; it imports pandas). A broker runs it as it starts, a replica while it follows, so a new
    leader's first writes do not wait on them."""
    import pyarrow.compute  # noqa: F401

    import txmq.broker.server.flight_service  # noqa: F401
    import txmq.broker.server.pop  # noqa: F401
    import txmq.broker.cluster.cross_tx  # noqa: F401

    load_compiled()
    load_compiled_scan()
    load_compiled_finals()


def start_loading_serving_code() -> None:
    threading.Thread(target=load_serving_code, name="txmq-load-compiled", daemon=True).start()


def transaction_config(config: BrokerConfig) -> TransactionConfig:
    """The transaction engine's settings a broker's config implies."""
    from txmq.broker.transaction.config import TransactionConfig

    return TransactionConfig(
        transaction_timeout_s=config.transaction_timeout_s,
        check_interval_s=config.check_interval_s,
        max_checks=config.max_checks,
        in_progress_max_age_s=config.in_progress_max_age_s,
        timer_max_delay_s=config.timer_max_delay_s,
    )


def store_config(config: BrokerConfig, *, replica: bool = False):
    """The store settings a broker's config implies."""
    from txmq.broker.store.config import StoreConfig

    host, port = config.listen_host_port
    return StoreConfig(
        data_dir=Path(config.data_dir),
        flush_mode=config.flush,  # type: ignore[arg-type]
        flush_interval_ms=config.flush_interval_ms,
        max_body_bytes=config.max_body_bytes,
        max_properties_bytes=config.max_properties_bytes,
        commitlog_segment_bytes=config.segment_bytes,
        retention_hours=config.retention_s / 3600,
        disk_max_used_ratio=config.disk_max_used_ratio,
        page_cache_keep_bytes=config.page_cache_keep_bytes,
        # the host in message ids: the listen address, or on a wildcard listen the announced one
        store_host=(host if host not in WILDCARD_HOSTS else announced_host(host, config.advertised_host), port),
        replica=replica,
    )


class BrokerCore:
    """Everything a service needs, with no gRPC in it."""

    def __init__(self, config: BrokerConfig, *, clock=time.time, store: MessageStore | None = None,
                 warm_table: RecoveredTable | None = None) -> None:
        """`store`: an open store to serve (a replica promoted to leader); else one is opened.
        `warm_table`: the transaction table that replica kept while it followed (standby.py)."""
        from txmq.broker.store.message_store import MessageStore
        from txmq.broker.transaction.engine import TransactionEngine
        from txmq.broker.transaction.checkback import CheckbackService
        from txmq.broker.server.pop import PopService
        from txmq.broker.server.consumer_groups import ConsumerGroups
        from txmq.broker.server.topic_types import TopicTypes
        from txmq.broker.timer.service import TIMER_DIR, TimerService

        self.config = config
        self.clock = clock
        self.store = store if store is not None else MessageStore(store_config(config))
        try:
            self.tx_config = transaction_config(config)
            self.engine = TransactionEngine(self.store, self.tx_config, clock=clock, warm=warm_table)
            self.router = CheckbackRouter()
            self.checkback = CheckbackService(self.engine, self.router, self.tx_config)
            self.metrics = ServerMetrics()
            self.rpc_metrics = RpcMetrics()
            self.advertised: tuple[str, int] | None = None  # set by Broker.start once it listens
            self.replication_status = None  # a group's leader: set by cluster/node.py
            self.routes = None  # a group's leader in a cluster: set by cluster/node.py
            self.moves = None  # the cluster's queue mover (cluster/moves.py), set with routes
            self.membership: Membership = LocalMembership()  # a cluster's leader: etcd's (cluster/node.py)
            self.auth = (Authenticator.from_file(config.auth_file) if config.auth_file
                         else Authenticator.disabled())
            self.consumer_groups = ConsumerGroups(self.store.topics.path.with_name("consumer_groups.json"),
                                                  default_max_attempts=config.client_max_delivery_attempts)
            self.pop = PopService(self)  # after the group settings it reads
            self.topic_types = TopicTypes(self.store.topics.path.with_name("topic_types.json"))
            # the timer runs where writes are taken: a replica derives nothing for it until it leads
            # a group's broker reaches the coordinators of cross-group transactions (cluster/cross_tx.py)
            self.decisions = None
            if config.etcd and config.group:
                from txmq.broker.cluster.cross_tx import ClusterDecisions

                self.decisions = self.engine.authority = ClusterDecisions.for_broker(self.engine, config, self.auth)
            self.timer = TimerService(self.store, self.store.config.data_dir / TIMER_DIR,
                                      max_delay_s=config.timer_max_delay_s, clock=clock)
        except BaseException:
            self.store.close()
            raise
        self._topic_lock = threading.Lock()
        self._closed = False

    # --- topics ---------------------------------------------------------------

    def topic_queue_count(self, topic: str, *, create: bool | None = None) -> int:
        """Queue count of `topic`, auto-creating it (default 4 queues) when allowed.

        Raises IllegalTopic for bad names and system topics, TopicNotFound when
        it does not exist and auto-creation is off.
        """
        info = _get_topic(self.store, topic)
        if info is not None:
            return info.queue_count
        if not (self.config.auto_create_topics if create is None else create):
            raise TopicNotFound(f"topic {topic!r} does not exist and auto-creation is off")
        with self._topic_lock:
            info = _get_topic(self.store, topic)
            if info is None:
                info = self.store.topics.create(topic, self.config.default_queue_count)
        return info.queue_count

    def schedule(self, messages, now_ms: int | None = None):
        """`messages` with those that ask for a future delivery time turned into timer records
        (timer/schedule.py); IllegalDeliveryTime past the horizon."""
        from txmq.broker.timer.schedule import schedule_all
        now = int(self.clock() * 1000) if now_ms is None else now_ms
        return schedule_all(messages, now, int(self.config.timer_max_delay_s * 1000))

    # --- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        self.checkback.start()
        self.pop.start()
        self.timer.start()
        # code a first large COMMIT would load on its path loads in the background instead
        start_loading_serving_code()

    def close(self) -> None:
        """Stop background work, then close the store (flush, checkpoint, remove the abort marker)."""
        if self._closed:
            return
        self._closed = True
        stops = [self.timer.stop, self.checkback.stop, self.pop.stop, self.engine.close]
        if self.decisions is not None:
            stops.append(self.decisions.close)
        for stop in stops:
            try:
                stop()
            except Exception:  # keep closing: the store must still be closed cleanly
                log.exception("error while stopping %s", stop)
        self.store.close()


def _get_topic(store: MessageStore, topic: str) -> TopicConfig | None:
    """The store's topic record, or None when it does not exist."""
    try:
        return store.topics.get(topic)
    except TopicNotFound:
        return None


class Broker:
    """A BrokerCore behind a grpc.server."""

    def __init__(self, config: BrokerConfig, core: BrokerCore | None = None) -> None:
        self.config = config
        self.core = core or BrokerCore(config)
        self.server: grpc.Server | None = None
        self.listener: Listener | None = None
        self.host, self.port = config.listen_host_port
        self._metrics_server: MetricsServer | None = None
        self._short_calls: futures.ThreadPoolExecutor | None = None
        self.flight: Any = None  # the TxmqFlightServer once started
        self.native: Any = None  # the NativeService both servers adapt
        # Flight calls a client kept open past the stop's grace (the process must then exit without them)
        self.abandoned_calls = False

    def start(self) -> tuple[str, int]:
        """Start serving; returns the bound (host, port) (the real port when 0 was asked)."""
        cfg = self.config
        self.server = make_grpc_server(cfg, self.core.auth)
        for service, handlers in self.service_handlers().items():
            self.server.add_registered_method_handlers(service, handlers)
        self.listener = bind(self.server, cfg, self.host, self.port)
        self.port = self.listener.port
        self.server.start()
        self.start_beside(self.port)
        return self.host, self.port

    def service_handlers(self) -> dict[str, dict[str, grpc.RpcMethodHandler]]:
        """{service name: {method name: handler}} of the RocketMQ and native services over this core."""
        from txmq.broker.cluster.cross_tx import CoordinatorService, coordinator_method_handlers
        from txmq.broker.protocol import coordinator_methods, native_methods
        from txmq.broker.protocol.rocketmq_methods import SERVICE_NAME
        from txmq.broker.server.messaging_service import rocketmq_method_handlers
        from txmq.broker.server.native_service import NativeService, native_method_handlers

        self._short_calls = short_call_pool(self.config.short_call_workers, self.config.flush)
        native = self.native = NativeService(self.core)
        coordinator = CoordinatorService(self.core.engine, self.config.group, self.core.auth)
        return {SERVICE_NAME: rocketmq_method_handlers(self.core, self._short_calls),
                native_methods.SERVICE_NAME: native_method_handlers(native),
                coordinator_methods.SERVICE_NAME: coordinator_method_handlers(coordinator)}

    def start_beside(self, port: int, *, name_flight_host: bool = False) -> None:
        """Start what runs beside the gRPC server on `port` (bound by the caller, serving
        service_handlers()): the Flight data plane, the core's background work, metrics.
        `name_flight_host`: announce the advertised host for Flight even on a wildcard listen (a
        group's leader: clients that dialled a follower must not take the follower's host)."""
        from txmq.broker.server.flight_service import TxmqFlightServer

        cfg = self.config
        self.port = port
        self.core.advertised = (self._advertised_host(), port)
        flight_host, flight_port = cfg.flight_host_port
        self.flight = TxmqFlightServer(self.native, flight_host, flight_port, authenticator=self.core.auth,
                                       tls_cert=cfg.tls_cert, tls_key=cfg.tls_key,
                                       max_batch_bytes=cfg.max_message_bytes)
        announced = flight_host if flight_host not in WILDCARD_HOSTS else (
            self._advertised_host() if name_flight_host else "")
        self.native.data_plane = (announced, self.flight.port, self.flight.tls)
        self.core.start()
        if cfg.metrics_listen:
            self._metrics_server = _start_metrics(self.core, cfg.metrics_listen)

    def _advertised_host(self) -> str:
        return announced_host(self.host, self.config.advertised_host)

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop accepting calls, let running ones finish for `grace_s`, then close the core."""
        self.core.pop.arrivals.signal_all()
        if self.server is not None:
            self.server.stop(grace_s).wait(grace_s + 5)
            self.server = None
        if self.listener is not None:  # after the server: its calls end through the forwarder
            self.listener.close()
            self.listener = None
        if self.flight is not None:
            self.native.closing = True  # open streams end at their next batch
            self.native.waiters.wake_all()  # and subscriptions waiting for a publish at once
            # Flight's shutdown waits for every call, and a client that neither reads nor ends its
            # stream would hold it forever: wait for the grace, then close the store without them.
            ending = threading.Thread(target=self.flight.shutdown, name="txmq-flight-stop", daemon=True)
            ending.start()
            ending.join(grace_s + 1)
            self.abandoned_calls = ending.is_alive()
            if self.abandoned_calls:
                log.warning("Flight calls still open %.0f s after the stop: closing without them", grace_s + 1)
            self.flight = None
        if self._short_calls is not None:
            self._short_calls.shutdown(wait=True, cancel_futures=True)
            self._short_calls = None
        if self._metrics_server is not None:
            try:
                self._metrics_server.shutdown()
            except Exception:  # the store must still be closed cleanly
                log.exception("metrics server stop failed")
        self.core.close()


def make_grpc_server(cfg: BrokerConfig, auth: Authenticator,
                     generic_handlers: list[grpc.GenericRpcHandler] | None = None) -> grpc.Server:
    """The thread-pool gRPC server a broker (or a group's replica) serves on, not yet bound."""
    from txmq.broker.protocol import keepalive
    from txmq.broker.protocol.rocketmq_methods import SERVICE_NAME

    from txmq.broker.protocol.native_version import NativeVersionInterceptor

    interceptors: list[grpc.ServerInterceptor] = [NativeVersionInterceptor()]
    if auth.enabled:
        interceptors.append(AuthInterceptor(auth, in_band_prefixes=(f"/{SERVICE_NAME}/",)))
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=cfg.max_workers, thread_name_prefix="txmq-rpc"),
        handlers=generic_handlers,
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", cfg.max_message_bytes),
            ("grpc.max_send_message_length", cfg.max_message_bytes),
            ("grpc.so_reuseport", 0),
            *keepalive.SERVER_OPTIONS,
        ],
        maximum_concurrent_rpcs=cfg.max_workers * 8,
    )


def bind(server: grpc.Server, cfg: BrokerConfig, host: str, port: int) -> Listener:
    """Bind `server` to host:port in the configured TLS mode (listen_port.py): by default TLS and
    plaintext on the one port, with the configured certificate or one generated into the data dir."""
    credentials, mode = None, cfg.tls_mode
    if mode != "disabled":
        if cfg.tls_cert:
            cert, key = Path(cfg.tls_cert), Path(cfg.tls_key)
        else:
            try:
                cert, key = generated_certificate(Path(cfg.data_dir) / "tls", [cfg.advertised_host or "", host])
            except OSError as exc:
                if mode == "enforcing":
                    raise
                # no certificate can be made here: serve plaintext rather than nothing, and say why
                log.warning("serving plaintext only: %s", exc)
                mode = "disabled"
        if mode != "disabled":
            credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
    return bind_grpc(server, host, port, mode=mode, credentials=credentials)


def _start_metrics(core: BrokerCore, listen: str) -> MetricsServer:
    """Start the Prometheus endpoint for --metrics-listen."""
    host, port = parse_host_port(listen)
    return start_metrics_server(core, host, port)


# --- process entry ------------------------------------------------------------


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m txmq.broker.server",
                                description="Run a txmq broker (RocketMQ 5 gRPC protocol + txmq native service).")
    p.add_argument("--config", type=Path, help="TOML file with broker settings (flags override it)")
    p.add_argument("--data-dir", type=Path, help="where the CommitLog, queues and metadata live")
    p.add_argument("--listen", help="HOST:PORT to serve gRPC on (port 0 = any free port)")
    p.add_argument("--advertised-host", help="host clients and peers are told to dial (default: the --listen host; "
                                             "on a wildcard listen, this host's primary IPv4 address)")
    p.add_argument("--flush", choices=("sync", "async"), help="sync: ack after fsync; async: flush on an interval")
    p.add_argument("--transaction-timeout", help="age before a half is checked back (e.g. 6s)")
    p.add_argument("--check-interval", help="time between check-backs (e.g. 30s)")
    p.add_argument("--max-checks", type=int, help="check-backs before a transaction is discarded")
    p.add_argument("--in-progress-max-age", help="a transaction whose producer answers check-backs IN_PROGRESS "
                                                 "is not discarded by --max-checks before this age (default 1h)")
    p.add_argument("--auto-create-topics", action=argparse.BooleanOptionalAction, default=None,
                   help="create unknown topics (4 queues) on first use (default: on)")
    p.add_argument("--default-queue-count", type=int, help="queues of an auto-created topic")
    p.add_argument("--auth-file", type=Path, help="TOML/JSON accounts file: turns authentication on")
    p.add_argument("--tls-mode", choices=TLS_MODES,
                   help="permissive (default): TLS and plaintext on the --listen port, as RocketMQ's proxy; "
                        "enforcing: TLS only; disabled: plaintext only (no forwarding hop)")
    p.add_argument("--tls-cert", type=Path, help="PEM certificate for TLS (default: a self-signed one "
                                                   "generated into <data-dir>/tls/)")
    p.add_argument("--tls-key", type=Path, help="PEM private key for --tls-cert")
    p.add_argument("--metrics-listen", help="HOST:PORT for the Prometheus /metrics endpoint")
    p.add_argument("--segment-bytes", type=int, help="CommitLog segment size in bytes (default 1 GiB)")
    p.add_argument("--page-cache-keep-bytes", type=int,
                   help="keep the newest CommitLog bytes in the page cache and drop older flushed ones "
                        "(default 2 GiB; 0: leave it to the kernel)")
    p.add_argument("--retention", help="delete CommitLog segments older than this (default 72h)")
    p.add_argument("--disk-max-used-ratio", type=float,
                   help="delete the oldest segments while the disk is fuller than this (default 0.75)")
    p.add_argument("--local-reads", action=argparse.BooleanOptionalAction, default=None,
                   help="answer clients on this host that ask for it with where the records are, so they "
                        "decode the CommitLog files themselves (default: on; clients opt in)")
    p.add_argument("--flight-listen",
                   help="HOST:PORT of the Arrow Flight data plane (default: the --listen host, any free port; "
                        "clients learn it from the broker)")
    p.add_argument("--short-call-workers", type=int,
                   help="threads for the RocketMQ protocol's unary calls (default: 2 with async flush, "
                        "0 = the main pool with sync flush)")
    p.add_argument("--etcd", help="H:P[,H:P...] of etcd: run as a replica of a broker group (needs --group)")
    p.add_argument("--group", help="the broker group this replica belongs to")
    p.add_argument("--replication", choices=("sync", "async"),
                   help="sync (default): acknowledge a write once --min-insync followers hold it; "
                        "async: acknowledge per the leader's --flush")
    p.add_argument("--replicas", type=int,
                   help="the group's size (default: the replicas that have joined it so far, from etcd)")
    p.add_argument("--min-insync", type=int,
                   help="followers that must hold a write under sync replication "
                        "(default: 1 in a group of two or more replicas, 0 in a group of one)")
    p.add_argument("--lease-ttl", help="the leader's etcd lease (default 2s): a dead leader's group waits this long")
    p.add_argument("--move-resume-after", help="a queue move whose mover went away is finished by the target "
                                                "group's leader after this long (default 10s)")
    p.add_argument("--replica-lag-max", help="a follower behind for this long leaves the in-sync set (default 2s)")
    p.add_argument("--timer-max-delay", help="latest delivery time a timer message may ask for, from now "
                                              "(default 24h, the RocketMQ proxy's; later ones get ILLEGAL_DELIVERY_TIME)")
    p.add_argument("--log-level", default="WARNING")
    return p


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    overrides: dict[str, Any] = {}
    for flag, key in (("data_dir", "data_dir"), ("listen", "listen"), ("advertised_host", "advertised_host"),
                      ("flush", "flush"), ("max_checks", "max_checks"),
                      ("auto_create_topics", "auto_create_topics"), ("default_queue_count", "default_queue_count"),
                      ("auth_file", "auth_file"), ("tls_cert", "tls_cert"), ("tls_key", "tls_key"),
                      ("tls_mode", "tls_mode"),
                      ("metrics_listen", "metrics_listen"), ("segment_bytes", "segment_bytes"),
                      ("page_cache_keep_bytes", "page_cache_keep_bytes"),
                      ("disk_max_used_ratio", "disk_max_used_ratio"), ("flight_listen", "flight_listen"),
                      ("short_call_workers", "short_call_workers"), ("local_reads", "local_reads"),
                      ("etcd", "etcd"), ("group", "group"), ("replication", "replication"),
                      ("min_insync", "min_insync"), ("replicas", "replicas")):
        value = getattr(args, flag)  # a table of flags: a lookup by name
        if value is not None:
            overrides[key] = value
    if args.transaction_timeout is not None:
        overrides["transaction_timeout_s"] = parse_duration(args.transaction_timeout)
    if args.check_interval is not None:
        overrides["check_interval_s"] = parse_duration(args.check_interval)
    if args.in_progress_max_age is not None:
        overrides["in_progress_max_age_s"] = parse_duration(args.in_progress_max_age)
    if args.lease_ttl is not None:
        overrides["lease_ttl_s"] = parse_duration(args.lease_ttl)
    if args.move_resume_after is not None:
        overrides["move_resume_after_s"] = parse_duration(args.move_resume_after)
    if args.replica_lag_max is not None:
        overrides["replica_lag_max_s"] = parse_duration(args.replica_lag_max)
    if args.timer_max_delay is not None:
        overrides["timer_max_delay_s"] = parse_duration(args.timer_max_delay)
    if args.retention is not None:
        overrides["retention_s"] = parse_duration(args.retention)
    if args.config:
        return BrokerConfig.from_toml(args.config, overrides)
    return BrokerConfig.from_mapping(overrides)


def run_broker(argv: list[str] | None = None) -> int:
    """Process entry: serve until SIGTERM/SIGINT, then stop cleanly. Returns the exit code."""
    args = build_arg_parser().parse_args(argv)
    logging.basicConfig(level=logging.getLevelNamesMapping().get(str(args.log_level).upper(), logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # a process killed by a signal (SIGBUS from a map, SIGSEGV in an extension) says where, in its log
    # (the process's own stderr: a caller in the same process may have replaced sys.stderr)
    faulthandler.enable(file=sys.__stderr__)
    try:
        config = config_from_args(args)
        announced_host(config.listen_host_port[0], config.advertised_host)  # a wildcard listen needs one
    except (ValueError, OSError) as exc:
        print(f"txmq broker: bad configuration: {exc}", file=sys.stderr, flush=True)
        return 2
    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if config.etcd:
        return _run_replica(config, stop)
    try:
        broker = Broker(config)
    except StoreFormatUnsupported as exc:
        print(f"txmq broker: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        host, port = broker.start()
    except BaseException:
        broker.core.close()
        raise
    announced = f"{broker.core.advertised[0]}:{port}" if broker.core.advertised else f"{host}:{port}"
    _serve_until(stop, f"txmq broker ready on {host}:{port} (announced as {announced}; "
                       f"data plane: Arrow Flight on port {broker.flight.port})",
                 broker.stop)
    if broker.abandoned_calls:  # the store is closed; Flight's threads would keep the process alive
        sys.stdout.flush()
        os._exit(0)
    return 0


def _run_replica(config: BrokerConfig, stop: threading.Event) -> int:
    """run_broker for a replica of a broker group (--etcd and --group)."""
    from txmq.broker.cluster.node import ReplicaNode

    node = ReplicaNode(config)
    try:
        host, port = node.start()
    except (ValueError, StoreFormatUnsupported) as exc:
        print(f"txmq broker: {exc}", file=sys.stderr, flush=True)
        return 2
    _serve_until(stop, f"txmq replica ready on {host}:{port} (group {config.group}, etcd {config.etcd})", node.stop)
    return 0


def _serve_until(stop: threading.Event, ready_line: str, shut_down) -> None:
    """Print the ready line, serve until `stop` is set (SIGTERM, SIGINT), then shut down."""
    print(ready_line, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        shut_down()
        print("txmq broker stopped", flush=True)
