"""Transaction ids of sink batches, the generation probe and the sink's check-back answers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from txmq.broker.errors import QueueSealed, TransactionConflict, UnknownTransaction
from txmq.spark import sink
from txmq.spark import transactions as txn
from txmq.spark.checkpoint_fs import CheckpointDir, is_local
from txmq.spark.options import SinkOptions
from txmq.spark.sink import (
    BatchDecisions,
    SinkCheckback,
    TxmqCommitMessage,
    TxmqStreamWriter,
    batch_parts,
    commit_transaction,
)


@given(st.from_regex(r"[A-Za-z0-9_.\-]{1,40}", fullmatch=True), st.integers(0, 10**12), st.integers(0, 99))
def test_transaction_id_round_trips(sink, batch, gen):
    assert txn.parse_transaction_id(txn.transaction_id(sink, batch, gen)) == (sink, batch, gen)


def test_foreign_transaction_ids_are_not_parsed():
    assert txn.parse_transaction_id("some-producer-tx") is None


@dataclass
class Info:
    state: str


class Transactions:
    def __init__(self, states: dict[str, str]) -> None:
        self.states = states
        self.ended: list[tuple] = []

    def get_transaction(self, tx, *, participants=()):
        if tx not in self.states:
            raise UnknownTransaction(tx)
        return Info(self.states[tx])

    def end_transaction(self, tx, resolution, include_senders=None, producer_group=None, participants=()):
        self.ended.append((tx, resolution, include_senders))


def test_probe_skips_generations_that_can_no_longer_commit():
    client = Transactions({"s-b7-g0": "ROLLED_BACK", "s-b7-g1": "DISCARDED", "s-b7-g2": "PENDING"})
    assert txn.probe(client, "s", 7) == ("s-b7-g2", 2, "PENDING")


def test_probe_stops_at_a_committed_generation():
    assert txn.probe(Transactions({"s-b1-g0": "COMMITTED"}), "s", 1) == ("s-b1-g0", 0, "COMMITTED")


def test_probe_of_a_new_batch_starts_generation_zero():
    assert txn.probe(Transactions({}), "s", 3) == ("s-b3-g0", 0, None)


def test_commit_names_only_the_senders_that_sent_rows():
    client = Transactions({})
    commit_transaction(client, [TxmqCommitMessage("tx", "p0.a1.n", 5), TxmqCommitMessage("tx", "p1.a0.n", 0), None],
                       producer_group="g", what="batch")
    assert client.ended == [("tx", "COMMIT", ["p0.a1.n"])]


def test_commit_of_a_replayed_committed_batch_does_nothing():
    client = Transactions({})
    commit_transaction(client, [TxmqCommitMessage("tx", "p0.a0.n", 0, already_committed=True)],
                       producer_group="g", what="batch")
    assert client.ended == []


def test_commit_refuses_a_batch_split_over_two_transactions():
    with pytest.raises(RuntimeError, match="several transactions"):
        commit_transaction(Transactions({}), [TxmqCommitMessage("a", "s1", 1), TxmqCommitMessage("b", "s2", 1)],
                           producer_group="g", what="batch")


def test_sink_checkback_rolls_back_leftovers_of_finished_batches_and_says_in_progress_of_the_others(tmp_path):
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "4").write_text("v1")
    checker = SinkCheckback(str(tmp_path), broker="h:1", topics=["t"])
    assert checker.answer(txn.transaction_id(checker.sink_id, 4, 0)) == "ROLLBACK"
    assert checker.answer(txn.transaction_id(checker.sink_id, 5, 0)) == "IN_PROGRESS"
    assert checker.answer("other-sink-b4-g0") == "UNKNOWN"


@given(st.from_regex(r"[A-Za-z0-9_.\-]{1,40}", fullmatch=True), st.integers(0, 10**12), st.integers(0, 99),
       st.lists(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=4))
def test_a_parts_transaction_id_round_trips_and_differs_per_participant_list(sink, batch, gen, groups):
    tx = txn.transaction_id(sink, batch, gen, tuple(groups))
    assert txn.parse_transaction_id(tx) == (sink, batch, gen)
    assert tx != txn.transaction_id(sink, batch, gen, (*groups, "another"))


class Cluster(Transactions):
    """A ClusterClient stand-in for the driver's commit: states follow the ends it is told."""

    def __init__(self, states: dict[str, str], decision: Path) -> None:
        super().__init__(states)
        self.decision = decision
        self.decided_first: list[bool] = []
        self.resumed: list[str] = []

    def end_transaction(self, tx, resolution, include_senders=None, producer_group=None, participants=()):
        self.decided_first.append(self.decision.exists())
        self.ended.append((tx, resolution, include_senders, tuple(participants)))
        self.states[tx] = "COMMITTED" if resolution == "COMMIT" else "ROLLED_BACK"

    def resume_transaction(self, tx):
        self.resumed.append(tx)


