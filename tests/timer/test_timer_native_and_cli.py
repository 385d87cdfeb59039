"""Timer messages from the native client (deliver_at_ms, RocketMQ 4's DELAY level) and the CLI
(`txmq send --deliver-at / --delay`), checked on the RocketMQ 5 wire of a real broker process."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from tests.cli.conftest import Cli
from tests.timer.conftest import ms, name, now_ms, wait_for
from txmq.broker.client import Message
from txmq.broker.client.native_client import NativeClient
from txmq.broker.errors import IllegalDeliveryTime


@pytest.fixture
def native(broker):
    with NativeClient(broker.endpoint) as client:
        yield client


def test_a_native_send_with_deliver_at_is_delivered_at_that_time(native, wire):
    topic = name("native")
    at = now_ms() + 1500
    native.send([Message(topic=topic, body=b"later", deliver_at_ms=at)])
    assert wire.pull_all(topic) == []
    [got] = wait_for(wire, topic, 1, 10)
    assert at <= ms(got.system_properties.store_timestamp) < at + 1000 and got.body == b"later"


def test_an_arrow_send_with_deliver_at_is_delivered_at_that_time(native, wire):
    topic = name("arrow")
    at = now_ms() + 1000
    native.send_arrow([Message(topic=topic, body=b"x", deliver_at_ms=at), Message(topic=topic, body=b"now")])
    assert [m.body for m in wire.pull_all(topic)] == [b"now"]
    got = wait_for(wire, topic, 2, 10)
    later = [m for m in got if m.body == b"x"]
    assert len(later) == 1 and ms(later[0].system_properties.store_timestamp) >= at


def test_a_rocketmq4_delay_level_waits_its_levels_time(native, wire):
    topic = name("level")
    sent = now_ms()
    native.send([Message(topic=topic, body=b"lvl2", properties={"DELAY": "2"})])  # level 2 is 5 s
    time.sleep(3.0)
    assert wire.pull_all(topic) == []
    [got] = wait_for(wire, topic, 1, 10)
    assert ms(got.system_properties.store_timestamp) >= sent + 5000


def test_a_delay_level_outside_1_to_18_is_an_illegal_delivery_time(native):
    with pytest.raises(IllegalDeliveryTime, match="1..18"):
        native.send([Message(topic=name("level"), body=b"x", properties={"DELAY": "19"})])


def test_a_native_transactional_message_with_a_delivery_time_is_delivered_at_it_once_committed(native, wire):
    topic = name("tx")
    at = now_ms() + 1500
    tx = native.prepare("", [Message(topic=topic, body=b"later", deliver_at_ms=at),
                             Message(topic=topic, body=b"now")], producer_group="pg").transaction_id
    native.end_transaction(tx, "COMMIT", producer_group="pg")
    assert [m.body for m in wire.pull_all(topic)] == [b"now"]
    got = wait_for(wire, topic, 2, 10)
    time.sleep(0.5)
    got = wire.pull_all(topic)
    [delayed] = [m for m in got if m.body == b"later"]
    assert len(got) == 2 and ms(delayed.system_properties.store_timestamp) >= at


def test_a_native_transactional_message_due_past_the_horizon_is_refused(native):
    with pytest.raises(IllegalDeliveryTime, match="timer_max_delay"):
        native.prepare("", [Message(topic=name("tx"), body=b"x", deliver_at_ms=now_ms() + 4 * 24 * 3600 * 1000)],
                       producer_group="pg")


def test_cli_send_with_delay_is_delivered_after_it(broker, wire):
    topic = name("cli")
    sent = now_ms()
    out = Cli(broker.endpoint).run("send", topic, "hello", "--delay", "1500ms")
    assert out.returncode == 0, out.stderr
    [got] = wait_for(wire, topic, 1, 10)
    assert ms(got.system_properties.store_timestamp) >= sent + 1500


def test_cli_send_with_deliver_at_an_iso_time_is_delivered_then(broker, wire):
    topic = name("cli")
    at = (now_ms() // 1000 + 2) * 1000
    iso = dt.datetime.fromtimestamp(at / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")
    out = Cli(broker.endpoint).run("send", topic, "hello", "--deliver-at", iso)
    assert out.returncode == 0, out.stderr
    [got] = wait_for(wire, topic, 1, 10)
    assert ms(got.system_properties.store_timestamp) >= at


def test_cli_send_of_a_transaction_with_a_delay_is_delivered_after_it(broker, wire):
    topic = name("cli")
    sent = now_ms()
    out = Cli(broker.endpoint).run("send", topic, "tx", "--transaction", "--delay", "1500ms")
    assert out.returncode == 0, out.stderr
    [got] = wait_for(wire, topic, 1, 10)
    assert ms(got.system_properties.store_timestamp) >= sent + 1500
