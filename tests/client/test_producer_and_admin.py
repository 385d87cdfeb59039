"""Producer and Admin: the thin conveniences over NativeClient."""

from __future__ import annotations

from tests.client.helpers import bodies, read_all
from txmq.broker.client import Admin, Message, Producer


def test_producer_send_returns_an_id_that_get_message_finds(client, topic):
    producer = Producer(client, topic=topic)
    msg_id = producer.send(b"one", tag="t", keys=["k"], properties={"p": "v"})
    got = client.get_message(msg_id)
    assert (got.body, got.tag, got.keys, got.properties) == (b"one", "t", ("k",), {"p": "v"})


def test_producer_send_batch_accepts_messages_dicts_and_bodies(client, topic):
    summary = Producer(client, topic=topic).send_batch(
        [Message(topic=None, body=b"a"), {"body": b"b", "tag": "x"}, b"c"])
    assert summary.count == 3
    assert bodies(read_all(client, topic)) == [b"a", b"b", b"c"]


def test_producer_from_endpoint_string_owns_its_connection(shared_broker, unique):
    with Producer(shared_broker.endpoint, topic=f"own_{unique}") as producer:
        assert producer.send(b"x")


def test_admin_commits_and_lists_pending_transactions(client, topic):
    admin = Admin(client)
    tx = client.prepare("", [Message(topic=topic, body=b"held")], producer_group="g", sender="s").transaction_id
    assert [t.transaction_id for t in admin.list_transactions(topic=topic)] == [tx]
    assert admin.commit_transaction(tx).state == "COMMITTED"
    assert admin.get_transaction(tx).state == "COMMITTED"
    assert bodies(read_all(client, topic)) == [b"held"]


def test_admin_topic_lifecycle_and_stats(client, unique):
    admin = Admin(client)
    assert admin.create_topic(f"adm_{unique}", 2).queue_count == 2
    assert admin.describe_topic(f"adm_{unique}").name == f"adm_{unique}"
    admin.delete_topic(f"adm_{unique}")
    assert {"store", "transactions", "rpc"} <= set(admin.stats())
