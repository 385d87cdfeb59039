"""Consistent cut over the real store: a committed transaction is never split by a cut."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("txmq.broker.store.message_store")

from txmq.broker.store.config import StoreConfig  # noqa: E402
from txmq.broker.store.message import HALF_TOPIC, Message  # noqa: E402
from txmq.broker.store.message_store import MessageStore  # noqa: E402
from txmq.broker.transaction import Resolution, TransactionEngine  # noqa: E402

TOPICS = ("a", "b")


@pytest.fixture
def real_store(tmp_path: Path):
    store = MessageStore(StoreConfig(data_dir=tmp_path / "data"))
    yield store
    store.close()


def read_upto(store, cut: dict[tuple[str, int], int]) -> list[str]:
    bodies = []
    for (topic, qid), end in cut.items():
        offset = 0
        while offset < end:
            read = store.read_queue(topic, qid, offset, min(500, end - offset))
            bodies += [m.body.decode() for m in read.messages]
            offset = read.next_offset
    return bodies


def test_halves_are_not_in_the_real_topics_queues(real_store):
    engine = TransactionEngine(real_store)
    engine.prepare([Message(topic="a", body=b"h", queue_id=1)], transaction_id="t")
    assert real_store.max_offset("a", 1) == 0
    assert real_store.max_offset(HALF_TOPIC, 0) == 1
    engine.end("t", Resolution.COMMIT)
    assert [m.body for m in real_store.read_queue("a", 1, 0, 10).messages] == [b"h"]


def test_no_cut_splits_a_committed_transaction(real_store):
    engine = TransactionEngine(real_store)
    stop = threading.Event()
    sizes: dict[str, int] = {}

    def writer() -> None:
        i = 0
        while not stop.is_set() and i < 400:
            i += 1
            tx = f"t{i}"
            msgs = [Message(topic=TOPICS[k % 2], body=f"{tx}:{k}".encode(), queue_id=k % 3) for k in range(6)]
            sizes[tx] = len(msgs)
            engine.prepare(msgs, transaction_id=tx)
            engine.end(tx, Resolution.COMMIT if i % 4 else Resolution.ROLLBACK)

    thread = threading.Thread(target=writer)
    thread.start()
    cuts = 0
    try:
        while thread.is_alive() or cuts == 0:
            seen: dict[str, int] = {}
            for body in read_upto(real_store, engine.consistent_cut(TOPICS)):
                tx = body.split(":")[0]
                seen[tx] = seen.get(tx, 0) + 1
            split = {tx: n for tx, n in seen.items() if n != sizes[tx]}
            assert not split, f"cut splits transactions: {split}"
            cuts += 1
    finally:
        stop.set()
        thread.join()
    assert cuts > 1


def test_consistent_cut_without_topics_covers_user_topics_only(real_store):
    engine = TransactionEngine(real_store)
    engine.prepare([Message(topic="a", body=b"x")], transaction_id="t")
    engine.end("t", Resolution.COMMIT)
    assert engine.consistent_cut() == {("a", 0): 1}
