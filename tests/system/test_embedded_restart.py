"""An embedded broker comes back on its port after a crash: the port is its own, drawn below the
kernel's ephemeral range, where no outgoing connection made meanwhile can take it."""

from __future__ import annotations

from txmq.broker.client import Message, NativeClient
from txmq.broker.embedded import EmbeddedBroker
from txmq.broker.ports import free_port_range


def test_an_embedded_broker_listens_below_the_ephemeral_range(tmp_path):
    with EmbeddedBroker(tmp_path / "data", flush="async") as broker:
        low, high = free_port_range()
        assert low <= broker.port < high


def test_a_killed_embedded_broker_restarts_on_its_port_with_its_messages(tmp_path):
    with EmbeddedBroker(tmp_path / "data", flush="async") as broker:
        endpoint = broker.endpoint
        with NativeClient(endpoint) as client:
            client.create_topic("t", 1)
            [message_id] = client.send([Message(topic="t", body=b"before the crash")]).message_ids
        broker.kill()
        broker.restart()
        assert broker.endpoint == endpoint
        with NativeClient(endpoint) as client:
            assert client.get_message(message_id).body == b"before the crash"
