"""FIFO consumer groups at the pop service: what a group marked FIFO (RocketMQ's
consumeMessageOrderly) is handed, against a real store and a test clock."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from txmq.broker.errors import InvalidReceiptHandle
from txmq.broker.server.consumer_groups import ConsumerGroups
from txmq.broker.server.pop import DLQ_PREFIX, PopService
from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import Message
from txmq.broker.store.message_store import MessageStore

TOPIC, GROUP, QUEUES = "orders", "fifo-readers", 2
SECOND = 1000


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000_000

    def __call__(self) -> float:
        return self.now_ms / 1000


@pytest.fixture
def env(tmp_path):
    store = MessageStore(StoreConfig(data_dir=tmp_path, flush_mode="async"))
    store.topics.create(TOPIC, QUEUES)
    groups = ConsumerGroups(tmp_path / "consumer_groups.json", default_max_attempts=17)
    groups.update(GROUP, fifo=True, retry_max_times=2)
    clock = Clock()

    def topic_queue_count(topic, create=None):
        if not store.topics.exists(topic):
            store.topics.create(topic, 1)
        return store.topics.get(topic).queue_count

    core = SimpleNamespace(store=store, routes=None, consumer_groups=groups, topic_queue_count=topic_queue_count)
    pop = PopService(core, clock=clock)
    yield SimpleNamespace(store=store, groups=groups, clock=clock, pop=pop)
    store.close()


def send(env, queue: int, *bodies: str) -> None:
    env.store.append([Message(topic=TOPIC, body=b.encode(), queue_id=queue) for b in bodies])


def receive(env, batch: int = 32, *, queue: int = -1, group: str = GROUP, invisible_s: int = 10,
            attempt_id: str | None = None):
    return env.pop.receive(group, TOPIC, QUEUES, start_queue=queue, batch=batch, invisible_ms=invisible_s * SECOND,
                           message_filter=None, attempt_id=attempt_id)


def bodies(deliveries) -> list[str]:
    return [d.message.body.decode() for d in deliveries]


def test_a_queue_hands_out_nothing_more_while_one_of_its_messages_is_in_flight(env):
    send(env, 0, "a1", "a2")
    first = receive(env, batch=1)
    send(env, 0, "a3")
    assert bodies(first) == ["a1"]
    assert receive(env) == []


def test_the_next_messages_come_once_the_in_flight_ones_are_acked(env):
    send(env, 0, "a1", "a2", "a3")
    first = receive(env, batch=1)
    env.pop.ack(GROUP, TOPIC, first[0].receipt_handle)
    assert bodies(receive(env)) == ["a2", "a3"]


def test_a_nacked_message_comes_back_first_with_its_attempt_incremented(env):
    send(env, 0, "a1", "a2", "a3")
    batch = receive(env)
    for d in batch:  # the consumer failed on a1: it gives the whole range back
        env.pop.change_invisible(GROUP, TOPIC, d.receipt_handle, 1 * SECOND)
    env.clock.now_ms += 1 * SECOND
    again = receive(env)
    assert bodies(again) == ["a1", "a2", "a3"]
    assert [d.attempt for d in again] == [2, 2, 2]


def test_a_range_waits_for_its_last_invisible_message(env):
    send(env, 0, "a1", "a2")
    a1, a2 = receive(env)
    env.pop.change_invisible(GROUP, TOPIC, a1.receipt_handle, 1 * SECOND)
    env.clock.now_ms += 1 * SECOND
    assert receive(env) == [], "a2 is still invisible: a1's retry would run beside it"
    env.pop.ack(GROUP, TOPIC, a2.receipt_handle)
    assert bodies(receive(env)) == ["a1"]


def test_messages_acked_inside_a_range_are_not_handed_out_again(env):
    send(env, 0, "a1", "a2", "a3")
    a1, a2, a3 = receive(env)
    env.pop.ack(GROUP, TOPIC, a2.receipt_handle)
    env.clock.now_ms += 10 * SECOND
    assert bodies(receive(env)) == ["a1", "a3"]


def test_new_messages_follow_the_retried_ones_in_one_batch(env):
    send(env, 0, "a1")
    receive(env)
    send(env, 0, "a2")
    env.clock.now_ms += 10 * SECOND
    assert bodies(receive(env)) == ["a1", "a2"]


def test_other_queues_proceed_while_one_is_blocked(env):
    send(env, 0, "a1", "a2")
    send(env, 1, "b1")
    receive(env, batch=1, queue=0)
    send(env, 1, "b2")
    got = receive(env)
    assert bodies(got) == ["b1", "b2"]


def test_a_receive_naming_a_queue_takes_that_queue_alone(env):
    send(env, 0, "a1")
    send(env, 1, "b1")
    assert bodies(receive(env, queue=1)) == ["b1"]


def test_after_its_last_attempt_a_message_goes_to_the_dead_letter_topic_and_the_next_proceeds(env):
    send(env, 0, "a1", "a2")
    attempts = []
    for _ in range(3):  # retry_max_times 2: three deliveries of a1 (with a2 behind it)
        got = receive(env)
        attempts.append([(d.message.body.decode(), d.attempt) for d in got])
        env.clock.now_ms += 10 * SECOND
    last = receive(env)
    assert attempts == [[("a1", 1), ("a2", 1)], [("a1", 2), ("a2", 2)], [("a1", 3), ("a2", 3)]]
    assert bodies(last) == [], "a2 has had its three deliveries too"
    dead = env.store.read_queue(DLQ_PREFIX + GROUP, 0, 0, 10).messages
    assert [m.body for m in dead] == [b"a1", b"a2"]


def test_a_message_forwarded_to_the_dead_letter_topic_frees_the_queue(env):
    send(env, 0, "a1", "a2")
    a1 = receive(env, batch=1)[0]
    env.pop.forward_to_dead_letter(GROUP, TOPIC, a1.receipt_handle)
    assert bodies(receive(env)) == ["a2"]


def test_a_group_not_fifo_is_handed_later_messages_beside_an_in_flight_one(env):
    send(env, 0, "a1", "a2")
    receive(env, batch=1, group="plain")
    assert bodies(receive(env, group="plain")) == ["a2"]


def test_a_group_made_fifo_later_waits_for_what_it_already_holds(env):
    env.groups.update("later", fifo=False)
    send(env, 0, "a1", "a2")
    receive(env, batch=1, group="later")
    env.groups.update("later", fifo=True)
    assert receive(env, group="later") == []


def test_a_receive_retried_with_its_attempt_id_gets_the_same_range_with_the_same_attempts(env):
    send(env, 0, "a1", "a2")
    first = receive(env, attempt_id="r1")
    send(env, 0, "a3")
    again = receive(env, attempt_id="r1")  # the answer to r1 was lost: the client asks again
    assert [(d.message.body, d.attempt) for d in again] == [(b"a1", 1), (b"a2", 1), (b"a3", 1)]
    assert receive(env, attempt_id="r2") == []


def test_the_first_answer_of_a_retried_receive_is_superseded(env):
    send(env, 0, "a1")
    first = receive(env, attempt_id="r1")
    again = receive(env, attempt_id="r1")
    env.pop.ack(GROUP, TOPIC, again[0].receipt_handle)
    with pytest.raises(InvalidReceiptHandle):
        env.pop.ack(GROUP, TOPIC, first[0].receipt_handle)


def test_a_groups_retry_max_times_bounds_its_deliveries_also_when_not_fifo(env):
    env.groups.update("plain-retries", fifo=False, retry_max_times=1)
    send(env, 0, "a1")
    attempts = []
    for _ in range(3):
        attempts += [d.attempt for d in receive(env, group="plain-retries")]
        env.clock.now_ms += 10 * SECOND
    assert attempts == [1, 2]
    assert [m.body for m in env.store.read_queue(DLQ_PREFIX + "plain-retries", 0, 0, 10).messages] == [b"a1"]
