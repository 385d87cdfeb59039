"""The pending counts by (producer group, topic) are kept as transactions change, and always
equal a count over the whole table (engine.check_pending_index)."""

from __future__ import annotations

from txmq.broker.transaction import CheckbackService, Resolution, TransactionConfig, TransactionEngine

from .conftest import msg


class Delivered:
    def request_check(self, tx, half) -> bool:
        return True


def make(store, clock, **cfg) -> TransactionEngine:
    config = TransactionConfig(**{"transaction_timeout_s": 6, "check_interval_s": 30, **cfg})
    return TransactionEngine(store, config, clock=clock)


def figures(engine) -> dict:
    counts, discarded = engine.pending_summary()
    return {k: (c.transactions, c.oldest_age_ms, c.max_check_times) for k, c in counts.items()} | {
        "discarded": discarded}


def test_prepares_are_counted_per_producer_group_and_topic_with_the_oldest_age(memory_store, clock):
    engine = make(memory_store, clock)
    engine.prepare([msg("a"), msg("b")], transaction_id="t1", producer_group="pg")
    clock.advance(2)
    engine.prepare([msg("a")], transaction_id="t2", producer_group="pg")
    engine.prepare([msg("a")], transaction_id="t3", producer_group="other")
    engine.prepare([msg("c")], transaction_id="t2", producer_group="pg")  # a second prepare adds a topic
    clock.advance(1)
    assert figures(engine) == {("pg", "a"): (2, 3000, 0), ("pg", "b"): (1, 3000, 0), ("pg", "c"): (1, 1000, 0),
                               ("other", "a"): (1, 1000, 0), "discarded": 0}
    engine.check_pending_index()


def test_ended_transactions_leave_the_counts_and_the_next_oldest_is_reported(memory_store, clock):
    engine = make(memory_store, clock)
    engine.prepare([msg("a")], transaction_id="old", producer_group="pg")
    clock.advance(5)
    engine.prepare([msg("a")], transaction_id="young", producer_group="pg")
    engine.prepare([msg("b")], transaction_id="gone", producer_group="pg")
    clock.advance(1)
    engine.end("old", Resolution.COMMIT)
    engine.end("gone", Resolution.ROLLBACK)
    assert figures(engine) == {("pg", "a"): (1, 1000, 0), "discarded": 0}
    engine.check_pending_index()


def test_check_backs_discards_and_resumes_move_the_counts(memory_store, clock):
    engine = make(memory_store, clock, max_checks=2)
    service = CheckbackService(engine, Delivered())
    engine.prepare([msg("a")], transaction_id="t", producer_group="pg")
    clock.advance(6)
    service.run_once()
    assert figures(engine) == {("pg", "a"): (1, 6000, 1), "discarded": 0}
    engine.check_pending_index()
    for _ in range(2):
        clock.advance(30)
        service.run_once()
    assert figures(engine) == {"discarded": 1}
    engine.check_pending_index()
    engine.resume("t")
    assert figures(engine) == {("pg", "a"): (1, 66000, 0), "discarded": 0}
    engine.check_pending_index()


def test_counts_are_rebuilt_on_recovery(memory_store, clock):
    engine = make(memory_store, clock, max_checks=0)
    engine.prepare([msg("a")], transaction_id="p", producer_group="pg")
    engine.prepare([msg("b")], transaction_id="d", producer_group="pg")
    engine.discard("d")
    engine.prepare([msg("a")], transaction_id="c", producer_group="pg")
    engine.end("c", Resolution.COMMIT)
    clock.advance(1)
    again = make(memory_store, clock)
    assert figures(again) == {("pg", "a"): (1, 1000, 0), "discarded": 1}
    again.check_pending_index()


def test_many_transactions_ended_out_of_order_keep_the_counts_exact(memory_store, clock):
    engine = make(memory_store, clock)
    for i in range(300):
        engine.prepare([msg(f"t{i % 3}")], transaction_id=f"x{i}", producer_group=f"g{i % 2}")
        clock.advance(0.01)
    backwards = list(range(299, 0, -7))
    for i in backwards + [i for i in range(0, 300, 5) if i not in backwards]:
        engine.end(f"x{i}", Resolution.COMMIT if i % 2 else Resolution.ROLLBACK)
    engine.check_pending_index()


def test_counts_stay_exact_under_concurrent_prepares_checks_and_ends(memory_store, clock):
    import threading

    engine = make(memory_store, clock, max_checks=1)
    service = CheckbackService(engine, Delivered())

    def worker(w: int) -> None:
        for i in range(60):
            tx = f"w{w}-{i}"
            engine.prepare([msg(f"t{i % 4}")], transaction_id=tx, producer_group=f"g{w % 2}")
            engine.prepare([msg(f"t{(i + 1) % 4}")], transaction_id=tx, producer_group=f"g{w % 2}")
            if i % 3 == 0:
                engine.end(tx, Resolution.COMMIT)
            elif i % 3 == 1:
                engine.end(tx, Resolution.ROLLBACK)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for _ in range(3):  # check-back rounds (checks, then discards) while the workers run
        clock.advance(31)
        service.run_once()
    for t in threads:
        t.join()
    engine.check_pending_index()
