"""Parsing and validation of the connector's options.

Spark hands a data source its options as a case-insensitive map of strings. We
parse them once, on the driver, into frozen dataclasses of primitives (which
pickle to executors as they are), and refuse anything unclear with an error
that names the option and the value, because that message is all a user sees
in a failed query. Names are camelCase like Kafka's source.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from txmq.broker.errors import BadRequest, IllegalFilterExpression

if TYPE_CHECKING:  # the client is imported late: executors open clients lazily
    from .client_seam import ConnectorClient

EARLIEST = -2
LATEST = -1

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?|m|min|minutes?|h|hours?)?\s*$", re.I)
_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "sec": 1000, "second": 1000, "seconds": 1000,
                      "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000,
                      "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000}
_ENDPOINT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")


class InvalidOption(BadRequest):
    """An option of the txmq data source is missing, unknown or has a bad value."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _get(opts: dict[str, str], name: str) -> str | None:
    value = opts.get(name.lower())
    return None if value is None or value.strip() == "" else value.strip()


def parse_bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    v = value.lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise InvalidOption(f"option '{name}' must be true or false, got {value!r}")


def parse_positive_int(name: str, value: str | None, *, allow_zero: bool = False) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise InvalidOption(f"option '{name}' must be an integer, got {value!r}") from None
    if n < 0 or (n == 0 and not allow_zero):
        raise InvalidOption(f"option '{name}' must be {'>= 0' if allow_zero else '> 0'}, got {n}")
    return n


def parse_duration_ms(name: str, value: str | None, default_ms: int) -> int:
    """'15m', '30s', '500ms', '2 minutes' or a bare number of milliseconds."""
    if value is None:
        return default_ms
    m = _DURATION.match(value)
    if not m:
        raise InvalidOption(f"option '{name}' must be a duration like '15m', '30s' or '500ms', got {value!r}")
    unit = (m.group(2) or "ms").lower()
    return int(float(m.group(1)) * _DURATION_UNITS_MS[unit])


def parse_endpoints(value: str | None) -> str:
    if value is None:
        raise InvalidOption("option 'broker' is required: the broker address as host:port[;host:port]")
    parts = [p.strip() for p in value.replace(",", ";").split(";") if p.strip()]
    if not parts:
        raise InvalidOption(f"option 'broker' must be host:port[;host:port], got {value!r}")
    for part in parts:
        if not _ENDPOINT.match(part) or not (0 < int(part.rsplit(":", 1)[1]) < 65536):
            raise InvalidOption(f"option 'broker' must be host:port[;host:port], got {value!r} (bad part {part!r})")
    return ";".join(parts)


QueueKey = tuple[str, int]  # (group, queue id); the group is "" outside a cluster


def queue_name(key: QueueKey) -> str:
    group, queue_id = key
    return f"{group}/{queue_id}" if group else str(queue_id)


def parse_queue_offsets(queues: dict) -> dict[QueueKey, int]:
    """{"0": 42} (a lone broker's queues) or {"g1": {"0": 42}} (a cluster's) as {(group, queue id): 42}."""
    out: dict[QueueKey, int] = {}
    for key, value in queues.items():
        if isinstance(value, dict):
            for qid, off in value.items():
                out[(str(key), int(qid))] = off
        else:
            out[("", int(key))] = value
    return out


