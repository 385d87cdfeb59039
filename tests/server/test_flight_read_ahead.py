"""DoGet's read-ahead (server/flight_service.py): a stream's next batch is built on a pool while the
current one is sent. The stream must stay what the source iterator gives: same items, same order,
its error at the same place, and a stream given up early closes the source once it is idle."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from txmq.broker.server.flight_service import _read_ahead


@pytest.fixture
def pool():
    with ThreadPoolExecutor(2) as executor:
        yield executor


def test_items_in_order(pool):
    assert list(_read_ahead((i for i in range(100)), pool)) == list(range(100))
    assert list(_read_ahead((i for i in ()), pool)) == []


def test_the_next_item_is_built_while_the_current_one_is_handled(pool):
    built = threading.Event()

    def source():
        yield 1
        built.set()
        yield 2

    stream = _read_ahead(source(), pool)
    assert next(stream) == 1
    assert built.wait(5), "the second item was not built while the first was out"
    assert list(stream) == [2]


def test_an_error_arrives_after_the_items_before_it(pool):
    def source():
        yield 1
        raise ValueError("bad record")

    stream = _read_ahead(source(), pool)
    assert next(stream) == 1
    with pytest.raises(ValueError, match="bad record"):
        next(stream)


def test_a_stream_given_up_closes_its_source_after_the_item_in_progress(pool):
    release, closed = threading.Event(), threading.Event()

    def source():
        try:
            yield 1
            release.wait(5)  # still building the second item when the stream is closed
            yield 2
            yield 3
        finally:
            closed.set()

    stream = _read_ahead(source(), pool)
    assert next(stream) == 1
    threading.Timer(0.2, release.set).start()
    stream.close()  # waits for the item in progress: a running generator cannot be closed
    assert closed.is_set()
