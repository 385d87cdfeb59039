"""Timer (DELAY) messages over the RocketMQ 5 protocol: delivered in their topic at their time, never
before it, in time order, once, across restarts and kill -9 (real broker processes)."""

from __future__ import annotations

import random
import shutil
import time

from tests.server.wire import Wire
from tests.support.broker_process import BrokerProcess
from tests.timer.conftest import ms, name, now_ms, send_delayed, wait_for
from txmq.broker.protocol import rocketmq_v2_pb2 as pb


def test_a_delay_message_is_invisible_until_its_delivery_time(wire):
    topic = name("delay")
    send_delayed(wire, topic, [now_ms() + 3000])
    time.sleep(1.0)
    assert wire.pull_all(topic) == []


def test_a_delay_message_is_delivered_at_its_time_never_early_and_within_a_second(wire):
    topic = name("delay")
    at = now_ms() + 1500
    [message_id] = send_delayed(wire, topic, [at], bodies=[b"due"])
    [got] = wait_for(wire, topic, 1, 10)
    stored = ms(got.system_properties.store_timestamp)
    assert at <= stored < at + 1000
    assert got.body == b"due" and got.system_properties.message_id == message_id


def test_a_delivered_delay_message_keeps_its_type_and_delivery_timestamp(wire):
    topic = name("delay")
    at = now_ms() + 500
    send_delayed(wire, topic, [at])
    [got] = wait_for(wire, topic, 1, 10)
    assert got.system_properties.message_type == pb.DELAY
    assert ms(got.system_properties.delivery_timestamp) == at


def test_a_delivery_time_already_past_is_delivered_at_once(wire):
    topic = name("past")
    send_delayed(wire, topic, [now_ms() - 60_000])
    assert len(wire.pull_all(topic)) == 1


def test_delay_messages_are_delivered_in_time_order_across_queues(wire):
    topic = name("order")
    base = now_ms() + 1000
    times = [base + random.randrange(0, 2500) for _ in range(60)]
    bodies = [str(t).encode() for t in times]
    send_delayed(wire, topic, times, bodies=bodies)
    got = wait_for(wire, topic, 60, 15)
    assert len(got) == 60
    assert len({m.system_properties.queue_id for m in got}) > 1
    by_time = sorted(got, key=lambda m: (int(m.body), ms(m.system_properties.store_timestamp)))
    stored = [ms(m.system_properties.store_timestamp) for m in by_time]
    assert stored == sorted(stored)
    assert all(ms(m.system_properties.store_timestamp) >= int(m.body) for m in got)


def test_a_delivery_time_past_the_configured_horizon_is_an_illegal_delivery_time(tmp_path):
    with BrokerProcess(tmp_path / "data", flush="async", extra_args=["--timer-max-delay", "10s"]) as proc:
        w = Wire(proc.endpoint)
        req = pb.SendMessageRequest()
        m = req.messages.add(body=b"x", topic=pb.Resource(name="far"))
        m.system_properties.message_id = "F00D"
        m.system_properties.message_type = pb.DELAY
        m.system_properties.delivery_timestamp.FromMilliseconds(now_ms() + 20_000)
        r = w.call("SendMessage", req)
        assert r.status.code == pb.ILLEGAL_DELIVERY_TIME
        assert send_delayed(w, "far", [now_ms() + 5_000])  # within the horizon: accepted
        w.close()


def test_a_scheduled_message_is_delivered_after_a_clean_restart(broker):
    w = Wire(broker.endpoint)
    topic = name("restart")
    send_delayed(w, topic, [now_ms() + 2500])
    broker.stop()
    broker.restart()
    w = Wire(broker.endpoint)
    assert len(wait_for(w, topic, 1, 10)) == 1
    time.sleep(1.0)
    assert len(w.pull_all(topic)) == 1


