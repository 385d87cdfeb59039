"""The broker process's settings: one dataclass, loadable from a TOML file and CLI flags.

Defaults follow RocketMQ where it has one (transaction timeout 6 s, check-back
every 30 s, at most 15 checks, 4 MiB bodies, 4 queues per auto-created topic).
Durations are accepted as numbers of seconds or as strings like "6s", "500ms",
"2m" because that is how operators write them in files and on command lines.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: str | int | float) -> float:
    """Seconds from 6, 6.5, "6s", "500ms", "2m" or "1h"; ValueError names the bad text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"duration must not be negative: {value}")
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise ValueError(f"not a duration: {value!r} (use e.g. 6s, 500ms, 2m)")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


def parse_host_port(value: str) -> tuple[str, int]:
    """("127.0.0.1", 8081) from "127.0.0.1:8081"; port 0 means any free port."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"not HOST:PORT: {value!r}")
    return host.strip("[]"), int(port)


@dataclass
class BrokerConfig:
    data_dir: Path = Path("./txmq-data")
    listen: str = "127.0.0.1:8081"
    # Host announced in QueryRoute when listening on a wildcard address.
    advertised_host: str | None = None
    flush: str = "async"  # "async" | "sync"
    flush_interval_ms: int = 500
    transaction_timeout_s: float = 6.0
    check_interval_s: float = 30.0
    max_checks: int = 15
    # A producer answering a check-back IN_PROGRESS keeps its transaction from being discarded by
    # max_checks until the transaction is this old (then its answers count as UNKNOWN's do).
    in_progress_max_age_s: float = 3600.0
    auto_create_topics: bool = True
    default_queue_count: int = 4
    auth_file: Path | None = None
    # TLS on the gRPC port (server/listen_port.py): "permissive" (TLS and plaintext on one port, the
    # proxy's default), "enforcing" (TLS only) or "disabled" (plaintext only). The certificate is
    # tls_cert/tls_key, else one generated into <data_dir>/tls/. Flight uses TLS only with tls_cert.
    tls_mode: str = "permissive"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    metrics_listen: str | None = None
    # Storage: CommitLog segment size, and retention (segments older than this, or while the
    # disk is fuller than the ratio, are deleted with their queue entries).
    segment_bytes: int = 1 << 30
    retention_s: float = 72 * 3600.0
    disk_max_used_ratio: float = 0.75
    # The newest CommitLog bytes kept in the page cache (older flushed bytes are dropped
    # from it, see store/page_cache.py); 0: leave the page cache to the kernel.
    page_cache_keep_bytes: int = 2 << 30
    max_body_bytes: int = 4 << 20
    # Timer (delay) messages: the latest delivery time accepted, from now (RocketMQ 5 proxy's maxDelayTimeMills).
    timer_max_delay_s: float = 24 * 3600.0
    max_properties_bytes: int = 32767
    max_message_bytes: int = 256 << 20  # gRPC frame limit, and the largest batch a Flight put may carry
    max_workers: int = 256  # long polls and telemetry streams each hold a thread
    # Threads that run the RocketMQ protocol's unary calls (sends, transaction ends, acks, routes,
    # offsets; see server/short_calls.py). None: 2 with async flush, 0 with sync flush (group
    # commit needs many writers in flight); 0: those calls run on the main pool.
    short_call_workers: int | None = None
    # The Arrow Flight data plane (pulls and bulk writes): HOST:PORT, or None for the listen host
    # and a free port. Clients learn it from the DataPlane call, so only `listen` must be known.
    flight_listen: str | None = None
    # Answer a client that asks (same host only, opt-in: client/local_read.py) with where the records
    # are instead of batches; the OS decides whether it may open the files.
    local_reads: bool = True
    # Pop consumption (ReceiveMessage).
    default_invisible_s: float = 60.0  # a receive that names none (auto_renew): the proxy's default
    min_invisible_s: float = 10.0  # a receive asking for less is refused, as the proxy's minInvisibleTimeMillsForRecv
    max_invisible_s: float = 12 * 3600.0
    max_long_polling_s: float = 60.0
    default_long_polling_s: float = 20.0
    max_batch_size: int = 1024
    # Telemetry settings pushed to clients.
    client_long_polling_s: float = 20.0
    client_receive_batch_size: int = 32
    client_max_delivery_attempts: int = 17  # the first delivery and RocketMQ's 16 retries (the proxy's 16 + 1)
    broker_name: str = "txmq-broker-0"
    # A replica of a broker group (cluster/): etcd endpoints "H:P[,H:P...]" and the group's name.
    # Without them the broker is the single, embedded-default broker and none of this applies.
    etcd: str | None = None
    group: str | None = None
    replication: str = "sync"  # "sync": acknowledge once min_insync followers hold a write; "async": don't wait
    # The group's size: its replicas. None: the replicas that have joined it so far (etcd's registry).
    replicas: int | None = None
    # Followers (besides the leader) that must hold a write under sync replication. None: one for
    # a group of two or more replicas, none for a group of one (min(1, size - 1)).
    min_insync: int | None = None
    lease_ttl_s: float = 2.0  # the leader's etcd lease: how long a dead leader keeps the group waiting
    replica_lag_max_s: float = 2.0  # a follower not caught up for this long leaves the in-sync set
    replication_timeout_s: float = 5.0  # longest a sync write waits for its followers
    move_resume_after_s: float = 10.0  # a queue left sealing this long by a mover that went away is finished by its target
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        for name in ("auth_file", "tls_cert", "tls_key"):
            value = getattr(self, name)  # the path fields, by name
            if value is not None and not isinstance(value, Path):
                setattr(self, name, Path(value))
        if self.flush not in ("async", "sync"):
            raise ValueError(f"flush must be 'async' or 'sync', not {self.flush!r}")
        parse_host_port(self.listen)
        if self.metrics_listen:
            parse_host_port(self.metrics_listen)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        if self.tls_mode not in ("permissive", "enforcing", "disabled"):
            raise ValueError(f"tls_mode must be permissive, enforcing or disabled, not {self.tls_mode!r}")
        if self.default_queue_count <= 0:
            raise ValueError("default_queue_count must be positive")
        if self.max_checks < 0:
            raise ValueError("max_checks must not be negative")
        if self.in_progress_max_age_s < 0:
            raise ValueError("in_progress_max_age must not be negative")
        if self.segment_bytes < 4096:
            raise ValueError(f"segment_bytes must be at least 4096, got {self.segment_bytes}")
        if self.retention_s <= 0:
            raise ValueError(f"retention must be positive, got {self.retention_s}s")
        if not 0 < self.disk_max_used_ratio <= 1:
            raise ValueError(f"disk_max_used_ratio must be in (0, 1], got {self.disk_max_used_ratio}")
        if not 1 <= self.timer_max_delay_s <= 366 * 24 * 3600:
            raise ValueError(f"timer_max_delay must be between 1s and 366 days, got {self.timer_max_delay_s}s")
        if self.page_cache_keep_bytes < 0:
            raise ValueError(f"page_cache_keep_bytes must not be negative, got {self.page_cache_keep_bytes}")
        if self.short_call_workers is not None and self.short_call_workers < 0:
            raise ValueError(f"short_call_workers must not be negative, got {self.short_call_workers}")
        if self.flight_listen:
            parse_host_port(self.flight_listen)
        if (self.etcd is None) != (self.group is None):
            raise ValueError("a replica needs both --etcd and --group")
        if self.etcd is not None:
            for endpoint in self.etcd.split(","):
                parse_host_port(endpoint.strip())
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", self.group or ""):
                raise ValueError(f"group name must be 1-64 letters, digits, '_', '.' or '-': {self.group!r}")
        if self.replication not in ("sync", "async"):
            raise ValueError(f"replication must be 'sync' or 'async', not {self.replication!r}")
        if self.min_insync is not None and self.min_insync < 0:
            raise ValueError(f"min_insync must not be negative, got {self.min_insync}")
        if self.replicas is not None and self.replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {self.replicas}")
        if (self.replication == "sync" and self.replicas is not None and self.min_insync is not None
                and self.min_insync > self.replicas - 1):
            raise ValueError(f"--min-insync {self.min_insync} asks for {self.min_insync} follower(s), but a group of "
                             f"--replicas {self.replicas} has {self.replicas - 1}: no write could ever be "
                             f"acknowledged (leave --min-insync out, or use --replication async)")
        if self.lease_ttl_s < 1:
            raise ValueError(f"lease_ttl must be at least 1s (etcd's granularity), got {self.lease_ttl_s}s")
        if not isinstance(self.local_reads, bool):
            raise ValueError(f"local_reads must be true or false, got {self.local_reads!r}")

    @property
    def listen_host_port(self) -> tuple[str, int]:
        return parse_host_port(self.listen)

    @property
    def etcd_endpoints(self) -> list[tuple[str, int]]:
        return [parse_host_port(e.strip()) for e in (self.etcd or "").split(",") if e.strip()]

    @property
    def flight_host_port(self) -> tuple[str, int]:
        return parse_host_port(self.flight_listen) if self.flight_listen else (self.listen_host_port[0], 0)

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> "BrokerConfig":
        """Build from a dict (a TOML table); keys may use '-' or '_'; durations may be strings."""
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for raw_key, value in values.items():
            key = raw_key.replace("-", "_")
            if key not in known and key + "_s" in known:  # a duration named as its flag: lease-ttl = "2s"
                key, value = key + "_s", parse_duration(value)
            elif key.endswith("_s") and key in known:
                value = parse_duration(value)
            if key not in known or key == "extra":
                raise ValueError(f"unknown broker setting: {raw_key!r}")
            kwargs[key] = _typed(raw_key, _FIELD_TYPES[key], value)
        return cls(**kwargs)

    @classmethod
    def from_toml(cls, path: Path, overrides: dict[str, Any] | None = None) -> "BrokerConfig":
        """Load a TOML file (top level or a [broker] table), then apply overrides."""
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
        table = data.get("broker", data)
        beside = sorted(data.keys() - {"broker"}) if table is not data else []
        if beside:  # settings live in [broker]; anything beside it is not understood
            raise ValueError(f"unknown table or key beside [broker] in {path}: {beside[0]!r}")
        merged = dict(table)  # keys as written, so an error names them as the user spelled them
        merged.update(overrides or {})  # after the file's: a flag wins (from_mapping keeps the last)
        return cls.from_mapping(merged)


_FIELD_TYPES = typing.get_type_hints(BrokerConfig)


def _typed(key: str, hint: Any, value: Any) -> Any:
    """`value` as the setting's type (a TOML string for a path, an int for a float), or a
    ValueError naming the setting: a value of the wrong type must not reach the broker."""
    if isinstance(hint, types.UnionType):  # "X | None": None is allowed
        if value is None:
            return None
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is str and isinstance(value, str):
        return value
    if hint is Path and isinstance(value, (str, Path)):
        return Path(value)
    kind = {bool: "true or false", int: "an integer", float: "a number", str: "a string", Path: "a path"}[hint]
    raise ValueError(f"broker setting {key!r} must be {kind}, got {value!r}")