def stream_writer(checkpoint: Path, client) -> TxmqStreamWriter:
    """A streaming sink's writer as the driver's commit worker rebuilds it, on `client`."""
    writer = TxmqStreamWriter.__new__(TxmqStreamWriter)
    writer.options = SinkOptions.parse({"broker": "h:1", "topic": "t", "checkpointLocation": str(checkpoint)})
    writer.sink_id, writer.producer_group, writer.nonce = writer.options.sink_id, "pg", "n"
    writer._client = lambda: client
    return writer


AB, ABC = ("a", "b"), ("a", "b", "c")


def part_message(writer, sender: str, rows: int, groups, **kw) -> TxmqCommitMessage:
    return TxmqCommitMessage(txn.transaction_id(writer.sink_id, 3, 0, groups), sender, rows, participants=groups, **kw)


def test_a_batch_whose_tasks_read_the_groups_before_and_after_a_move_commits_both_parts_after_recording_its_decision(
        tmp_path):
    client = Cluster({}, tmp_path / "cp" / "txmq-sink" / "decision.json")
    writer = stream_writer(tmp_path / "cp", client)
    msgs = [part_message(writer, "p0", 5, AB), part_message(writer, "p1", 4, ABC), part_message(writer, "p2", 3, ABC)]
    writer.commit(msgs, 3)
    assert sorted(client.ended) == [(msgs[0].transaction_id, "COMMIT", ["p0"], AB),
                                    (msgs[1].transaction_id, "COMMIT", ["p1", "p2"], ABC)]
    assert client.decided_first == [True, True], "a part committed before the batch's decision was recorded"


def test_the_replay_of_a_batch_decided_in_parts_commits_the_part_its_dead_run_left_with_the_recorded_senders(tmp_path):
    """The driver died between the parts: the replay's commit finishes the batch with the dead run's
    senders (the replay's own halves in that part roll back with the COMMIT, those elsewhere are rolled back)."""
    checkpoint = tmp_path / "cp"
    client = Cluster({}, checkpoint / "txmq-sink" / "decision.json")
    writer = stream_writer(checkpoint, client)
    dead = [part_message(writer, "p0.dead", 5, AB), part_message(writer, "p1.dead", 4, ABC)]
    BatchDecisions(CheckpointDir(str(checkpoint), helper="test")).record(3, batch_parts(dead, "batch"))
    client.states[dead[0].transaction_id] = "COMMITTED"  # the first part committed, then the driver died
    client.states[dead[1].transaction_id] = "PENDING"
    replay = [part_message(writer, "p0.new", 0, AB, already_committed=True), part_message(writer, "p1.new", 4, ABC),
              part_message(writer, "p2.new", 3, ("b", "c"))]
    writer.commit(replay, 3)
    assert (dead[1].transaction_id, "COMMIT", ["p1.dead"], ABC) in client.ended
    assert (replay[2].transaction_id, "ROLLBACK", None, ("b", "c")) in client.ended
    assert not [e for e in client.ended if e[1] == "COMMIT" and e[2] and any(".new" in s for s in e[2])]


