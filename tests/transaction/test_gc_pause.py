"""The engine's collector pause: bounded, nested, and never leaves the collector off."""

from __future__ import annotations

import gc

import pytest

from txmq.broker.transaction import gc_pause
from txmq.broker.transaction.gc_pause import collector_paused


@pytest.fixture(autouse=True)
def collector_on():
    gc.enable()
    yield
    gc.enable()


def test_collector_is_off_inside_and_on_again_after():
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collector_is_on_again_after_an_exception():
    with pytest.raises(RuntimeError):
        with collector_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()


def test_nested_sections_enable_it_only_when_the_last_ends():
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_sections_do_not_pause_it_longer_than_the_bound(monkeypatch):
    monkeypatch.setattr(gc_pause, "MAX_PAUSE_S", 0.0)
    with collector_paused():
        with collector_paused():  # begins after the bound: the collector runs again
            assert gc.isenabled()
    assert gc.isenabled()


def test_a_call_of_a_few_messages_leaves_the_collector_on_and_a_large_one_pauses_it():
    with gc_pause.collector_paused_for(1):
        assert gc.isenabled()
    with gc_pause.collector_paused_for(gc_pause.PAUSE_MIN_MESSAGES):
        assert not gc.isenabled()
    assert gc.isenabled()
