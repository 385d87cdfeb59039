"""Locking: per-transaction, never one big lock around the store append."""

from __future__ import annotations

import threading

from txmq.broker.transaction import Resolution, TransactionEngine, TxState

from .conftest import msg
from .memory_store import MemoryStore


class BlockingStore(MemoryStore):
    """Holds any append that carries a body b"block" until released (outside the store's lock)."""

    def __init__(self, data_dir) -> None:
        super().__init__(data_dir)
        self.entered = threading.Event()
        self.release = threading.Event()

    def append_group(self, messages, *, allow_system=False, durable=True):
        if any(m.body == b"block" for m in messages):
            self.entered.set()
            assert self.release.wait(10)
        return super().append_group(messages, allow_system=allow_system, durable=durable)


def start(fn, *args, **kwargs) -> threading.Thread:
    thread = threading.Thread(target=fn, args=args, kwargs=kwargs, daemon=True)
    thread.start()
    return thread


def test_a_slow_append_of_one_transaction_does_not_block_another(tmp_path):
    store = BlockingStore(tmp_path)
    engine = TransactionEngine(store)
    slow = start(engine.prepare, [msg("a", b"block")], transaction_id="slow")
    assert store.entered.wait(5)
    engine.prepare([msg("a", b"fast")], transaction_id="fast")
    assert engine.end("fast", Resolution.COMMIT).newly_ended
    assert [m.body for m in store.visible("a", 0)] == [b"fast"]
    store.release.set()
    slow.join(5)
    assert engine.get("slow").half_count == 1


def test_end_waits_for_a_prepare_in_flight_and_covers_its_halves(tmp_path):
    store = BlockingStore(tmp_path)
    engine = TransactionEngine(store)
    engine.prepare([msg("a", b"first")], transaction_id="t")
    adding = start(engine.prepare, [msg("a", b"block")], transaction_id="t")
    assert store.entered.wait(5)
    results = []
    ending = start(lambda: results.append(engine.end("t", Resolution.COMMIT)))
    ending.join(0.3)
    assert ending.is_alive() and not results  # the commit waits for the acknowledged-to-be half
    store.release.set()
    adding.join(5)
    ending.join(5)
    assert results[0].state is TxState.COMMITTED
    assert [m.body for m in store.visible("a", 0)] == [b"first", b"block"]
