"""Offset snapshots (consistent cuts), min offsets, offsets by time and the long poll."""

from __future__ import annotations

import threading
import time

import pytest

from tests.client.helpers import bodies_batch
from txmq.broker import errors


def test_snapshot_lists_every_queue_of_an_empty_topic_at_zero(client, topic):
    assert client.snapshot_offsets([topic]) == {topic: {0: 0, 1: 0, 2: 0, 3: 0}}


def test_snapshot_counts_committed_messages_only(client, topic):
    client.send_arrow(bodies_batch(8), topic=topic)
    prep = client.prepare_arrow("", bodies_batch(4), topic=topic, producer_group="g", sender="s")
    assert sum(client.snapshot_offsets([topic])[topic].values()) == 8
    client.end_transaction(prep.transaction_id, "COMMIT")
    assert sum(client.snapshot_offsets([topic])[topic].values()) == 12


def test_min_offsets_start_at_zero(client, topic):
    client.send_arrow(bodies_batch(4), topic=topic)
    assert client.min_offsets([topic]) == {topic: {0: 0, 1: 0, 2: 0, 3: 0}}


def test_offsets_for_timestamp_split_old_from_new_messages(client, topic):
    client.send_arrow(bodies_batch(4), topic=topic)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    client.send_arrow(bodies_batch(4), topic=topic)
    assert sum(client.offsets_for_timestamp([topic], 0)[topic].values()) == 0
    assert sum(client.offsets_for_timestamp([topic], middle)[topic].values()) == 4


def test_wait_for_offsets_returns_as_soon_as_a_commit_lands(client, topic):
    known = client.snapshot_offsets([topic])
    prep = client.prepare_arrow("", bodies_batch(3), topic=topic, producer_group="g", sender="s")
    timer = threading.Timer(0.3, client.end_transaction, args=(prep.transaction_id, "COMMIT"))
    timer.start()
    started = time.monotonic()
    cut = client.wait_for_offsets([topic], known, timeout_ms=10_000)
    elapsed = time.monotonic() - started
    timer.join()
    assert sum(cut[topic].values()) == 3
    assert 0.2 < elapsed < 5


def test_wait_for_offsets_times_out_with_the_same_offsets(client, topic):
    known = client.snapshot_offsets([topic])
    started = time.monotonic()
    assert client.wait_for_offsets([topic], known, timeout_ms=300) == known
    assert time.monotonic() - started >= 0.25


def test_wait_for_offsets_returns_at_once_when_already_behind(client, topic):
    client.send_arrow(bodies_batch(1), topic=topic)
    started = time.monotonic()
    client.wait_for_offsets([topic], {topic: {}}, timeout_ms=10_000)
    assert time.monotonic() - started < 2


def test_snapshot_of_unknown_topic_raises_topic_not_found(client, unique):
    with pytest.raises(errors.TopicNotFound):
        client.snapshot_offsets([f"none_{unique}"])


def test_negative_long_poll_timeout_is_refused(client, topic):
    with pytest.raises(errors.IllegalPollingTime):
        client.wait_for_offsets([topic], {}, timeout_ms=-1)
