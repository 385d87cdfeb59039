"""A hypothesis state machine over the transaction engine.

Steps: prepare (given or generated id, several senders/topics/queues), commit
(optionally restricted to some senders), rollback, repeats and conflicts,
check-back rounds, admin discard and resume, and crash + recovery (a new
engine over the reopened store). After every step the invariants hold:
a message is visible iff its transaction committed (and its sender was
included), all of a commit or none of it, each committed message exactly once,
and the engine's states agree with the model.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from txmq.broker.errors import (
    IllegalOffset,
    TransactionAlreadyEnded,
    TransactionConflict,
    UnknownTransaction,
)
from txmq.broker.store.message import Message
from txmq.broker.transaction import CheckbackService, Resolution, TransactionConfig, TransactionEngine, TxState

from .conftest import FakeClock
from .memory_store import MemoryStore

TOPICS = ("a", "b")
QUEUES = (0, 1)
SENDERS = ("s1", "s2")
GIVEN_IDS = ("t0", "t1", "t2", "t3")


def open_memory_store(path: Path, previous):
    return previous if previous is not None else MemoryStore(path)


def open_real_store(path: Path, previous):
    from txmq.broker.store.config import StoreConfig
    from txmq.broker.store.message_store import MessageStore

    if previous is not None:
        previous.close()
    return MessageStore(StoreConfig(data_dir=path, flush_mode="async", commitlog_segment_bytes=64 << 10,
                                    consume_queue_entries_per_file=64))


def visible(store, topic: str, queue_id: int) -> list[bytes]:
    try:
        return [m.body for m in store.read_queue(topic, queue_id, 0, 100_000).messages]
    except IllegalOffset:
        return []


class Always:
    def request_check(self, tx, half) -> bool:
        return True


class TransactionMachine(RuleBasedStateMachine):
    open_store = staticmethod(open_memory_store)
    generated = Bundle("generated")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="txsm-"))
        self.clock = FakeClock()
        self.config = TransactionConfig(transaction_timeout_s=6, check_interval_s=30, max_checks=1)
        self.store = self.open_store(self.dir, None)
        self.engine = TransactionEngine(self.store, self.config, clock=self.clock)
        self.state: dict[str, TxState] = {}
        self.halves: dict[str, list[tuple[str, int, bytes, str]]] = {}
        self.expected: dict[tuple[str, int], list[bytes]] = {}
        self.serial = 0

    def teardown(self) -> None:
        close = getattr(self.store, "close", None)
        if close:
            close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- steps ----------------------------------------------------------------

    def _messages(self, dests) -> list[Message]:
        out = []
        for topic, qid in dests:
            self.serial += 1
            out.append(Message(topic=topic, body=f"m{self.serial}".encode(), queue_id=qid))
        return out

    def _prepare(self, tx_id: str | None, dests, sender: str) -> str | None:
        messages = self._messages(dests)
        prior = self.state.get(tx_id) if tx_id else None
        if prior is not None and prior is not TxState.PENDING:
            with pytest.raises(TransactionAlreadyEnded) as refused:
                self.engine.prepare(messages, transaction_id=tx_id, sender=sender)
            assert refused.value.state == prior.value
            return None
        result = self.engine.prepare(messages, transaction_id=tx_id, sender=sender)
        tx_id = result.transaction_id
        self.state[tx_id] = TxState.PENDING
        self.halves.setdefault(tx_id, []).extend((m.topic, m.queue_id, m.body, sender) for m in messages)
        return tx_id

    dests = st.lists(st.tuples(st.sampled_from(TOPICS), st.sampled_from(QUEUES)), min_size=1, max_size=3)

    @rule(tx_id=st.sampled_from(GIVEN_IDS), dests=dests, sender=st.sampled_from(SENDERS))
    def prepare_given_id(self, tx_id, dests, sender):
        self._prepare(tx_id, dests, sender)

    @rule(target=generated, dests=dests, sender=st.sampled_from(SENDERS))
    def prepare_generated_id(self, dests, sender):
        return self._prepare(None, dests, sender)

    tx_ids = st.one_of(st.sampled_from(GIVEN_IDS), generated)

    @rule(tx_id=tx_ids, senders=st.one_of(st.none(), st.sets(st.sampled_from(SENDERS))))
    def commit(self, tx_id, senders):
        prior = self.state.get(tx_id)
        if prior is None:
            with pytest.raises(UnknownTransaction):
                self.engine.end(tx_id, Resolution.COMMIT, include_senders=senders)
        elif prior in (TxState.ROLLED_BACK, TxState.DISCARDED):
            with pytest.raises(TransactionConflict):
                self.engine.end(tx_id, Resolution.COMMIT, include_senders=senders)
        elif prior is TxState.COMMITTED:
            assert not self.engine.end(tx_id, Resolution.COMMIT, include_senders=senders).newly_ended
        else:
            result = self.engine.end(tx_id, Resolution.COMMIT, include_senders=senders)
            assert result.newly_ended and result.state is TxState.COMMITTED
            self.state[tx_id] = TxState.COMMITTED
            for topic, qid, body, sender in self.halves[tx_id]:
                if senders is None or sender in senders:
                    self.expected.setdefault((topic, qid), []).append(body)

    @rule(tx_id=tx_ids)
    def rollback(self, tx_id):
        prior = self.state.get(tx_id)
        if prior is None:
            with pytest.raises(UnknownTransaction):
                self.engine.end(tx_id, Resolution.ROLLBACK)
        elif prior is TxState.COMMITTED:
            with pytest.raises(TransactionConflict):
                self.engine.end(tx_id, Resolution.ROLLBACK)
        elif prior in (TxState.ROLLED_BACK, TxState.DISCARDED):
            assert not self.engine.end(tx_id, Resolution.ROLLBACK).newly_ended
        else:
            assert self.engine.end(tx_id, Resolution.ROLLBACK).newly_ended
            self.state[tx_id] = TxState.ROLLED_BACK

    @rule(tx_id=tx_ids)
    def admin_discard(self, tx_id):
        if self.state.get(tx_id) is None:
            with pytest.raises(UnknownTransaction):
                self.engine.discard(tx_id)
            return
        discarded = self.engine.discard(tx_id)
        assert discarded == (self.state[tx_id] is TxState.PENDING)
        if discarded:
            self.state[tx_id] = TxState.DISCARDED

    @rule(tx_id=tx_ids)
    def resume(self, tx_id):
        prior = self.state.get(tx_id)
        if prior is None:
            with pytest.raises(UnknownTransaction):
                self.engine.resume(tx_id)
        elif prior.is_final:
            with pytest.raises(TransactionAlreadyEnded):
                self.engine.resume(tx_id)
        else:
            self.engine.resume(tx_id)
            self.state[tx_id] = TxState.PENDING

    @rule()
    def check_back_round(self):
        self.clock.advance(30)
        CheckbackService(self.engine, Always()).run_once()
        for tx_id, state in list(self.state.items()):
            now = self.engine.get(tx_id).state
            if now is not state:
                assert (state, now) == (TxState.PENDING, TxState.DISCARDED), tx_id
                self.state[tx_id] = now

    @rule(snapshot_first=st.booleans())
    def crash_and_recover(self, snapshot_first):
        if snapshot_first:
            self.engine.snapshot()
        self.store = self.open_store(self.dir, self.store)
        self.engine = TransactionEngine(self.store, self.config, clock=self.clock)

    # --- invariants -----------------------------------------------------------

    @invariant()
    def visible_iff_committed_exactly_once(self):
        for topic in TOPICS:
            for qid in QUEUES:
                assert visible(self.store, topic, qid) == self.expected.get((topic, qid), [])

    @invariant()
    def engine_agrees_with_the_model(self):
        for tx_id, state in self.state.items():
            assert self.engine.get(tx_id).state is state, tx_id

    @invariant()
    def pending_metric_counts_pending_halves(self):
        want: dict[str, int] = {}
        for tx_id, state in self.state.items():
            if state is TxState.PENDING:
                for topic, *_ in self.halves[tx_id]:
                    want[topic] = want.get(topic, 0) + 1
        assert self.engine.metrics.snapshot()["pending_halves"] == want


TransactionMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_transaction_state_machine_over_memory_store = TransactionMachine.TestCase


class RealStoreTransactionMachine(TransactionMachine):
    open_store = staticmethod(open_real_store)


RealStoreTransactionMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _real_store_available() -> bool:
    try:
        import txmq.broker.store.message_store  # noqa: F401
    except ImportError:
        return False
    return True


test_transaction_state_machine_over_real_store = pytest.mark.skipif(
    not _real_store_available(), reason="the real MessageStore has not landed yet")(
    RealStoreTransactionMachine.TestCase)