def parse_offsets_spec(name: str, value: str | None) -> str | dict[str, dict[QueueKey, int]] | None:
    """'earliest' | 'latest' | JSON {"topic": {"queueId": offset}} or, in a cluster,
    {"topic": {"group": {"queueId": offset}}} (-2 earliest, -1 latest)."""
    if value is None:
        return None
    low = value.lower()
    if low in ("earliest", "latest"):
        return low
    try:
        raw = json.loads(value)
    except json.JSONDecodeError:
        raise InvalidOption(
            f"option '{name}' must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 42}}}}, got {value!r}'
        ) from None
    if not isinstance(raw, dict) or not raw:
        raise InvalidOption(f"option '{name}' JSON must be a non-empty object of topics, got {value!r}")
    spec: dict[str, dict[QueueKey, int]] = {}
    for topic, queues in raw.items():
        if not isinstance(queues, dict):
            raise InvalidOption(f"option '{name}': topic {topic!r} must map to {{queueId: offset}}, got {queues!r}")
        try:
            parsed = parse_queue_offsets(queues)
        except (TypeError, ValueError):
            raise InvalidOption(f"option '{name}': a queue id of topic {topic!r} is not an integer: "
                                f"{json.dumps(queues)}") from None
        for key, off in parsed.items():
            if not isinstance(off, int) or isinstance(off, bool) or off < -2:
                raise InvalidOption(
                    f"option '{name}': offset {off!r} of {topic}/{queue_name(key)} must be an integer >= 0, "
                    "-2 (earliest) or -1 (latest)"
                )
        spec[topic] = parsed
    return spec


@dataclass(frozen=True)
class Connection:
    """How to reach the broker: what an executor needs to open its own client."""

    endpoints: str
    access_key: str | None = None
    secret_key: str | None = None
    tls: bool = False
    ca_pem: bytes | None = None  # the tlsCaFile's contents, read on the driver: executors on other hosts lack the file
    timeout_s: float = 30.0
    local_reads: bool = False  # same host only: decode the broker's CommitLog files (client/local_read.py)

    @staticmethod
    def parse(opts: dict[str, str]) -> "Connection":
        access, secret = _get(opts, "accessKey"), _get(opts, "secretKey")
        if (access is None) != (secret is None):
            raise InvalidOption("options 'accessKey' and 'secretKey' must be given together")
        ca_file = _get(opts, "tlsCaFile")
        tls = parse_bool("tls", _get(opts, "tls"), default=ca_file is not None)
        ca_pem = _read_ca_file(ca_file) if ca_file is not None else None
        timeout = parse_positive_int("requestTimeoutMs", _get(opts, "requestTimeoutMs"))
        local_reads = parse_bool("localReads", _get(opts, "localReads"), default=False)
        return Connection(parse_endpoints(_get(opts, "broker")), access, secret, tls, ca_pem,
                          timeout / 1000 if timeout else 30.0, local_reads)

    def client(self) -> ConnectorClient:
        """A new ClusterClient (imported late: executors open clients lazily): a cluster's groups
        from any of its brokers, or a lone broker as one group named ""."""
        from txmq.broker.client.cluster_client import ClusterClient

        return ClusterClient(self.endpoints, access_key=self.access_key, secret_key=self.secret_key,
                             tls=self.tls, ca_file=self.ca_file_on_this_host(), timeout_s=self.timeout_s,
                             local_reads=self.local_reads)

    def ca_file_on_this_host(self) -> str | None:
        """The CA bundle as a file on the host this runs on (an executor's, or the driver's), named by its
        digest, written once and atomically: the client reads a path."""
        if self.ca_pem is None:
            return None
        path = Path(tempfile.gettempdir()) / f"txmq-ca-{hashlib.sha256(self.ca_pem).hexdigest()[:16]}.pem"
        if not path.exists():
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(self.ca_pem)
            os.replace(tmp, path)
        return str(path)


def _read_ca_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InvalidOption(f"option 'tlsCaFile': cannot read {path!r} on the driver: {e.strerror}") from None


_SOURCE_OPTIONS = {
    "broker", "accesskey", "secretkey", "tls", "tlscafile", "requesttimeoutms",
    "topic", "topicpattern", "tags", "startingoffsets", "startingtimestamp", "endingoffsets",
    "endingtimestamp", "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
    "failondataloss", "consumergroup", "pollintervalms", "maxrowsperpartition", "topicrefreshms",
    "path", "localreads", "filter", "pushfilters",
}


