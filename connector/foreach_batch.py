"""A foreachBatch helper: RocketMQ's TransactionListener for a Spark micro-batch.

    helper = TransactionalBatch(broker="127.0.0.1:8081", topic="orders-out",
                                checkpoint_location=ckpt,
                                local_transaction=write_rows_to_db,   # (batch_df, batch_id) -> None
                                check=db_has_batch)                    # (batch_id) -> bool
    query = df.writeStream.foreachBatch(helper).option("checkpointLocation", ckpt).start()

For every micro-batch: the executors send the batch's messages as halves of
one transaction; the driver writes a manifest (which task attempts' halves are
the batch's) into the checkpoint directory; runs the user's local transaction;
COMMITs (only those halves) on success, ROLLs BACK if it raised. While the
query runs, a check-back session answers the broker about transactions left
pending by a dead run with the user's `check(batch_id)`.

Why a manifest: after a crash between the local transaction and the COMMIT,
the restarted run (or a check-back) must commit exactly the halves of the
successful attempts, and only the manifest still knows which they were.

`check(batch_id)` must say whether the local transaction of that batch
committed, e.g. by writing the batch id in the same database transaction.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.fs as pafs

from txmq.broker.errors import QueueSealed, TransactionConflict, UnknownTransaction

from txmq.broker.client.types import CheckRequest

from . import transactions as txn
from .client_seam import CheckbackHandle, ConnectorClient
from .checkpoint_fs import CheckpointDir
from .faults import crash_point
from .options import SinkOptions
from .schema import validate_sink_schema
from .sink import batch_participants, send_halves
from .source import executor_client

log = logging.getLogger("txmq.spark.foreach_batch")

_SENT_SCHEMA = "sender string, rows long, committed boolean, moved boolean"
# how often a batch whose tasks met a queue sealed by a move is sent again on the groups it moved to
MOVED_BATCH_RETRIES = 20


class TransactionalBatch:
    """Callable for `DataStreamWriter.foreachBatch`: halves → local transaction → commit/rollback."""

    def __init__(self, *, broker: str, checkpoint_location: str,
                 local_transaction: Callable[[object, int], None], check: Callable[[int], bool],
                 topic: str | None = None, producer_group: str | None = None, sink_id: str | None = None,
                 checkback: bool = True, checkpoint_filesystem: pafs.FileSystem | None = None,
                 **conn_options: str) -> None:
        opts = {"broker": broker, "checkpointLocation": checkpoint_location, **conn_options}
        if topic:
            opts["topic"] = topic
        if sink_id:
            opts["sinkId"] = sink_id
        self.options = SinkOptions.parse(opts)
        self.sink_id = self.options.sink_id
        self.producer_group = producer_group or f"spark-fb-{self.sink_id}"
        self.local_transaction = local_transaction
        self.check = check
        self.checkpoint = CheckpointDir(checkpoint_location, helper="TransactionalBatch",
                                        filesystem=checkpoint_filesystem)
        self.nonce = txn.run_nonce()
        self._checkback_wanted = checkback
        self._client: ConnectorClient | None = None
        self._session: CheckbackHandle | None = None
        self._in_progress: int | None = None
        self._lock = threading.Lock()

    # --- driver client and check-back session -----------------------------------------

    @property
    def client(self) -> ConnectorClient:
        if self._client is None:
            self._client = self.options.connection.client()
        return self._client

    def _ensure_checkback(self) -> None:
        if self._session is None and self._checkback_wanted:
            topics = [self.options.topic] if self.options.topic else []
            self._session = self.client.checkback_session(self.producer_group, topics, self._on_check)

    def _on_check(self, request: CheckRequest) -> str:
        parsed = txn.parse_transaction_id(request.transaction_id)
        if parsed is None or parsed[0] != self.sink_id:
            return "UNKNOWN"
        _, batch_id, _ = parsed
        with self._lock:
            if batch_id == self._in_progress:
                return "IN_PROGRESS"  # this run is working on it and will end it: ask later, uncounted
        return "COMMIT" if self._commit_if_done(request.transaction_id, batch_id) else "ROLLBACK"

    def close(self) -> None:
        """Stop the check-back session and close the client (call after the query stops)."""
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "TransactionalBatch":
        self._ensure_checkback()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- manifest --------------------------------------------------------------------

    @staticmethod
    def _manifest_name(batch_id: int) -> str:
        return f"txmq-foreach-batch/{batch_id}.json"

    def _write_manifest(self, batch_id: int, tx: str, senders: list[str], participants: tuple[str, ...]) -> None:
        manifest = {"transaction_id": tx, "senders": senders, "participants": list(participants)}
        self.checkpoint.write(self._manifest_name(batch_id), json.dumps(manifest).encode())

    def _read_manifest(self, batch_id: int) -> dict | None:
        data = self.checkpoint.read(self._manifest_name(batch_id))
        try:
            return None if data is None else json.loads(data)
        except json.JSONDecodeError:
            return None

    def _commit_if_done(self, tx: str, batch_id: int) -> bool:
        """If the local transaction of `batch_id` committed, commit `tx`'s manifest halves. True if committed."""
        manifest = self._read_manifest(batch_id)
        if manifest is None or manifest["transaction_id"] != tx or not self.check(batch_id):
            return False
        participants = tuple(manifest.get("participants") or ())
        state = txn.state_name(self.client.get_transaction(tx, participants=participants).state)
        if state == txn.DISCARDED:
            self.client.resume_transaction(tx)
        self.client.end_transaction(tx, "COMMIT", include_senders=manifest["senders"],
                                    producer_group=self.producer_group, participants=participants)
        return True

    def _participants(self) -> tuple[str, ...]:
        """The broker groups this batch's transaction spans (sink.batch_participants), read afresh
        per batch as the sink's tasks do: a group added, or one drained, since the last batch changes
        them. Each manifest records them, so a later run settles the batch where it was written."""
        if self.options.topic is not None:
            self.client.routes([self.options.topic], refresh=True)
        return batch_participants(self.client, self.options.topic)

    # --- the batch -------------------------------------------------------------------

    def _recover(self, batch_id: int, participants: tuple[str, ...]) -> str | None:
        """Settle what a dead run left for this batch (its manifest names the groups it was written
        on; without one, the batch's groups now). Returns a fresh tx id, or None if the batch is done."""
        manifest = self._read_manifest(batch_id)
        gen = 0
        while True:
            tx = txn.transaction_id(self.sink_id, batch_id, gen)
            written = manifest is not None and manifest["transaction_id"] == tx and "participants" in manifest
            used = tuple(manifest["participants"]) if written else participants
            try:
                state = txn.state_name(self.client.get_transaction(tx, participants=used).state)
            except UnknownTransaction:
                return tx
            if state == txn.COMMITTED:
                return None
            if state in (txn.PENDING, txn.DISCARDED):
                if self._commit_if_done(tx, batch_id):
                    return None
                if state == txn.PENDING:
                    try:
                        self.client.end_transaction(tx, "ROLLBACK", producer_group=self.producer_group,
                                                    participants=used)
                    except TransactionConflict:
                        continue  # it just committed (a check-back): look again
            gen += 1

    def _send(self, batch_df, tx: str, participants: tuple[str, ...]) -> list[tuple[str, int, bool, bool]]:
        conn, topic, group, rows_per_rpc = (self.options.connection, self.options.topic, self.producer_group,
                                            self.options.max_batch_rows)
        nonce = self.nonce

        def send_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from pyspark import TaskContext

            tc = TaskContext.get()
            sender = txn.sender_name(tc.partitionId(), tc.attemptNumber(), nonce)
            try:
                rows, committed = send_halves(executor_client(conn), batches, transaction_id=tx, sender=sender,
                                              topic=topic, producer_group=group, max_batch_rows=rows_per_rpc,
                                              participants=participants)
            except QueueSealed:  # a move sealed the queue it wrote to: the driver sends the batch again
                rows, committed, moved = 0, False, True
            else:
                moved = False
            yield pa.RecordBatch.from_pylist([{"sender": sender, "rows": rows, "committed": committed,
                                               "moved": moved}])

        return [(r.sender, r.rows, r.committed, r.moved)
                for r in batch_df.mapInArrow(send_partition, _SENT_SCHEMA).collect()]

    def _send_batch(self, batch_df, batch_id: int) -> tuple[str, list[str], tuple[str, ...]] | None:
        """The batch's halves sent on the groups taking the topic's writes now: (transaction id,
        senders with rows, groups), or None if an earlier run committed it. A queue move during
        the send seals a queue a task wrote to; that generation is rolled back whole and the batch
        sent again on the groups the queues moved to (the sink's tasks send their own rows again instead)."""
        for attempt in range(1, MOVED_BATCH_RETRIES + 1):
            participants = self._participants()  # fixed for the attempt: every task and the commit name them
            tx = self._recover(batch_id, participants)
            if tx is None:
                return None
            sent = self._send(batch_df, tx, participants)
            if not any(moved for *_, moved in sent):
                return tx, sorted({s for s, rows, _, _ in sent if rows > 0}), participants
            log.info("txmq foreachBatch: batch %s met a queue moving (attempt %s); sending it again", batch_id, attempt)
            self.client.end_transaction(tx, "ROLLBACK", producer_group=self.producer_group, participants=participants)
            time.sleep(min(0.2 * attempt, 2.0))  # the move finishes within seconds
        raise QueueSealed(f"txmq foreachBatch: batch {batch_id} met a moving queue {MOVED_BATCH_RETRIES} times")

    def __call__(self, batch_df, batch_id: int) -> None:
        validate_sink_schema(batch_df.schema, default_topic=self.options.topic)
        self._ensure_checkback()
        with self._lock:
            self._in_progress = batch_id
        try:
            done = self._send_batch(batch_df, batch_id)
            if done is None:
                log.info("txmq foreachBatch: batch %s already committed by an earlier run", batch_id)
                return
            tx, senders, participants = done
            self._write_manifest(batch_id, tx, senders, participants)
            crash_point("fb.after_halves", batch_id)
            try:
                self.local_transaction(batch_df, batch_id)
            except BaseException:
                if senders:
                    self.client.end_transaction(tx, "ROLLBACK", producer_group=self.producer_group,
                                                participants=participants)
                raise
            crash_point("fb.after_local_transaction", batch_id)
            if senders:
                self.client.end_transaction(tx, "COMMIT", include_senders=senders,
                                            producer_group=self.producer_group, participants=participants)
            crash_point("fb.after_broker_commit", batch_id)
        finally:
            with self._lock:
                self._in_progress = None
