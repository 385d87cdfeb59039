"""Check-back timing: immunity, interval, max checks, discard/resume, orphan timeout."""

from __future__ import annotations

import pytest

from txmq.broker.errors import TransactionConflict
from txmq.broker.store.message import CHECK_MAX_TIME_TOPIC, OP_HALF_TOPIC, PROP_CHECK_IMMUNITY_SECONDS
from txmq.broker.transaction import (
    CheckbackService,
    Resolution,
    TransactionConfig,
    TransactionEngine,
    TxState,
)

from .conftest import msg


class RecordingListener:
    """Answers like a producer would: delivered or not, and remembers what it was asked."""

    def __init__(self, delivered: bool = True) -> None:
        self.delivered = delivered
        self.asked: list[str] = []

    def request_check(self, tx, half) -> bool:
        self.asked.append(tx.transaction_id)
        return self.delivered


def make(memory_store, clock, listener=None, **cfg):
    config = TransactionConfig(**{"transaction_timeout_s": 6, "check_interval_s": 30, **cfg})
    engine = TransactionEngine(memory_store, config, clock=clock)
    listener = listener or RecordingListener()
    return engine, CheckbackService(engine, listener), listener


def test_no_check_back_within_the_immunity_time(memory_store, clock):
    engine, service, listener = make(memory_store, clock)
    engine.prepare([msg()], transaction_id="t")
    clock.advance(5.9)
    service.run_once()
    assert listener.asked == []
    clock.advance(0.1)
    assert service.run_once().checked == 1
    assert listener.asked == ["t"]


def test_per_message_immunity_overrides_the_transaction_timeout(memory_store, clock):
    engine, service, listener = make(memory_store, clock)
    engine.prepare([msg(**{PROP_CHECK_IMMUNITY_SECONDS: "60"})], transaction_id="t")
    clock.advance(59)
    service.run_once()
    assert listener.asked == []
    clock.advance(1)
    service.run_once()
    assert listener.asked == ["t"]


def test_immunity_is_capped_at_one_hour(memory_store, clock):
    engine, service, listener = make(memory_store, clock)
    engine.prepare([msg(**{PROP_CHECK_IMMUNITY_SECONDS: "999999"})], transaction_id="t")
    clock.advance(3600)
    service.run_once()
    assert listener.asked == ["t"]


def test_checks_repeat_once_per_interval(memory_store, clock):
    engine, service, listener = make(memory_store, clock)
    engine.prepare([msg()], transaction_id="t")
    clock.advance(6)
    service.run_once()
    clock.advance(29)
    service.run_once()
    assert listener.asked == ["t"]
    clock.advance(1)
    service.run_once()
    assert listener.asked == ["t", "t"]
    assert engine.get("t").checks == 2


def test_resolved_transactions_are_not_checked(memory_store, clock):
    engine, service, listener = make(memory_store, clock)
    engine.prepare([msg()], transaction_id="t")
    engine.end("t", Resolution.COMMIT)
    clock.advance(100)
    service.run_once()
    assert listener.asked == []


def test_after_max_checks_the_transaction_is_discarded_to_the_check_max_topic(memory_store, clock):
    engine, service, listener = make(memory_store, clock, max_checks=3)
    engine.prepare([msg("a", b"1"), msg("b", b"2")], transaction_id="t")
    clock.advance(6)
    for _ in range(3):
        service.run_once()
        clock.advance(30)
    assert engine.get("t").state is TxState.PENDING
    assert service.run_once().discarded == 1
    assert listener.asked == ["t"] * 3
    assert engine.get("t").state is TxState.DISCARDED
    assert [m.body for m in memory_store.visible(CHECK_MAX_TIME_TOPIC, 0)] == [b"1", b"2"]
    assert memory_store.visible("a", 0) == []
    assert engine.metrics.snapshot()["discards"] == 1


def test_discarded_transaction_refuses_commit(memory_store, clock):
    engine, service, _ = make(memory_store, clock, max_checks=0)
    engine.prepare([msg()], transaction_id="t")
    clock.advance(6)
    service.run_once()
    with pytest.raises(TransactionConflict):
        engine.end("t", Resolution.COMMIT)