@dataclass(frozen=True)
class SourceOptions:
    connection: Connection
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    tags: str | None = None
    starting: str | dict[str, dict[int, int]] | None = None
    starting_timestamp: int | None = None
    ending: str | dict[str, dict[int, int]] | None = None
    ending_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    consumer_group: str | None = None
    poll_interval_ms: int = 250
    max_rows_per_partition: int = 1_000_000
    topic_refresh_ms: int = 1000
    filter: str | None = None       # a SQL92 filter the broker applies (the option, plus pushed predicates)
    push_filters: bool = False

    @staticmethod
    def parse(options: Mapping[str, str], *, streaming: bool) -> "SourceOptions":
        opts = _lower(options)
        unknown = sorted(set(opts) - _SOURCE_OPTIONS)
        if unknown:
            raise InvalidOption(f"unknown txmq source option(s) {unknown}")
        conn = Connection.parse(opts)
        topic, pattern = _get(opts, "topic"), _get(opts, "topicPattern")
        if (topic is None) == (pattern is None):
            raise InvalidOption("give exactly one of the options 'topic' (comma list) or 'topicPattern' (regex)")
        topics: tuple[str, ...] = ()
        if topic is not None:
            topics = tuple(t.strip() for t in topic.split(",") if t.strip())
            if not topics:
                raise InvalidOption(f"option 'topic' names no topic: {topic!r}")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise InvalidOption(f"option 'topicPattern' is not a valid regex ({e}): {pattern!r}") from None
        tags = _get(opts, "tags")
        if tags is not None:
            parse_tags(tags)
        starting = parse_offsets_spec("startingOffsets", _get(opts, "startingOffsets"))
        starting_ts = parse_positive_int("startingTimestamp", _get(opts, "startingTimestamp"), allow_zero=True)
        if starting is not None and starting_ts is not None:
            raise InvalidOption("give only one of 'startingOffsets' and 'startingTimestamp'")
        ending = parse_offsets_spec("endingOffsets", _get(opts, "endingOffsets"))
        ending_ts = parse_positive_int("endingTimestamp", _get(opts, "endingTimestamp"), allow_zero=True)
        if streaming and (ending is not None or ending_ts is not None):
            raise InvalidOption("'endingOffsets'/'endingTimestamp' are for batch queries (spark.read) only")
        if ending == "earliest":
            raise InvalidOption("option 'endingOffsets' cannot be 'earliest'")
        if ending is not None and ending_ts is not None:
            raise InvalidOption("give only one of 'endingOffsets' and 'endingTimestamp'")
        if isinstance(ending, dict) and any(v == EARLIEST for q in ending.values() for v in q.values()):
            raise InvalidOption("option 'endingOffsets' cannot use -2 (earliest)")
        if isinstance(starting, dict) and pattern is not None:
            raise InvalidOption("a JSON 'startingOffsets' needs 'topic', not 'topicPattern'")
        if starting == "latest" and not streaming:
            raise InvalidOption("option 'startingOffsets' cannot be 'latest' in a batch query")
        max_t = parse_positive_int("maxOffsetsPerTrigger", _get(opts, "maxOffsetsPerTrigger"))
        min_t = parse_positive_int("minOffsetsPerTrigger", _get(opts, "minOffsetsPerTrigger"))
        if max_t is not None and min_t is not None and min_t > max_t:
            raise InvalidOption(f"'minOffsetsPerTrigger' ({min_t}) is larger than 'maxOffsetsPerTrigger' ({max_t})")
        delay = parse_duration_ms("maxTriggerDelay", _get(opts, "maxTriggerDelay"), 15 * 60_000)
        fail = parse_bool("failOnDataLoss", _get(opts, "failOnDataLoss"), default=True)
        group = _get(opts, "consumerGroup")
        if group is not None and not re.match(r"^[A-Za-z0-9%_\-|]{1,255}$", group):
            raise InvalidOption(f"option 'consumerGroup' is not a valid group name: {group!r}")
        poll = parse_positive_int("pollIntervalMs", _get(opts, "pollIntervalMs")) or 250
        per_part = parse_positive_int("maxRowsPerPartition", _get(opts, "maxRowsPerPartition")) or 1_000_000
        refresh = parse_positive_int("topicRefreshMs", _get(opts, "topicRefreshMs"), allow_zero=True)
        sql = parse_filter(_get(opts, "filter"))
        push = parse_bool("pushFilters", _get(opts, "pushFilters"), default=False)
        if push and streaming:
            raise InvalidOption("option 'pushFilters' is for batch queries (spark.read) only: Spark pushes no "
                                "filters into a Python streaming source; use the option 'filter'")
        return SourceOptions(conn, topics, pattern, tags, starting, starting_ts, ending, ending_ts, max_t,
                             min_t, delay, fail, group, poll, per_part, 1000 if refresh is None else refresh,
                             sql, push)


