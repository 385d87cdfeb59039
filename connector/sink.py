"""The txmq Spark sink: `df.writeStream.format("txmq")` and `df.write.format("txmq")`, exactly once.

Two-phase commit over the broker's transactions:
1. each task sends its rows as half messages of the batch's ONE transaction,
   tagged with a sender = (partition, attempt, a nonce of this driver run);
2. the driver's `commit(messages, batchId)` ends the transaction with COMMIT,
   naming the senders of the successful task attempts only: their halves become
   visible atomically, every other half (failed attempts, a dead run) is rolled
   back in the same op record. `abort` rolls the transaction back.

A row with a `deliverAt` is sent as a half carrying that time; the COMMIT schedules
it with the broker's timer instead of publishing it (a failed batch schedules nothing).

A batch replayed after a restart derives the same transaction id (sink id from
the checkpoint location, batch id from Spark); if that transaction already
committed, `prepare_arrow` refuses new halves with TransactionAlreadyEnded, the
task sends nothing and the commit is a no-op: no duplicates.

Across broker groups each task writes with the groups taking the topic's writes when
it runs, into the batch's part for that list (transactions.py). A queue move between
two tasks gives a batch two parts: the driver records the batch's decision (its parts
and their senders) in the checkpoint before the first part commits, then commits each
part; a run that dies between parts leaves the decision, which the replay's commit
finishes (the replay's own halves are rolled back) and its abort leaves alone.

Where the code runs: the writer is built on the driver (once per micro-batch),
pickled to executors for `write()`, and rebuilt in a short-lived worker for
`commit`/`abort`. So it holds only options, and every process opens its own client.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from txmq.broker.errors import (
    IllegalDeliveryTime,
    QueueSealed,
    TopicNotFound,
    TransactionAlreadyEnded,
    TransactionConflict,
    UnknownTransaction,
)

from txmq.broker.client.types import CheckRequest

from . import transactions as txn
from .client_seam import CheckbackHandle, ConnectorClient, TransactionClient
from .checkpoint_fs import CheckpointDir, is_local
from .faults import crash_point, pause_point
from .options import InvalidOption, SinkOptions
from .schema import sink_arrow_batch, validate_sink_schema
from .source import executor_client

log = logging.getLogger("txmq.spark.sink")

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark's MicroBatchExecution on every task
# how often a streaming task sends its rows again when a move seals the queue it writes to, and
# how much of its input it keeps for that
MOVED_RESENDS = 5
MOVED_RESEND_KEEP_BYTES = 64 << 20


@dataclass
class TxmqCommitMessage(WriterCommitMessage):
    """What one task attempt reports to the driver: where its halves went."""

    transaction_id: str
    sender: str
    rows: int
    already_committed: bool = False
    participants: tuple[str, ...] = ()  # the broker groups the attempt's halves named (batch_participants)
    # parts this attempt left when a move sealed the queue it wrote to (it sent its rows again elsewhere):
    # (transaction id, participants); the driver rolls back those no other attempt committed into
    abandoned: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _task_identity() -> tuple[int, int, str | None]:
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise RuntimeError("txmq sink: write() must run inside a Spark task")
    return tc.partitionId(), tc.attemptNumber(), tc.getLocalProperty(BATCH_ID_PROPERTY)


def send_halves(client: TransactionClient, batches: Iterator[pa.RecordBatch], *, transaction_id: str, sender: str,
                topic: str | None, producer_group: str, max_batch_rows: int,
                participants: tuple[str, ...] = ()) -> tuple[int, bool]:
    """Send every row as a half of `transaction_id`. Returns (rows sent, already committed).

    Already committed means a replay of a batch whose transaction committed in an
    earlier run: nothing is sent.
    """
    rows = 0

    def chunks() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for batch in batches:
            for start in range(0, batch.num_rows, max_batch_rows):
                chunk = sink_arrow_batch(batch.slice(start, max_batch_rows))
                rows += chunk.num_rows
                yield chunk

    try:  # one Flight stream for the whole partition: the broker stores a chunk while the next is sent
        client.prepare_stream(transaction_id, chunks(), topic=topic, producer_group=producer_group, sender=sender,
                              participants=participants)
    except TransactionAlreadyEnded as e:
        if txn.state_name(e.state) == txn.COMMITTED:
            return 0, True
        raise
    except TopicNotFound as e:
        raise TopicNotFound(f"txmq sink: {e} (topic option={topic!r}); create the topic first "
                            "or enable auto-creation on the broker") from e
    except IllegalDeliveryTime as e:
        raise IllegalDeliveryTime(f"txmq sink: a row's deliverAt was refused, nothing of the batch is "
                                  f"committed: {e}") from e
    return rows, False


@dataclass(frozen=True)
class BatchPart:
    """One transaction of a batch: the halves its tasks wrote with one participant list, and the
    senders (successful task attempts) whose halves its COMMIT makes visible."""

    transaction_id: str
    participants: tuple[str, ...]
    senders: tuple[str, ...]


def batch_parts(messages: Sequence[TxmqCommitMessage | None], what: str) -> list[BatchPart]:
    """The parts the attempts that sent rows wrote to: one per participant list (a queue move
    between two tasks gives two). RuntimeError when one list names two transactions."""
    senders: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    for m in messages:
        if m is not None and m.rows > 0 and not m.already_committed:
            senders.setdefault((m.transaction_id, m.participants), set()).add(m.sender)
    lists = [participants for _, participants in senders]
    if len(lists) != len(set(lists)):
        raise RuntimeError(f"txmq sink: {what} wrote to several transactions {sorted(tx for tx, _ in senders)}; "
                           "failing the batch (a transaction was ended while the batch ran); it will be replayed")
    return [BatchPart(tx, participants, tuple(sorted(names))) for (tx, participants), names in sorted(senders.items())]


def commit_part(client: TransactionClient, part: BatchPart, *, producer_group: str, what: str) -> None:
    """COMMIT one part: the listed senders' halves become visible, the part's other halves roll back."""
    try:
        client.end_transaction(part.transaction_id, "COMMIT", include_senders=list(part.senders),
                               producer_group=producer_group, participants=part.participants)
    except TransactionConflict as e:
        raise TransactionConflict(f"txmq sink: {what}: transaction {part.transaction_id} was rolled back before "
                                  f"its commit (orphan timeout or check-back?): {e}; the batch fails and is "
                                  "replayed") from e


def tell_committed(client: TransactionClient, messages: Sequence[TxmqCommitMessage], *, producer_group: str) -> None:
    """A replay found these attempts' transactions committed by an earlier run: tell the groups it may
    not have reached (idempotent)."""
    for tx, participants in sorted({(m.transaction_id, m.participants) for m in messages if m.already_committed}):
        if participants:
            client.end_transaction(tx, "COMMIT", producer_group=producer_group, participants=participants)


def commit_transaction(client: TransactionClient, messages: Sequence[TxmqCommitMessage | None], *, producer_group: str,
                       what: str, participants: tuple[str, ...] = ()) -> None:
    """End a write job's one transaction with COMMIT, visible: the halves of the listed (successful)
    attempts. With `participants`, it spans those broker groups (ClusterClient.end_transaction)."""
    msgs = [m for m in messages if m is not None]
    if any(m.already_committed for m in msgs):
        tell_committed(client, [m for m in msgs if m.already_committed], producer_group=producer_group)
        return  # a replay of a committed batch: nothing was sent
    parts = batch_parts(msgs, what)
    if parts:  # none: an empty batch, no transaction was started
        commit_part(client, BatchPart(parts[0].transaction_id, participants or parts[0].participants,
                                      parts[0].senders), producer_group=producer_group, what=what)


def rollback_transaction(client: TransactionClient, messages: Sequence[TxmqCommitMessage | None], *, producer_group: str,
                         participants: tuple[str, ...] = ()) -> None:
    for tx in {m.transaction_id for m in messages if m is not None and not m.already_committed}:
        try:
            client.end_transaction(tx, "ROLLBACK", producer_group=producer_group, participants=participants)
        except (UnknownTransaction, TransactionConflict) as e:
            log.warning("txmq sink: rollback of %s: %s", tx, e)


def rollback_parts(client: TransactionClient, messages: Sequence[TxmqCommitMessage | None], *,
                   producer_group: str, keep: frozenset[str] = frozenset()) -> None:
    """Roll back the parts the attempts wrote to or abandoned, each across its own groups, but those
    in `keep` (committed)."""
    parts = {(m.transaction_id, m.participants) for m in messages
             if m is not None and m.rows > 0 and not m.already_committed}  # no rows: no transaction started
    parts |= {part for m in messages if m is not None for part in m.abandoned}
    for tx, participants in sorted(p for p in parts if p[0] not in keep):
        rollback_transaction(client, [TxmqCommitMessage(tx, "", 0)], producer_group=producer_group,
                             participants=participants)


class BatchDecisions:
    """A streaming sink's batch decision over broker groups, recorded in the query's checkpoint
    (`txmq-sink/decision.json`: the batch id, and each part's transaction, groups and senders)
    before its first part commits: that file is the batch's COMMIT, so a run that dies between
    parts, or after them but before Spark logged the batch, leaves the rest to the replay, which
    commits exactly the recorded senders. Only the latest batch is ever replayed, so one file
    holds one batch, replaced by the next."""

    NAME = "txmq-sink/decision.json"

    def __init__(self, checkpoint: CheckpointDir) -> None:
        self.checkpoint = checkpoint

    def record(self, batch_id: int, parts: Sequence[BatchPart]) -> None:
        body = [{"transaction_id": p.transaction_id, "participants": list(p.participants), "senders": list(p.senders)}
                for p in parts]
        self.checkpoint.write(self.NAME, json.dumps({"batch": int(batch_id), "parts": body}).encode())

    def read(self, batch_id: int) -> list[BatchPart] | None:
        """The parts `batch_id` was decided in, None when it was not decided."""
        data = self.checkpoint.read(self.NAME)
        decision = json.loads(data) if data is not None else None
        if decision is None or decision["batch"] != int(batch_id):
            return None
        return [BatchPart(p["transaction_id"], tuple(p["participants"]), tuple(p["senders"]))
                for p in decision["parts"]]


class _WriterBase:
    def __init__(self, options: dict, schema: StructType) -> None:
        self.options = SinkOptions.parse(options)
        validate_sink_schema(schema, default_topic=self.options.topic)
        # fixed on the driver when the query starts, so every task and commit names the same groups
        self.participants = batch_participants(self._client(), self.options.topic)

    def _client(self) -> ConnectorClient:
        return executor_client(self.options.connection)


def batch_participants(client: ConnectorClient, topic: str | None) -> tuple[str, ...]:
    """The broker groups a batch's transaction spans: those taking writes of the sink's topic now
    (where its queues moved to, not where they were created), when there are several (each task
    writes to one of them); one group: the transaction goes there; () for a single broker, or rows
    that name their topics (the transaction's group is then the one its id hashes to)."""
    if topic is None:
        return ()
    try:
        groups = tuple(sorted({q.current.group for q in client.queues(topic)}))
    except (KeyError, TopicNotFound):
        return ()  # created later, or by auto-creation: one group
    return groups if len(groups) > 1 or groups != ("",) else ()  # one named group: its transaction goes there


class _Replayable:
    """A task's input batches, kept as they are read (up to `keep_bytes`), so that rows a move refused
    can be sent again; past the bound they are not kept, and such a task fails as Spark's would."""

    def __init__(self, batches: Iterator[pa.RecordBatch], keep_bytes: int) -> None:
        self._batches = batches
        self._read: list[pa.RecordBatch] | None = []
        self._left = keep_bytes
        self._started = False

    @property
    def replayable(self) -> bool:
        return self._read is not None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        assert self.replayable or not self._started, "rows not kept cannot be read again"
        self._started = True
        yield from list(self._read or ())
        for batch in self._batches:
            if self._read is not None:
                self._left -= batch.nbytes
                if self._left < 0:
                    self._read = None
                else:
                    self._read.append(batch)
            yield batch


class TxmqStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Streaming sink: one transaction per micro-batch, committed by the driver."""

    def __init__(self, options: dict, schema: StructType) -> None:
        super().__init__(options, schema)
        if self.options.sink_id is None:
            raise InvalidOption("txmq sink: streaming writes need a stable sink id: set the query's "
                                "'checkpointLocation' option or the 'sinkId' option")
        self.sink_id = self.options.sink_id
        self.producer_group = self.options.producer_group or f"spark-sink-{self.sink_id}"
        self.nonce = txn.run_nonce()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TxmqCommitMessage:
        partition, attempt, batch_id = _task_identity()
        if batch_id is None:
            raise RuntimeError("txmq sink: Spark did not tell the task its batch id (streaming.sql.batchId)")
        client = self._client()
        rows_in: _Replayable | None = None
        abandoned: list[tuple[str, tuple[str, ...]]] = []
        for resend in range(MOVED_RESENDS + 1):
            sender = txn.sender_name(partition, attempt, self.nonce) + (f".m{resend}" if resend else "")
            # the groups taking the topic's writes when this task runs: a move or a drain since the
            # query started changes them (the routes are read afresh, not the executor client's cache)
            if self.options.topic is not None:
                client.routes([self.options.topic], refresh=True)
            participants = batch_participants(client, self.options.topic)
            tx, _gen, state = txn.probe(client, self.sink_id, int(batch_id), participants=participants)
            if state == txn.COMMITTED:
                return TxmqCommitMessage(tx, sender, 0, already_committed=True, participants=participants,
                                         abandoned=tuple(abandoned))
            if rows_in is None:  # a single broker's queues do not move: nothing to keep
                rows_in = _Replayable(iterator, MOVED_RESEND_KEEP_BYTES if participants else 0)
            pause_point("sink.before_halves", partition)
            crash_point("sink.before_halves", batch_id)
            try:
                rows, done = send_halves(client, iter(rows_in), transaction_id=tx, sender=sender,
                                         topic=self.options.topic, producer_group=self.producer_group,
                                         max_batch_rows=self.options.max_batch_rows, participants=participants)
            except QueueSealed:
                if resend == MOVED_RESENDS or not participants or not rows_in.replayable:
                    raise
                # a move sealed the group's last queue of the topic: this attempt's rows go, whole and
                # under a new sender name, to the part of the groups taking the topic's writes now
                log.info("txmq sink: batch %s partition %s met a queue moving; sending its rows again",
                         batch_id, partition)
                abandoned.append((tx, participants))
                time.sleep(min(0.2 * (resend + 1), 1.0))  # a move's seal lasts well under a second
                continue
            return TxmqCommitMessage(tx, sender, rows, already_committed=done, participants=participants,
                                     abandoned=tuple(abandoned))
        raise AssertionError("unreachable: the last resend raises")

    def commit(self, messages: list, batchId: int) -> None:
        crash_point("sink.after_halves", batchId)
        what = f"batch {batchId} of sink {self.sink_id}"
        client = self._client()
        msgs = [m for m in messages if m is not None]
        decisions = self._decisions(msgs)
        decided = decisions.read(batchId) if decisions is not None else None
        if decided is not None and self._finish(client, decided, msgs, what):
            committed = frozenset(p.transaction_id for p in decided)
        elif any(m.already_committed for m in msgs):
            # committed whole by an earlier run; halves this run wrote with another list (a move
            # while the query was down) are its own: rolled back below
            tell_committed(client, msgs, producer_group=self.producer_group)
            committed = frozenset(m.transaction_id for m in msgs if m.already_committed)
        else:
            parts = batch_parts(msgs, what)
            if decisions is not None and parts:
                decisions.record(batchId, parts)
                crash_point("sink.after_decision", batchId)
            elif len(parts) > 1:
                self.abort(messages, batchId)
                raise TransactionConflict(f"txmq sink: {what}: its tasks wrote while the topic's groups changed, "
                                          "and without a 'checkpointLocation' on this host's file system (or a "
                                          "mount) the sink cannot record a decision over its parts; rolled back, "
                                          "replayed on restart")
            for i, part in enumerate(parts):
                if i:
                    crash_point("sink.between_parts", batchId)
                commit_part(client, part, producer_group=self.producer_group, what=what)
            committed = frozenset(p.transaction_id for p in parts)
        # what no decided part covers: parts left after a move sealed their queue, or written by a replay
        rollback_parts(client, msgs, producer_group=self.producer_group, keep=committed)
        crash_point("sink.after_broker_commit", batchId)

    def _finish(self, client: ConnectorClient, decided: list[BatchPart], msgs: list[TxmqCommitMessage],
                what: str) -> bool:
        """Commit the parts an earlier run decided, with the senders it recorded (a COMMIT of a part that
        committed then is a no-op); what this run wrote elsewhere is rolled back. False when the decision
        is void: a part of it was rolled back (a check-back, or its coordinator's discard) before any
        committed; its other parts this run does not write to are then rolled back."""
        states = {p.transaction_id: self._state(client, p) for p in decided}
        if txn.ROLLED_BACK in states.values():
            if txn.COMMITTED in states.values():
                raise TransactionConflict(
                    f"txmq sink: {what} was decided in parts {sorted(states)} and an earlier run committed part "
                    f"of it, but {[tx for tx, st in states.items() if st == txn.ROLLED_BACK]} rolled back meanwhile "
                    "(its halves were discarded while no driver ran): the rows of that part are lost")
            written = {m.transaction_id for m in msgs}
            for part in decided:
                if states[part.transaction_id] != txn.ROLLED_BACK and part.transaction_id not in written:
                    rollback_transaction(client, [TxmqCommitMessage(part.transaction_id, "", 0)],
                                         producer_group=self.producer_group, participants=part.participants)
            log.warning("txmq sink: %s: its earlier decision is void (a part rolled back before any committed)",
                        what)
            return False
        log.info("txmq sink: %s was decided by an earlier run; finishing its %s part(s)", what, len(decided))
        for part in decided:
            if states[part.transaction_id] == txn.DISCARDED:
                client.resume_transaction(part.transaction_id)  # its halves wait in the discard topic
            commit_part(client, part, producer_group=self.producer_group, what=what)
        return True

    @staticmethod
    def _state(client: ConnectorClient, part: BatchPart) -> str | None:
        try:
            return txn.state_name(client.get_transaction(part.transaction_id, participants=part.participants).state)
        except UnknownTransaction:
            return None

    def _decisions(self, msgs: Sequence[TxmqCommitMessage]) -> BatchDecisions | None:
        """Where the batch's decision is recorded: None for a single broker or rows naming their topics
        (one transaction, decided by its own COMMIT), and for a sink without a checkpoint location option
        on this host's file system: the commit runs in a Python worker without the session's
        `spark.hadoop.*` settings, so it cannot reach an s3a:// or hdfs:// checkpoint."""
        location = self.options.checkpoint_location
        if location is None or not is_local(location) or not any(m.participants for m in msgs):
            return None
        return BatchDecisions(CheckpointDir(location, helper="sink"))

    def abort(self, messages: list, batchId: int) -> None:
        msgs = [m for m in messages if m is not None]
        decisions = self._decisions(msgs)
        if decisions is not None and decisions.read(batchId) is not None:
            # decided COMMIT, maybe partly applied (the commit failed between parts): the replay finishes it
            log.warning("txmq sink: batch %s of sink %s is decided: its abort rolls nothing back", batchId,
                        self.sink_id)
            return
        rollback_parts(self._client(), msgs, producer_group=self.producer_group)


class TxmqBatchWriter(_WriterBase, DataSourceArrowWriter):
    """`df.write.format("txmq")`: one transaction for the whole write job."""

    def __init__(self, options: dict, schema: StructType) -> None:
        super().__init__(options, schema)
        self.producer_group = self.options.producer_group or "spark-write"
        self.transaction_id = f"spark-write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TxmqCommitMessage:
        partition, attempt, _ = _task_identity()
        sender = txn.sender_name(partition, attempt, "w")
        rows, _ = send_halves(self._client(), iterator, transaction_id=self.transaction_id, sender=sender,
                              topic=self.options.topic, producer_group=self.producer_group,
                              max_batch_rows=self.options.max_batch_rows, participants=self.participants)
        return TxmqCommitMessage(self.transaction_id, sender, rows)

    def commit(self, messages: list) -> None:
        commit_transaction(self._client(), messages, producer_group=self.producer_group,
                           what=f"write job {self.transaction_id}", participants=self.participants)

    def abort(self, messages: list) -> None:
        rollback_transaction(self._client(), messages, producer_group=self.producer_group,
                             participants=self.participants)


def committed_batches(checkpoint: CheckpointDir) -> set[int]:
    """Batch ids in the query's commit log (`<checkpoint>/commits/<id>`): Spark finished them."""
    return {int(name) for name in checkpoint.names("commits") if name.isdigit()}


class SinkCheckback:
    """Answers the broker's check-backs for a streaming sink from the query's checkpoint.

    Run it in the driver next to the query (a context manager). A pending
    transaction of a batch that Spark's commit log already holds is a leftover of
    a dead run (the committed generation has committed): ROLLBACK. A pending
    transaction of a batch Spark has not finished: IN_PROGRESS, because the running
    query will (re)run the batch and commit it with its own senders; the broker asks
    again later without counting these checks towards its --max-checks, so a
    micro-batch may run longer than --max-checks x --check-interval (up to the
    broker's --in-progress-max-age, 1 h by default). Once this helper is gone (the
    driver died) nobody answers, and the transaction is checked as any other.
    """

    def __init__(self, checkpoint_location: str, *, broker: str, topics: Sequence[str],
                 sink_id: str | None = None, producer_group: str | None = None,
                 checkpoint_filesystem: pafs.FileSystem | None = None, **conn_options: str) -> None:
        opts = {"broker": broker, "checkpointLocation": checkpoint_location, **conn_options}
        if sink_id:
            opts["sinkId"] = sink_id
        self.options = SinkOptions.parse(opts)
        self.checkpoint = CheckpointDir(checkpoint_location, helper="SinkCheckback", filesystem=checkpoint_filesystem)
        self.sink_id = self.options.sink_id
        self.producer_group = producer_group or f"spark-sink-{self.sink_id}"
        self.topics = list(topics)
        self._client: ConnectorClient | None = None
        self._session: CheckbackHandle | None = None

    def answer(self, transaction_id: str) -> str:
        parsed = txn.parse_transaction_id(transaction_id)
        if parsed is None or parsed[0] != self.sink_id:
            return "UNKNOWN"
        return "ROLLBACK" if parsed[1] in committed_batches(self.checkpoint) else "IN_PROGRESS"

    def _handle(self, request: CheckRequest) -> str:
        return self.answer(request.transaction_id)

    def __enter__(self) -> "SinkCheckback":
        self._client = self.options.connection.client()
        self._session = self._client.checkback_session(self.producer_group, self.topics, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._session is not None:
            self._session.close()
        if self._client is not None:
            self._client.close()
