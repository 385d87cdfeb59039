"""Transactional messages with a delivery time (native client) on a real broker process: scheduled by
the COMMIT, delivered at their time exactly once across kill -9, never when rolled back."""

from __future__ import annotations

import random
import time

from tests.server.wire import Wire
from tests.timer.conftest import ms, name, now_ms, wait_for
from txmq.broker.client import Message
from txmq.broker.client.native_client import NativeClient


def commit_delayed(client: NativeClient, topic: str, times: list[int]) -> dict[bytes, int]:
    """One transaction of a message per delivery time, committed; body → its time."""
    bodies = {b"%s-%d" % (topic.encode(), i) + b"@%d" % at: at for i, at in enumerate(times)}
    tx = client.prepare("", [Message(topic=topic, body=b, deliver_at_ms=at) for b, at in bodies.items()],
                        producer_group="pg").transaction_id
    client.end_transaction(tx, "COMMIT", producer_group="pg")
    return bodies


def test_a_rolled_back_transaction_with_a_delivery_time_is_never_delivered_even_after_a_kill(broker):
    topic = name("tx-rollback")
    with NativeClient(broker.endpoint) as client:
        tx = client.prepare("", [Message(topic=topic, body=b"never", deliver_at_ms=now_ms() + 500)],
                            producer_group="pg").transaction_id
        client.end_transaction(tx, "ROLLBACK", producer_group="pg")
    time.sleep(1.0)
    broker.kill()
    broker.restart()
    w = Wire(broker.endpoint)
    time.sleep(1.5)
    assert w.pull_all(topic) == []
    w.close()


def test_kill9_at_random_between_commit_and_delivery_delivers_each_exactly_once_never_early(broker):
    rng = random.Random(2929)
    topic = name("tx-kill")
    sent: dict[bytes, int] = {}
    for _ in range(3):  # commit some, crash at a random moment while others fall due, restart
        with NativeClient(broker.endpoint) as client:
            sent.update(commit_delayed(client, topic, [now_ms() + rng.randrange(200, 2500) for _ in range(30)]))
        time.sleep(rng.uniform(0.0, 1.5))
        broker.kill()
        broker.restart()
    w = Wire(broker.endpoint)
    wait_for(w, topic, len(sent), 20)
    time.sleep(1.0)
    got = w.pull_all(topic)
    w.close()
    assert sorted(m.body for m in got) == sorted(sent)
    for m in got:
        assert ms(m.system_properties.store_timestamp) >= sent[m.body]