def parse_filter(expr: str | None) -> str | None:
    """The option 'filter' (a SQL92 expression), checked here so a bad one fails the query's planning."""
    if expr is None or not expr.strip():
        return None
    from txmq.broker.store.sql92 import SqlFilter

    try:
        SqlFilter.compile(expr)
    except IllegalFilterExpression as e:
        raise InvalidOption(f"option 'filter' is not a valid SQL92 filter: {e}") from None
    return expr


def parse_tags(expr: str) -> list[str] | None:
    """'*' → None (all); 'A || B' → ['A', 'B']. Refuses empty alternatives."""
    if expr.strip() == "*":
        return None
    parts = [p.strip() for p in expr.split("||")]
    if any(not p for p in parts):
        raise InvalidOption(f"option 'tags' must be '*' or tags joined by '||', got {expr!r}")
    return parts


_SINK_OPTIONS = {
    "broker", "accesskey", "secretkey", "tls", "tlscafile", "requesttimeoutms",
    "topic", "sinkid", "producergroup", "checkpointlocation", "path", "maxbatchrows",
}


@dataclass(frozen=True)
class SinkOptions:
    connection: Connection
    topic: str | None
    sink_id: str | None
    producer_group: str | None
    max_batch_rows: int = 4096
    checkpoint_location: str | None = None  # where a streaming sink records a batch committed in parts

    @staticmethod
    def parse(options: Mapping[str, str]) -> "SinkOptions":
        opts = _lower(options)
        unknown = sorted(set(opts) - _SINK_OPTIONS)
        if unknown:
            raise InvalidOption(f"unknown txmq sink option(s) {unknown}")
        conn = Connection.parse(opts)
        sink_id = _get(opts, "sinkId")
        if sink_id is not None and not re.match(r"^[A-Za-z0-9_\-.]{1,64}$", sink_id):
            raise InvalidOption(f"option 'sinkId' must be 1-64 of [A-Za-z0-9_-.], got {sink_id!r}")
        if sink_id is None and _get(opts, "checkpointLocation") is not None:
            sink_id = sink_id_for_checkpoint(_get(opts, "checkpointLocation") or "")
        rows = parse_positive_int("maxBatchRows", _get(opts, "maxBatchRows")) or 4096
        return SinkOptions(conn, _get(opts, "topic"), sink_id, _get(opts, "producerGroup"), rows,
                           _get(opts, "checkpointLocation"))


def sink_id_for_checkpoint(location: str) -> str:
    """A stable id for a streaming query's sink: the checkpoint location, hashed.

    The checkpoint is what makes a restarted query "the same query", so it is what
    the transaction ids of its batches must derive from.
    """
    norm = without_file_scheme(location.rstrip("/"))
    return "ckpt-" + hashlib.sha1(norm.encode()).hexdigest()[:16]


def without_file_scheme(location: str) -> str:
    """`file:///chk/q` and `file:/chk/q` as `/chk/q`; anything else unchanged."""
    if location.startswith("file:"):
        location = location[5:]
        while location.startswith("//"):
            location = location[1:]
    return location
