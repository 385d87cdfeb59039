"""The txmq Spark source: `spark.readStream.format("txmq")` and `spark.read.format("txmq")`.

Only committed (and non-transactional) messages are ever in a user topic's
queues, so reading committed-only is the broker's job; the source's job is to
end every batch at a consistent cut, so that a transaction spanning queues
lands in one micro-batch whole, and to make the plan of a batch a pure function
of its (checkpointed) offsets, so a replay after a restart reads the same rows.

Where the code runs:
- the stream reader lives in one long-lived Python process on the driver: it
  keeps a client and caches the last cut it saw; `latestOffset` long-polls the
  broker (`wait_for_offsets`) instead of asking it ~100 times a second;
- `read()` runs on executors from a pickled reader: partitions carry only
  primitives and each executor process opens one client lazily and keeps it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import logging
import platform
import re
import threading
import time
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from txmq.broker.errors import DataDeleted, TopicNotFound
from txmq.broker.store.message import SYSTEM_TOPICS

from . import offsets as off
from .client_seam import ConnectorClient, PlannerClient, QueueReader
from .options import Connection, InvalidOption, QueueKey, SourceOptions, parse_tags, queue_name
from .pushdown import combine, push
from .python_exec import check_executors_python
from .schema import SOURCE_SCHEMA, conform_source_batch

log = logging.getLogger("txmq.spark.source")

# --- executor side ------------------------------------------------------------------

# Bytes of records per streamed batch: Spark converts one batch while the broker builds the next.
PULL_BATCH_BYTES = 8 << 20

_clients: dict[Connection, ConnectorClient] = {}
_clients_lock = threading.Lock()


def executor_client(conn: Connection) -> ConnectorClient:
    """One client per (executor process, connection): Python workers are reused across tasks."""
    with _clients_lock:
        client = _clients.get(conn)
        if client is None:
            client = _clients[conn] = conn.client()
        return client


class TxmqInputPartition(InputPartition):
    """Rows [start, end) of one queue, (group, queue id). Only primitives: it is pickled to executors."""

    def __init__(self, topic: str, group: str, queue_id: int, start: int, end: int) -> None:
        super().__init__((topic, group, queue_id, start, end))
        self.topic, self.group, self.queue_id, self.start, self.end = topic, group, queue_id, start, end

    @property
    def queue(self) -> str:
        return f"{self.topic}/{queue_name((self.group, self.queue_id))}"

    def __repr__(self) -> str:
        return f"TxmqInputPartition({self.queue} [{self.start}, {self.end}))"


_heap_frozen = False


def _freeze_heap_once() -> None:
    """Move everything alive now out of the cyclic collector's way, once per worker process.

    pyspark's worker daemon runs a full `gc.collect()` after every task. A worker that has
    decoded a pull holds numba and its compiled code, which every such collection walks
    (figures: docs/benchmarks.md). Frozen (gc.freeze), they are skipped by every later collection; they are the
    process's modules and code, alive to its end anyway. Reference counting frees objects as
    before; what the cyclic collector alone would have freed among the first task's objects
    alive at that moment (its first batch, the pull in flight) stays: once per process.
    """
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.freeze()


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
_buffers_kept = False


def _keep_receive_buffers_once() -> None:
    """Let glibc keep freed multi-megabyte blocks for reuse, once per worker process (glibc only).

    Flight's gRPC transport receives every batch into blocks it mallocs and frees; by glibc's
    defaults a freed block that large goes back to the kernel, so each batch faults in fresh
    zeroed pages (figures: docs/benchmarks.md). Blocks up to four batches' size now come from
    the heap and go back to it, which keeps up to 128 MiB free for the next ones.
    """
    global _buffers_kept
    if not _buffers_kept:
        _buffers_kept = True
        if platform.libc_ver()[0] == "glibc":
            libc = ctypes.CDLL(None)
            libc.mallopt(_M_MMAP_THRESHOLD, 4 * PULL_BATCH_BYTES)
            libc.mallopt(_M_TRIM_THRESHOLD, 128 << 20)


def read_in_worker(options: SourceOptions, part: TxmqInputPartition) -> Iterator[pa.RecordBatch]:
    """`read()` of both readers (in a Spark worker): the partition's batches, received into
    buffers the worker keeps (`_keep_receive_buffers_once`), the worker's heap frozen once its
    first batch is decoded (the decode's compiled code is loaded by then)."""
    _keep_receive_buffers_once()
    for batch in read_queue_range(options.connection, part, tags=options.tags, sql=options.filter,
                                  fail_on_data_loss=options.fail_on_data_loss):
        _freeze_heap_once()
        yield batch


def read_queue_range(conn: Connection, part: TxmqInputPartition, *, tags: str | None, sql: str | None = None,
                     fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """One queue range as Arrow batches in exactly the source schema, streamed from the broker's
    Flight service: the broker builds the next batch while this worker converts the current one.
    `tags` and `sql` (a SQL92 filter) are applied by the broker: batches then hold the rows that pass."""
    client: QueueReader = executor_client(conn)
    tag_expr = None if tags is None or parse_tags(tags) is None else tags
    pos = part.start
    while pos < part.end:
        try:
            for result in client.read_queue(part.topic, (part.group, part.queue_id), pos, part.end, tags=tag_expr,
                                            sql=sql, batch_bytes=PULL_BATCH_BYTES):
                if result.next_offset <= pos:
                    raise RuntimeError(f"txmq source: read of {part.queue} at {pos} made no progress")
                pos = result.next_offset
                if result.batch.num_rows:
                    yield conform_source_batch(result.batch, part.group)
        except DataDeleted as e:
            pos = _after_data_loss(e, part, pos, fail_on_data_loss)


def _after_data_loss(e: DataDeleted, part: TxmqInputPartition, pos: int, fail_on_data_loss: bool) -> int:
    """Where to go on after [pos, e.min_offset) was deleted by retention (or raise, by default)."""
    if fail_on_data_loss:
        raise DataDeleted(
            f"txmq source: offsets [{pos}, {e.min_offset}) of {part.queue} were "
            "deleted by retention before they were read (data loss). Set the option "
            "failOnDataLoss=false to skip them with a warning instead.",
            min_offset=e.min_offset,
        ) from e
    log.warning("txmq source: skipping offsets [%d, %d) of %s deleted by retention (failOnDataLoss=false)",
                pos, e.min_offset, part.queue)
    if e.min_offset <= pos:
        raise e
    return e.min_offset


# --- driver side ---------------------------------------------------------------------


class _Planner:
    """What both readers do on the driver: find topics, resolve offsets, make consistent cuts."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: PlannerClient | None = None
        self._topics: tuple[str, ...] = options.topics
        self._topics_at = 0.0

    # pickling: executors get options only, never a live client
    def __getstate__(self) -> dict:
        return {"options": self.options, "_client": None, "_topics": self._topics, "_topics_at": 0.0}

    @property
    def client(self) -> PlannerClient:
        if self._client is None:
            self._client = self.options.connection.client()
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def topics(self) -> list[str]:
        """The topic list, or the topics matching topicPattern (refreshed, so new ones are picked up)."""
        pattern = self.options.topic_pattern
        if pattern is None:
            return list(self._topics)
        now = time.monotonic()
        if not self._topics_at or (now - self._topics_at) * 1000 >= self.options.topic_refresh_ms:
            rx = re.compile(pattern)
            self._topics = tuple(sorted(t.name for t in self.client.list_topics()
                                        if t.name not in SYSTEM_TOPICS and rx.fullmatch(t.name)))
            self._topics_at = now
        return list(self._topics)

    def _existing(self, cut_fn, topics: list[str]) -> off.Cut:
        if not topics:
            return {}
        try:
            return cut_fn(topics)
        except TopicNotFound as e:
            raise TopicNotFound(f"txmq source: topic not found ({e}); options topic={','.join(topics)}") from e

    def latest(self) -> off.Cut:
        return self._existing(self.client.snapshot_offsets, self.topics())

    def across_groups(self, start: off.Cut, end: off.Cut) -> off.Cut:
        """`end` lowered, where a transaction across broker groups is not yet applied on all of
        them, to a cut it lies wholly above (a cut of one group is returned as it is)."""
        if len({g for queues in end.values() for g, _ in queues}) <= 1:
            return end
        return self.client.consistent_cut(sorted(end), start, end)

    def earliest(self) -> off.Cut:
        return self._existing(self.client.min_offsets, self.topics())

    def at_timestamp(self, ts_ms: int, latest: off.Cut) -> off.Cut:
        found = self._existing(lambda t: self.client.offsets_for_timestamp(t, ts_ms), self.topics())
        return off.clamp(found, {}, latest)

    def resolve(self, spec, ts_ms: int | None, default: str, option: str) -> off.Cut:
        """A startingOffsets/endingOffsets option (or timestamp) as a cut."""
        latest = self.latest()
        if ts_ms is not None:
            return self.at_timestamp(ts_ms, latest)
        spec = spec if spec is not None else default
        if spec == "latest":
            return latest
        if spec == "earliest":
            return off.clamp(self.earliest(), {}, latest)
        return off.with_new_queues(off.resolve_spec(spec, self.earliest(), latest, option=option), latest,
                                   self.earliest())

    def limited_end(self, start: off.Cut, latest: off.Cut, max_rows: int) -> off.Cut:
        """At most `max_rows` past `start` (shared by backlog), moved back to a consistent cut.

        A split by backlog alone could cut a transaction that spans queues in two.
        The store appends a commit's messages as one group under one store time,
        and store times grow along the commit log. So "everything stored before
        ms t" and "everything stored through ms t" are consistent cuts, where t is
        the earliest store time among the first messages the proposal leaves out.
        Between the two, only the messages of ms t are read: the proposal keeps
        its ends there, moved back until no transaction has messages on both
        sides. If that leaves nothing (one transaction larger than the limit), the
        batch takes all of ms t: larger than the limit, never torn.
        """
        proposal = off.split_limit(start, latest, max_rows)
        if proposal == latest:
            return latest
        base = off.clamp(start, start, latest)
        first_out = [self._store_time(t, q, proposal[t][q]) for t, qs in proposal.items()
                     for q in qs if proposal[t][q] < latest[t][q]]
        known = [ts for ts in first_out if ts is not None]
        if not known:
            return latest
        cut_ms = min(known)
        topics = sorted(latest)
        low = off.clamp(self.client.offsets_for_timestamp(topics, cut_ms), base, latest)
        high = off.clamp(self.client.offsets_for_timestamp(topics, cut_ms + 1), base, latest)
        end = off.clamp(proposal, low, high)
        tx_ids = {(t, q): self._transaction_ids(t, q, low[t][q], high[t][q])
                  for t, qs in high.items() for q in qs if high[t][q] > low[t][q]}
        while True:
            inside: set[str] = set()
            outside: set[str] = set()
            for (t, q), ids in tx_ids.items():
                cut = end[t][q] - low[t][q]
                inside.update(i for i in ids[:cut] if i)
                outside.update(i for i in ids[cut:] if i)
            torn = inside & outside
            if not torn:
                break
            # Move each queue's end back to its first message of a torn transaction. Some
            # queue holds one inside the cut, so the cut shrinks every round: this ends.
            before = off.total(end)
            for (t, q), ids in tx_ids.items():
                cut = end[t][q] - low[t][q]
                first_torn = next((i for i, tx in enumerate(ids[:cut]) if tx in torn), None)
                if first_torn is not None:
                    end[t][q] = low[t][q] + first_torn
            assert off.total(end) < before, "a round that moves no end would never finish"
        if off.total(end) > off.total(base):
            return end
        return high

    def _store_time(self, topic: str, queue: QueueKey, offset: int) -> int | None:
        """Store time (ms) of one message, read with a one-row pull."""
        try:
            result = self.client.pull_arrow(topic, queue, offset, offset + 1)
        except DataDeleted:
            return None
        if result.batch is None or result.batch.num_rows == 0:
            return None
        return _epoch_ms(result.batch.column("storeTimestamp")[0])

    def _transaction_ids(self, topic: str, queue: QueueKey, start: int, end: int) -> list[str | None]:
        """The transactionId of every message in [start, end) of one queue (None for plain messages)."""
        ids: list[str | None] = []
        for result in self.client.read_queue(topic, queue, start, end):
            ids.extend(result.batch.column("transactionId").to_pylist())
        ids.extend([None] * (end - start - len(ids)))
        return ids

    def partitions(self, start: off.Cut, end: off.Cut) -> list[TxmqInputPartition]:
        return [TxmqInputPartition(r.topic, r.group, r.queue_id, r.start, r.end)
                for r in off.plan_ranges(start, end, self.options.max_rows_per_partition)]


def _epoch_ms(scalar: pa.Scalar) -> int:
    if pa.types.is_timestamp(scalar.type):
        unit = scalar.type.unit
        raw = scalar.cast(pa.int64()).as_py()
        return {"s": raw * 1000, "ms": raw, "us": raw // 1000, "ns": raw // 1_000_000}[unit]
    return int(scalar.as_py())


class TxmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of committed messages, each ending at a consistent cut."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.planner = _Planner(options)
        self._target: off.Cut | None = None  # Trigger.AvailableNow: never read past this
        self._last_seen: off.Cut | None = None
        self._last_batch_at = time.monotonic()
        self._group_committed: off.Cut | None = None

    def __getstate__(self) -> dict:
        return {"options": self.options, "planner": _Planner(self.options), "_target": None,
                "_last_seen": None, "_last_batch_at": 0.0, "_group_committed": None}

    def initialOffset(self) -> dict:
        o = self.options
        cut = self.planner.resolve(o.starting, o.starting_timestamp, "latest", "startingOffsets")
        return off.to_json(cut)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.planner.latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def _poll_latest(self, start: off.Cut) -> off.Cut:
        """The current cut; when `start` has caught up, wait (long poll) for new commits.

        `wait_for_offsets` answers at once when any queue is already past `start`.
        """
        topics = self.planner.topics()
        if not topics:
            return {}
        known = off.with_new_queues(start, {t: {} for t in topics})
        latest = self.planner.client.wait_for_offsets(topics, known, self.options.poll_interval_ms)
        return latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start_cut = off.from_json(start)
        self._commit_group(start_cut)
        if self._target is not None:
            latest = self._target
        else:
            latest = self._poll_latest(start_cut)
        self._last_seen = latest
        start_cut = off.with_new_queues(start_cut, latest)
        lag = sum(off.backlog(start_cut, latest).values())
        if lag == 0:
            return start
        min_rows = self.options.min_offsets_per_trigger
        if (min_rows is not None and self._target is None and lag < min_rows
                and (time.monotonic() - self._last_batch_at) * 1000 < self.options.max_trigger_delay_ms):
            return start
        if isinstance(limit, ReadMaxRows) and lag > limit.max_rows:
            end = self.planner.limited_end(start_cut, latest, limit.max_rows)
        else:
            end = latest
        end = self.planner.across_groups(start_cut, end)
        if end == start_cut:
            return start
        self._last_batch_at = time.monotonic()
        return off.to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._last_seen is None else off.to_json(self._last_seen)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self.planner.partitions(off.from_json(start), off.from_json(end))

    def read(self, partition: TxmqInputPartition) -> Iterator[pa.RecordBatch]:
        return read_in_worker(self.options, partition)

    def commit(self, end: dict) -> None:
        self._commit_group(off.from_json(end))

    def _commit_group(self, processed: off.Cut) -> None:
        """Record processed offsets under `consumerGroup` (for lag monitoring; Spark's checkpoint rules).

        Spark calls `commit(end)` only when it plans the next batch with data, so
        `latestOffset(start)` also reports `start`: every batch before it finished.
        """
        group = self.options.consumer_group
        if group is None or not processed or processed == self._group_committed:
            return
        try:
            self.planner.client.commit_offsets(group, processed)
            self._group_committed = processed
        except Exception as e:  # progress reporting must not fail the query
            log.warning("txmq source: could not commit offsets of group %s: %s", group, e)

    def stop(self) -> None:
        self.planner.close()


class TxmqBatchReader(DataSourceReader):
    """`spark.read.format("txmq")`: startingOffsets (default earliest) to endingOffsets (default latest)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planned: list[TxmqInputPartition] | None = None

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        planner = _Planner(o)
        try:
            start = planner.resolve(o.starting, o.starting_timestamp, "earliest", "startingOffsets")
            end = planner.resolve(o.ending, o.ending_timestamp, "latest", "endingOffsets")
            start = off.with_new_queues(start, end)
            end = planner.across_groups(start, end)
            bad = [(t, q) for t, qs in start.items() for q, s in qs.items() if s > end.get(t, {}).get(q, s)]
            if bad:
                raise InvalidOption(f"startingOffsets is after endingOffsets for queue(s) {bad}")
            return planner.partitions(start, end)
        finally:
            planner.close()

    def read(self, partition: TxmqInputPartition) -> Iterator[pa.RecordBatch]:
        return read_in_worker(self.options, partition)


class TxmqPushdownBatchReader(TxmqBatchReader):
    """A batch reader that takes Spark's pushed filters on `tag` (connector/pushdown.py) into the
    SQL92 filter the broker applies. A separate class chosen by the option `pushFilters=true`,
    because Spark refuses any reader that implements pushFilters while the session's
    `spark.sql.python.filterPushdown.enabled` is off (its default)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        taken: list[str] = []
        yield from push(filters, taken)
        if taken:
            self.options = dataclasses.replace(self.options, filter=combine(self.options.filter, taken))


class TxmqDataSource(DataSource):
    """The data source "txmq": read committed messages, write through transactions."""

    def __init__(self, options: dict) -> None:
        # made in the driver's planner process only (executors get pickled readers and writers)
        check_executors_python()
        super().__init__(options)

    @classmethod
    def name(cls) -> str:
        return "txmq"

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options, streaming=False)
        return TxmqPushdownBatchReader(options) if options.push_filters else TxmqBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TxmqStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from .sink import TxmqBatchWriter

        return TxmqBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink import TxmqStreamWriter

        return TxmqStreamWriter(self.options, schema)