def test_a_message_delivered_before_a_kill_is_not_delivered_again(broker):
    w = Wire(broker.endpoint)
    topic = name("kill-after")
    send_delayed(w, topic, [now_ms() + 300])
    assert len(wait_for(w, topic, 1, 10)) == 1
    broker.kill()
    broker.restart()
    w = Wire(broker.endpoint)
    time.sleep(1.5)
    assert len(w.pull_all(topic)) == 1


def test_kill9_at_random_between_scheduling_and_delivery_delivers_each_exactly_once_never_early(broker):
    rng = random.Random(29)
    topic = name("kill")
    w = Wire(broker.endpoint)
    sent: dict[str, int] = {}
    for _ in range(4):  # schedule some, crash at a random moment while others fall due, restart
        times = [now_ms() + rng.randrange(200, 3000) for _ in range(50)]
        sent.update(zip(send_delayed(w, topic, times), times))
        time.sleep(rng.uniform(0.0, 2.0))
        broker.kill()
        broker.restart()
        w = Wire(broker.endpoint)
    got = wait_for(w, topic, len(sent), 20)
    time.sleep(1.0)
    got = w.pull_all(topic)
    ids = [m.system_properties.message_id for m in got]
    assert sorted(ids) == sorted(sent)
    for m in got:
        assert ms(m.system_properties.store_timestamp) >= sent[m.system_properties.message_id]


def test_the_timer_is_rebuilt_from_the_commitlog_when_its_files_are_lost(broker):
    w = Wire(broker.endpoint)
    topic = name("rebuild")
    delivered = send_delayed(w, topic, [now_ms() + 200])
    assert len(wait_for(w, topic, 1, 10)) == 1
    pending = send_delayed(w, topic, [now_ms() + 2000])
    broker.kill()
    shutil.rmtree(broker.data_dir / "timer")
    broker.restart()
    w = Wire(broker.endpoint)
    got = wait_for(w, topic, 2, 10)
    time.sleep(1.0)
    got = w.pull_all(topic)
    assert sorted(m.system_properties.message_id for m in got) == sorted(delivered + pending)


def recall(wire: Wire, topic: str, handle: str) -> pb.RecallMessageResponse:
    return wire.call("RecallMessage", pb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle=handle))


def send_with_handle(wire: Wire, topic: str, at: int) -> pb.SendResultEntry:
    req = pb.SendMessageRequest()
    m = req.messages.add(body=b"recall me", topic=pb.Resource(name=topic))
    m.system_properties.message_id = f"RC{now_ms()}"
    m.system_properties.message_type = pb.DELAY
    m.system_properties.delivery_timestamp.FromMilliseconds(at)
    r = wire.call("SendMessage", req)
    assert r.status.code == pb.OK and r.entries[0].recall_handle
    return r.entries[0]


def test_a_recalled_delay_message_is_never_delivered_even_after_a_kill(broker):
    w = Wire(broker.endpoint)
    topic = name("recall")
    entry = send_with_handle(w, topic, now_ms() + 1500)
    r = recall(w, topic, entry.recall_handle)
    assert r.status.code == pb.OK and r.message_id == entry.message_id
    broker.kill()
    broker.restart()
    w = Wire(broker.endpoint)
    time.sleep(2.5)
    assert w.pull_all(topic) == []


def test_recalling_a_delivered_delay_message_is_message_not_found(wire):
    topic = name("recall-late")
    entry = send_with_handle(wire, topic, now_ms() + 1_000)  # a second ahead: a loaded host must not send it past its time
    assert len(wait_for(wire, topic, 1, 10)) == 1
    assert recall(wire, topic, entry.recall_handle).status.code == pb.MESSAGE_NOT_FOUND


def test_a_recall_handle_used_on_another_topic_is_a_bad_request(wire):
    entry = send_with_handle(wire, name("recall-a"), now_ms() + 60_000)
    assert recall(wire, name("recall-b"), entry.recall_handle).status.code == pb.BAD_REQUEST
