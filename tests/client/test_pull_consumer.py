"""PullConsumer: committed messages as Arrow batches, offsets tracked, group commits."""

from __future__ import annotations

from tests.client.helpers import bodies_batch
from txmq.broker.client import PullConsumer


def _bodies(batches) -> list[bytes]:
    return sorted(b for batch in batches for b in batch.column("body").to_pylist())


def test_poll_returns_committed_messages_only(client, topic):
    client.send_arrow(bodies_batch(3, prefix="n"), topic=topic)
    client.prepare_arrow("", bodies_batch(2, prefix="h"), topic=topic, producer_group="g", sender="s")
    consumer = PullConsumer(client, [topic])
    assert _bodies(consumer.poll(timeout_ms=0)) == [b"n0", b"n1", b"n2"]


def test_poll_advances_past_what_it_returned(client, topic):
    client.send_arrow(bodies_batch(3), topic=topic)
    consumer = PullConsumer(client, [topic])
    consumer.poll(timeout_ms=0)
    assert consumer.poll(timeout_ms=100) == []
    client.send_arrow(bodies_batch(1, prefix="new"), topic=topic)
    assert _bodies(consumer.poll(timeout_ms=5000)) == [b"new0"]


def test_latest_start_skips_existing_messages(client, topic):
    client.send_arrow(bodies_batch(3), topic=topic)
    consumer = PullConsumer(client, [topic], start="latest")
    assert consumer.poll(timeout_ms=0) == []


def test_group_commit_resumes_a_new_consumer_and_reports_lag(client, topic, unique):
    group = f"cg_{unique}"
    client.send_arrow(bodies_batch(4), topic=topic)
    first = PullConsumer(client, [topic], group=group)
    assert len(_bodies(first.poll(timeout_ms=0))) == 4
    first.commit()
    client.send_arrow(bodies_batch(2, prefix="later"), topic=topic)
    lag = client.group_lag(group)
    assert sum(e.lag for e in lag[topic].values()) == 2
    second = PullConsumer(client, [topic], group=group)
    assert _bodies(second.poll(timeout_ms=0)) == [b"later0", b"later1"]


def test_group_lag_of_unknown_group_raises(client, unique):
    import pytest

    from txmq.broker import errors

    with pytest.raises(errors.ConsumerGroupNotFound):
        client.group_lag(f"nobody_{unique}")


def _join(*consumers) -> list:
    """Poll each member until all see the same members (heartbeats every ttl/3): what they read meanwhile."""
    import time

    got = []
    for _ in range(50):
        for c in consumers:
            got += c.poll(timeout_ms=0)
        if len({tuple(c.members) for c in consumers}) == 1 and len(consumers[0].members) == len(consumers):
            return got
        time.sleep(0.12)
    raise AssertionError("the members never agreed")


def test_members_of_a_group_divide_the_queues_and_read_each_message_once(client, topic, unique):
    group = f"split_{unique}"
    a = PullConsumer(client, [topic], group=group, allocation="average", member_id="a", heartbeat_ttl_ms=300)
    b = PullConsumer(client, [topic], group=group, allocation="average", member_id="b", heartbeat_ttl_ms=300)
    _join(a, b)
    assert sorted(a.assigned[topic]) == [0, 1] and sorted(b.assigned[topic]) == [2, 3]
    client.send_arrow(bodies_batch(40), topic=topic)
    got = a.poll(timeout_ms=0) + b.poll(timeout_ms=0)
    assert sorted(_bodies(got)) == sorted(f"m{i}".encode() for i in range(40))
    a.close()
    b.close()


def test_list_group_members_names_each_member_its_address_client_and_held_queues(client, topic, unique):
    import time

    group = f"members_{unique}"
    a = PullConsumer(client, [topic], group=group, allocation="average", member_id="a", heartbeat_ttl_ms=3000)
    b = PullConsumer(client, [topic], group=group, allocation="average", member_id="b", heartbeat_ttl_ms=3000)
    _join(a, b)
    members = {m.client_id: m for m in client.list_group_members(group)}
    assert sorted(members) == ["a", "b"]
    assert members["a"].queues == ((topic, "", 0), (topic, "", 1))
    assert members["b"].queues == ((topic, "", 2), (topic, "", 3))
    for m in members.values():
        assert m.address.startswith("127.0.0.1:") and "PullConsumer" in m.client and not m.pop
        assert 0 <= time.time() * 1000 - m.last_heartbeat_ms < 10_000
    a.close()  # leaves at once
    assert [m.client_id for m in client.list_group_members(group)] == ["b"]
    b.close()


def test_a_member_leaving_hands_its_queues_over_from_their_committed_offsets(client, topic, unique):
    import time

    group = f"handover_{unique}"
    a = PullConsumer(client, [topic], group=group, allocation="average", member_id="a", heartbeat_ttl_ms=300)
    b = PullConsumer(client, [topic], group=group, allocation="average", member_id="b", heartbeat_ttl_ms=300)
    _join(a, b)
    client.send_arrow(bodies_batch(20, prefix="x"), topic=topic)
    seen = _bodies(a.poll(timeout_ms=0) + b.poll(timeout_ms=0))
    a.commit()
    a.close()  # leaves the group at once
    client.send_arrow(bodies_batch(20, prefix="y"), topic=topic)
    time.sleep(0.12)
    seen += _bodies(b.poll(timeout_ms=0))
    assert sorted(b.assigned[topic]) == [0, 1, 2, 3] and b.members == ["b"]
    expected = [f"x{i}".encode() for i in range(20)] + [f"y{i}".encode() for i in range(20)]
    assert sorted(seen) == sorted(expected)
    b.close()


def test_allocation_needs_a_group_and_a_known_strategy(client, topic):
    import pytest

    with pytest.raises(ValueError, match="consumer group"):
        PullConsumer(client, [topic], allocation="average")
    with pytest.raises(ValueError, match="unknown allocation"):
        PullConsumer(client, [topic], group="g", allocation="round_robin")
