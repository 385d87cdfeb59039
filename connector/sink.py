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

Where the code runs: the writer is built on the driver (once per micro-batch),
pickled to executors for `write()`, and rebuilt in a short-lived worker for
`commit`/`abort`. So it holds only options, and every process opens its own client.
"""

from __future__ import annotations

import logging
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
    TopicNotFound,
    TransactionAlreadyEnded,
    TransactionConflict,
    UnknownTransaction,
)

from txmq.broker.client.types import CheckRequest

from . import transactions as txn
from .client_seam import CheckbackHandle, ConnectorClient, TransactionClient
from .checkpoint_fs import CheckpointDir
from .faults import crash_point
from .options import InvalidOption, SinkOptions
from .schema import sink_arrow_batch, validate_sink_schema
from .source import executor_client

log = logging.getLogger("txmq.spark.sink")

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark's MicroBatchExecution on every task


@dataclass
class TxmqCommitMessage(WriterCommitMessage):
    """What one task attempt reports to the driver: where its halves went."""

    transaction_id: str
    sender: str
    rows: int
    already_committed: bool = False
    participants: tuple[str, ...] = ()  # the broker groups the attempt's halves named (batch_participants)


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


def commit_transaction(client: TransactionClient, messages: Sequence[TxmqCommitMessage | None], *, producer_group: str,
                       what: str, participants: tuple[str, ...] = ()) -> None:
    """End the batch's transaction with COMMIT, visible: the halves of the listed (successful) attempts.
    With `participants`, the transaction spans those broker groups (ClusterClient.end_transaction)."""
    msgs = [m for m in messages if m is not None]
    if any(m.already_committed for m in msgs):
        if participants:  # decided in an earlier run: tell the groups it may not have reached (idempotent)
            for tx in {m.transaction_id for m in msgs}:
                client.end_transaction(tx, "COMMIT", producer_group=producer_group, participants=participants)
        return  # a replay of a committed batch: nothing was sent
    sending = [m for m in msgs if m.rows > 0]
    if not sending:
        return  # an empty batch: no transaction was started
    txs = {m.transaction_id for m in sending}
    if len(txs) != 1:
        raise RuntimeError(f"txmq sink: {what} wrote to several transactions {sorted(txs)}; failing the batch "
                           "(a transaction was ended while the batch ran); it will be replayed")
    tx = txs.pop()
    try:
        client.end_transaction(tx, "COMMIT", include_senders=sorted({m.sender for m in sending}),
                               producer_group=producer_group, participants=participants)
    except TransactionConflict as e:
        raise TransactionConflict(f"txmq sink: {what}: transaction {tx} was rolled back before its commit "
                                  f"(orphan timeout or check-back?): {e}; the batch fails and is replayed") from e


def rollback_transaction(client: TransactionClient, messages: Sequence[TxmqCommitMessage | None], *, producer_group: str,
                         participants: tuple[str, ...] = ()) -> None:
    for tx in {m.transaction_id for m in messages if m is not None and not m.already_committed}:
        try:
            client.end_transaction(tx, "ROLLBACK", producer_group=producer_group, participants=participants)
        except (UnknownTransaction, TransactionConflict) as e:
            log.warning("txmq sink: rollback of %s: %s", tx, e)


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
        sender = txn.sender_name(partition, attempt, self.nonce)
        # the groups taking the topic's writes when this batch runs: a move or a drain since the
        # query started changes them (the routes are read afresh, not the executor client's cache)
        if self.options.topic is not None:
            client.routes([self.options.topic], refresh=True)
        participants = batch_participants(client, self.options.topic)
        tx, _gen, state = txn.probe(client, self.sink_id, int(batch_id), participants=participants)
        if state == txn.COMMITTED:
            return TxmqCommitMessage(tx, sender, 0, already_committed=True, participants=participants)
        crash_point("sink.before_halves", batch_id)
        rows, done = send_halves(client, iterator, transaction_id=tx, sender=sender, topic=self.options.topic,
                                 producer_group=self.producer_group, max_batch_rows=self.options.max_batch_rows,
                                 participants=participants)
        return TxmqCommitMessage(tx, sender, rows, already_committed=done, participants=participants)

    def commit(self, messages: list, batchId: int) -> None:
        crash_point("sink.after_halves", batchId)
        what = f"batch {batchId} of sink {self.sink_id}"
        lists = _participant_lists(messages)
        if len(lists) > 1:
            # a move between the batch's tasks: their halves name different coordinators, so no
            # single decision covers them; roll all back and fail the batch (a restart replays it)
            self.abort(messages, batchId)
            raise TransactionConflict(f"txmq sink: {what}: its tasks wrote while the topic's groups changed "
                                      f"({' / '.join(','.join(p) or '-' for p in lists)}); rolled back, replayed "
                                      "when the query restarts")
        commit_transaction(self._client(), messages, producer_group=self.producer_group, what=what,
                           participants=lists[0] if lists else ())
        crash_point("sink.after_broker_commit", batchId)

    def abort(self, messages: list, batchId: int) -> None:
        for participants in _participant_lists(messages) or [()]:
            rollback_transaction(self._client(), [m for m in messages if m is not None and m.participants == participants],
                                 producer_group=self.producer_group, participants=participants)


def _participant_lists(messages: Sequence[TxmqCommitMessage | None]) -> list[tuple[str, ...]]:
    """The distinct participant lists the batch's task attempts wrote with (one unless the
    topic's groups changed while the batch ran)."""
    return sorted({m.participants for m in messages if m is not None})


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
