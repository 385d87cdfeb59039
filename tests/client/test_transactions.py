"""Multi-message, multi-sender transactions over the native service."""

from __future__ import annotations

import pytest

from tests.client.helpers import bodies, bodies_batch, read_all
from txmq.broker import errors


def test_prepared_messages_are_invisible_until_commit(client, topic, unique):
    prep = client.prepare_arrow("", bodies_batch(100), topic=topic, producer_group=f"g_{unique}", sender="s1")
    assert prep.count == 100 and prep.transaction_id
    assert len(read_all(client, topic)) == 0
    end = client.end_transaction(prep.transaction_id, "COMMIT")
    assert (end.state, end.newly_ended, end.committed_count) == ("COMMITTED", True, 100)
    table = read_all(client, topic)
    assert len(table) == 100
    assert set(table.column("transactionId").to_pylist()) == {prep.transaction_id}


def test_rollback_makes_nothing_visible(client, topic, unique):
    prep = client.prepare_arrow("", bodies_batch(5), topic=topic, producer_group=f"g_{unique}", sender="s1")
    assert client.end_transaction(prep.transaction_id, "ROLLBACK").state == "ROLLED_BACK"
    assert len(read_all(client, topic)) == 0


def test_many_senders_add_halves_to_one_transaction_id(client, topic, unique):
    tx = f"tx-{unique}"
    for sender in ("p0", "p1", "p2"):
        client.prepare_arrow(tx, bodies_batch(3, prefix=sender), topic=topic, producer_group=f"g_{unique}",
                             sender=sender)
    info = client.get_transaction(tx)
    assert (info.state, info.half_count, set(info.senders)) == ("PENDING", 9, {"p0", "p1", "p2"})
    client.end_transaction(tx, "COMMIT")
    assert len(read_all(client, topic)) == 9


def test_include_senders_commits_only_the_listed_senders(client, topic, unique):
    tx = f"tx-{unique}"
    client.prepare_arrow(tx, bodies_batch(2, prefix="good"), topic=topic, producer_group="g", sender="attempt-1")
    client.prepare_arrow(tx, bodies_batch(2, prefix="stale"), topic=topic, producer_group="g", sender="attempt-0")
    end = client.end_transaction(tx, "COMMIT", include_senders=["attempt-1"])
    assert end.committed_count == 2
    assert bodies(read_all(client, topic)) == [b"good0", b"good1"]


def test_repeated_commit_is_acknowledged_without_writing_again(client, topic, unique):
    prep = client.prepare_arrow("", bodies_batch(3), topic=topic, producer_group="g", sender="s")
    client.end_transaction(prep.transaction_id, "COMMIT")
    again = client.end_transaction(prep.transaction_id, "COMMIT")
    assert (again.state, again.newly_ended) == ("COMMITTED", False)
    assert len(read_all(client, topic)) == 3


def test_rollback_after_commit_is_a_conflict(client, topic):
    prep = client.prepare_arrow("", bodies_batch(1), topic=topic, producer_group="g", sender="s")
    client.end_transaction(prep.transaction_id, "COMMIT")
    with pytest.raises(errors.TransactionConflict):
        client.end_transaction(prep.transaction_id, "ROLLBACK")


def test_prepare_into_a_committed_transaction_raises_already_ended(client, topic):
    prep = client.prepare_arrow("", bodies_batch(1), topic=topic, producer_group="g", sender="s")
    client.end_transaction(prep.transaction_id, "COMMIT")
    with pytest.raises(errors.TransactionAlreadyEnded) as info:
        client.prepare_arrow(prep.transaction_id, bodies_batch(1), topic=topic, producer_group="g", sender="s2")
    assert info.value.state == "COMMITTED"


def test_end_of_unknown_transaction_raises_unknown_transaction(client, unique):
    with pytest.raises(errors.UnknownTransaction):
        client.end_transaction(f"never-{unique}", "COMMIT")
    with pytest.raises(errors.UnknownTransaction):
        client.get_transaction(f"never-{unique}")


def test_bad_resolution_is_refused_client_side(client):
    with pytest.raises(errors.BadRequest, match="COMMIT, ROLLBACK or IN_PROGRESS, not .MAYBE."):
        client.end_transaction("x", "MAYBE")


def test_list_transactions_shows_pending_ones_of_a_topic(client, topic):
    prep = client.prepare_arrow("", bodies_batch(2), topic=topic, producer_group="g", sender="s")
    listed = client.list_transactions(topic=topic)
    assert [t.transaction_id for t in listed] == [prep.transaction_id]
    assert listed[0].topics == (topic,)
    client.end_transaction(prep.transaction_id, "ROLLBACK")
    assert client.list_transactions(topic=topic) == []


def test_resume_of_a_committed_transaction_raises_already_ended(client, topic):
    prep = client.prepare_arrow("", bodies_batch(1), topic=topic, producer_group="g", sender="s")
    client.end_transaction(prep.transaction_id, "COMMIT")
    with pytest.raises(errors.TransactionAlreadyEnded):
        client.resume_transaction(prep.transaction_id)


def test_protobuf_prepare_form_returns_ids(client, topic):
    from txmq.broker.client import Message

    prep = client.prepare("", [Message(topic=topic, body=b"one")], producer_group="g", sender="s")
    assert prep.count == 1 and len(prep.message_ids) == 1
    client.end_transaction(prep.transaction_id, "COMMIT")
    assert bodies(read_all(client, topic)) == [b"one"]


def test_prepare_ids_are_the_ids_readers_see_after_commit(client, topic):
    from txmq.broker.client import Message

    prep = client.prepare("", [Message(topic=topic, body=b"a"), Message(topic=topic, body=b"b", message_id="mine")],
                          producer_group="g", sender="s")
    assert prep.message_ids[1] == "mine"
    client.end_transaction(prep.transaction_id, "COMMIT")
    assert sorted(read_all(client, topic).column("messageId").to_pylist()) == sorted(prep.message_ids)
    assert client.get_message(prep.message_ids[0]).body == b"a"


def test_arrow_prepare_ids_asked_for_are_the_ids_readers_see_after_commit(client, topic):
    prep = client.prepare_arrow("", bodies_batch(5), topic=topic, producer_group="g", sender="s",
                                return_message_ids=True)
    assert len(set(prep.message_ids)) == 5
    client.end_transaction(prep.transaction_id, "COMMIT")
    assert sorted(read_all(client, topic).column("messageId").to_pylist()) == sorted(prep.message_ids)


def test_arrow_prepare_without_ids_commits_messages_named_by_their_offset_ids(client, topic):
    """Halves nobody asked ids for carry none (as plain sends' rows): their finals are named by
    the broker's offset ids, distinct and each fetching its own message."""
    prep = client.prepare_arrow("", bodies_batch(5), topic=topic, producer_group="g", sender="s")
    assert prep.message_ids == []
    client.end_transaction(prep.transaction_id, "COMMIT")
    table = read_all(client, topic)
    ids = table.column("messageId").to_pylist()
    assert len(set(ids)) == 5 and all(ids)
    assert [client.get_message(i).body for i in ids] == table.column("body").to_pylist()