def test_resume_makes_a_discarded_transaction_pending_with_checks_reset(memory_store, clock):
    engine, service, listener = make(memory_store, clock, max_checks=1)
    engine.prepare([msg("a", b"1")], transaction_id="t")
    clock.advance(6)
    service.run_once()
    clock.advance(30)
    service.run_once()
    assert engine.get("t").state is TxState.DISCARDED
    engine.resume("t")
    info = engine.get("t")
    assert (info.state, info.checks) == (TxState.PENDING, 0)
    clock.advance(6)
    service.run_once()
    assert listener.asked == ["t", "t"]
    assert engine.end("t", Resolution.COMMIT).newly_ended
    assert [m.body for m in memory_store.visible("a", 0)] == [b"1"]


def test_undelivered_checks_do_not_burn_a_check(memory_store, clock):
    listener = RecordingListener(delivered=False)
    engine, service, _ = make(memory_store, clock, listener, max_checks=2)
    engine.prepare([msg()], transaction_id="t")
    clock.advance(6)
    for _ in range(10):
        round_ = service.run_once()
        assert round_.undelivered == 1 and round_.discarded == 0
        clock.advance(30)
    assert engine.get("t").checks == 0
    assert engine.get("t").state is TxState.PENDING
    assert engine.metrics.snapshot()["checks_undelivered"] == 10


def test_orphan_timeout_discards_even_undelivered_transactions(memory_store, clock):
    listener = RecordingListener(delivered=False)
    engine, service, _ = make(memory_store, clock, listener, orphan_timeout_s=100)
    engine.prepare([msg()], transaction_id="t")
    clock.advance(90)
    service.run_once()
    assert engine.get("t").state is TxState.PENDING
    clock.advance(30)
    assert service.run_once().discarded == 1
    assert engine.get("t").state is TxState.DISCARDED


def test_a_round_hands_out_at_most_max_checks_per_round(memory_store, clock):
    engine, service, listener = make(memory_store, clock, max_checks_per_round=3)
    for i in range(5):
        engine.prepare([msg()], transaction_id=f"t{i}")
    clock.advance(6)
    first = service.run_once()
    assert first.checked == 3 and first.more_due
    second = service.run_once()
    assert second.checked == 2 and not second.more_due
    assert sorted(listener.asked) == [f"t{i}" for i in range(5)]


def test_check_back_writes_nothing_to_the_store(memory_store, clock):
    engine, service, _ = make(memory_store, clock)
    engine.prepare([msg()], transaction_id="t")
    appends = memory_store.appends
    for _ in range(5):
        clock.advance(30)
        service.run_once()
    assert memory_store.appends == appends
    assert memory_store.visible(OP_HALF_TOPIC, 0) == []


def test_a_failing_listener_does_not_burn_a_check(memory_store, clock):
    class Broken:
        def request_check(self, tx, half):
            raise RuntimeError("producer session vanished")

    engine, service, _ = make(memory_store, clock, Broken())
    engine.prepare([msg()], transaction_id="t")
    clock.advance(6)
    assert service.run_once().undelivered == 1
    assert engine.get("t").checks == 0


def test_answer_to_a_check_is_counted(memory_store, clock):
    engine, service, _ = make(memory_store, clock)
    engine.prepare([msg()], transaction_id="t")
    clock.advance(6)
    service.run_once()
    engine.end("t", Resolution.ROLLBACK, source="check")
    snap = engine.metrics.snapshot()
    assert (snap["checks_sent"], snap["checks_answered"]) == (1, 1)


def test_the_listener_gets_the_transaction_and_its_first_half(memory_store, clock):
    seen = []

    class Capture:
        def request_check(self, tx, half):
            seen.append((tx.transaction_id, tx.producer_group, tx.topics, half.body))
            return True

    engine, service, _ = make(memory_store, clock, Capture())
    engine.prepare([msg("a", b"first"), msg("b", b"second")], transaction_id="t", producer_group="pg")
    clock.advance(6)
    service.run_once()
    assert seen == [("t", "pg", ("a", "b"), b"first")]