def test_the_abort_of_a_decided_batch_rolls_nothing_back(tmp_path):
    checkpoint = tmp_path / "cp"
    client = Cluster({}, checkpoint / "txmq-sink" / "decision.json")
    writer = stream_writer(checkpoint, client)
    msgs = [part_message(writer, "p0", 5, AB), part_message(writer, "p1", 4, ABC)]
    BatchDecisions(CheckpointDir(str(checkpoint), helper="test")).record(3, batch_parts(msgs, "batch"))
    writer.abort(msgs, 3)
    assert client.ended == []


def test_a_part_a_task_left_when_a_move_sealed_its_queue_is_rolled_back_and_its_rows_commit_where_it_sent_them(
        tmp_path):
    client = Cluster({}, tmp_path / "cp" / "txmq-sink" / "decision.json")
    writer = stream_writer(tmp_path / "cp", client)
    left = (txn.transaction_id(writer.sink_id, 3, 0, AB), AB)
    msgs = [part_message(writer, "p0.m1", 5, ("b",), abandoned=(left,))]
    writer.commit(msgs, 3)
    assert client.ended == [(msgs[0].transaction_id, "COMMIT", ["p0.m1"], ("b",)),
                            (left[0], "ROLLBACK", None, AB)]


class MovingTopic(Cluster):
    """An executor's client whose topic's last queue on group a is sealed by a move to c while the
    task's first send streams."""

    def __init__(self, decision: Path) -> None:
        super().__init__({}, decision)
        self.groups = ["a", "b"]
        self.sends: list[tuple[str, str, tuple, int]] = []

    def routes(self, topics=(), *, refresh=False):
        return None

    def queues(self, topic):
        return tuple(SimpleNamespace(current=SimpleNamespace(group=g)) for g in self.groups)

    def prepare_stream(self, tx, batches, *, topic, producer_group, sender, participants=()):
        rows = 0
        for batch in batches:
            if not self.sends:
                self.groups = ["b", "c"]
                self.sends.append((tx, sender, tuple(participants), 0))
                raise QueueSealed("queue t:0 was sealed by a move to another group")
            rows += batch.num_rows
        self.sends.append((tx, sender, tuple(participants), rows))


def test_a_task_whose_queue_a_move_sealed_sends_all_its_rows_again_to_the_groups_taking_the_topics_writes_now(
        tmp_path, monkeypatch):
    client = MovingTopic(tmp_path / "decision.json")
    writer = stream_writer(tmp_path / "cp", client)
    monkeypatch.setattr(sink, "_task_identity", lambda: (0, 0, "3"))
    monkeypatch.setattr(sink.time, "sleep", lambda s: None)
    rows = [pa.record_batch({"body": [b"x"] * 3}), pa.record_batch({"body": [b"y"] * 2})]
    message = writer.write(iter(rows))
    assert (message.participants, message.rows, message.sender) == (("b", "c"), 5, "p0.a0.n.m1")
    assert message.transaction_id == txn.transaction_id(writer.sink_id, 3, 0, ("b", "c"))
    assert message.abandoned == ((txn.transaction_id(writer.sink_id, 3, 0, AB), AB),)


def test_a_batch_in_two_parts_with_its_checkpoint_on_s3_is_rolled_back_and_fails_as_without_a_decision(tmp_path):
    """The commit's Python worker has no `spark.hadoop.fs.s3a.*`: it records no decision there, and
    a batch its tasks wrote with two group lists fails (the restart replays it) instead."""
    client = Cluster({}, tmp_path / "unused")
    writer = stream_writer(tmp_path / "cp", client)
    writer.options = SinkOptions.parse({"broker": "h:1", "topic": "t", "checkpointLocation": "s3a://bucket/cp"})
    msgs = [part_message(writer, "p0", 5, AB), part_message(writer, "p1", 4, ABC)]
    with pytest.raises(TransactionConflict, match="checkpointLocation"):
        writer.commit(msgs, 3)
    assert sorted(e[1] for e in client.ended) == ["ROLLBACK", "ROLLBACK"]


@pytest.mark.parametrize("location, local", [("/tmp/cp", True), ("cp", True), ("file:///tmp/cp", True),
                                             ("s3a://bucket/cp", False), ("hdfs://nn:8020/cp", False)])
def test_a_checkpoint_location_is_local_only_on_this_hosts_file_system(location, local):
    assert is_local(location) is local
