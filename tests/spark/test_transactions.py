"""Transaction ids of sink batches, the generation probe and the sink's check-back answers."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txmq.broker.errors import UnknownTransaction
from txmq.spark import transactions as txn
from txmq.spark.sink import SinkCheckback, TxmqCommitMessage, commit_transaction


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