def test_service_thread_runs_rounds_at_millisecond_intervals(memory_store):
    import time

    engine = TransactionEngine(memory_store, TransactionConfig(transaction_timeout_s=0, check_interval_s=0.01))
    listener = RecordingListener()
    service = CheckbackService(engine, listener)
    engine.prepare([msg()], transaction_id="t")
    service.start()
    try:
        deadline = time.monotonic() + 5
        while len(listener.asked) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        service.stop()
    assert len(listener.asked) >= 3


def test_a_failed_discard_is_retried_next_round(memory_store, clock):
    engine, service, _ = make(memory_store, clock, max_checks=0)
    engine.prepare([msg()], transaction_id="t")
    clock.advance(6)
    memory_store.fail_next_append = True
    assert service.run_once().discarded == 0
    assert engine.get("t").state is TxState.PENDING
    clock.advance(30)
    assert service.run_once().discarded == 1
    assert engine.get("t").state is TxState.DISCARDED


class InProgressListener(RecordingListener):
    """A live producer still working on its transactions: it answers each check IN_PROGRESS."""

    def __init__(self, engine) -> None:
        super().__init__()
        self.engine = engine

    def request_check(self, tx, half) -> bool:
        super().request_check(tx, half)
        self.engine.answer_in_progress(tx.transaction_id, producer_group=tx.producer_group)
        return True


def _make_in_progress(memory_store, clock, **cfg):
    config = TransactionConfig(**{"transaction_timeout_s": 6, "check_interval_s": 30, "max_checks": 3, **cfg})
    engine = TransactionEngine(memory_store, config, clock=clock)
    listener = InProgressListener(engine)
    return engine, CheckbackService(engine, listener), listener


def test_in_progress_answers_keep_a_transaction_pending_past_max_checks(memory_store, clock):
    engine, service, listener = _make_in_progress(memory_store, clock)
    engine.prepare([msg()], transaction_id="t", producer_group="sink")
    clock.advance(6)
    for _ in range(10):  # over three times max_checks
        assert service.run_once().discarded == 0
        clock.advance(30)
    assert engine.get("t").state is TxState.PENDING
    assert len(listener.asked) == 10
    assert engine.metrics.snapshot()["checks_in_progress"] == 10


def test_in_progress_answers_count_again_once_the_transaction_is_older_than_the_bound(memory_store, clock):
    engine, service, listener = _make_in_progress(memory_store, clock, in_progress_max_age_s=100)
    engine.prepare([msg()], transaction_id="t", producer_group="sink")
    clock.advance(6)
    rounds = 0
    while engine.get("t").state is TxState.PENDING:
        service.run_once()
        clock.advance(30)
        rounds += 1
        assert rounds < 20
    assert engine.get("t").state is TxState.DISCARDED
    # checks at 6, 36, 66, 96 s are forgiven; those at 126, 156 and 186 s count: discarded at 216 s
    assert len(listener.asked) == 7


def test_checks_count_again_when_the_producer_stops_answering_in_progress(memory_store, clock):
    engine, service, listener = _make_in_progress(memory_store, clock)
    engine.prepare([msg()], transaction_id="t", producer_group="sink")
    clock.advance(6)
    for _ in range(5):
        service.run_once()
        clock.advance(30)
    service.listener = RecordingListener()  # the producer is gone; another one of its group answers UNKNOWN
    for _ in range(3):
        assert engine.get("t").state is TxState.PENDING
        service.run_once()
        clock.advance(30)
    assert service.run_once().discarded == 1
    assert engine.get("t").state is TxState.DISCARDED


def test_an_in_progress_answer_from_another_producer_group_is_refused(memory_store, clock):
    engine, _, _ = _make_in_progress(memory_store, clock)
    engine.prepare([msg()], transaction_id="t", producer_group="sink")
    with pytest.raises(TransactionConflict):
        engine.answer_in_progress("t", producer_group="someone-else")
    assert engine.answer_in_progress("t", producer_group="sink") is TxState.PENDING
