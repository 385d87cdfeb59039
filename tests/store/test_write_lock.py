"""The write lock: queue reservations refuse or hold writers of a split group's queues; a closed
lock refuses writes; the count of waiting writers returns to zero."""

from __future__ import annotations

import threading

import pytest

from txmq.broker.errors import QueueReserved, StoreError
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.write_lock import QUEUE_RESERVED, WriteLock

from ._helpers import msg


def _lock() -> WriteLock:
    return WriteLock(None, lambda: 0)


def test_a_write_to_a_reserved_queue_is_refused_without_running():
    lock, ran = _lock(), []
    with lock.lock:
        lock.reserve([("T", 1)])
    batch = BatchColumns([msg("T", queue_id=1)])
    assert lock.run(lambda: ran.append(1), batch) is QUEUE_RESERVED
    with pytest.raises(QueueReserved, match="T:1"):
        lock.write(lambda: ran.append(1), batch, wait_reserved=False)
    assert ran == [] and lock.is_reserved("T", 1)
    assert lock.write(lambda: "written", BatchColumns([msg("T", queue_id=2)]), wait_reserved=False) == "written"


def test_a_writer_of_a_reserved_queue_waits_for_the_reservation_to_end():
    lock = _lock()
    with lock.lock:
        lock.reserve([("T", 0)])
    done = []
    writer = threading.Thread(target=lambda: done.append(lock.write(lambda: "late", BatchColumns([msg("T")]))))
    writer.start()
    writer.join(0.2)
    assert writer.is_alive() and not done
    with lock.lock:
        lock.end_reservation()
    writer.join(10)
    assert done == ["late"] and not lock.is_reserved("T", 0)


def test_a_closed_lock_refuses_writes_and_counts_no_waiter():
    lock = _lock()
    lock.closed = True
    with pytest.raises(StoreError, match="closed"):
        lock.run(lambda: None)
    assert lock.waiters == 0
