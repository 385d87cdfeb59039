"""RocketMQ 5 RPCs over the wire: routes, sends, transactions, pop consumption, offsets."""

from __future__ import annotations

import time
import uuid

import pytest

from txmq.broker.protocol import rocketmq_v2_pb2 as pb


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_route_announces_four_read_write_queues_accepting_normal_fifo_transaction(wire):
    r = wire.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=name("route"))))
    assert r.status.code == pb.OK
    assert [q.id for q in r.message_queues] == [0, 1, 2, 3]
    q = r.message_queues[0]
    assert q.permission == pb.READ_WRITE
    assert set(q.accept_message_types) >= {pb.NORMAL, pb.FIFO, pb.TRANSACTION}
    assert q.broker.endpoints.scheme == pb.IPv4 and q.broker.endpoints.addresses[0].port > 0


def test_send_returns_one_entry_per_message_echoing_the_client_id(wire):
    topic = name("send")
    r = wire.send(topic, [b"a", b"b", b"c"])
    assert r.status.code == pb.OK and len(r.entries) == 3
    assert all(e.status.code == pb.OK and e.message_id for e in r.entries)


def test_fifo_messages_of_one_group_land_on_one_queue_in_order(wire):
    topic = name("fifo")
    for i in range(6):
        assert wire.send(topic, [f"g1-{i}".encode()], mtype=pb.FIFO, group="g1").status.code == pb.OK
    msgs = wire.pull_all(topic)
    assert {m.system_properties.queue_id for m in msgs} == {msgs[0].system_properties.queue_id}
    assert [m.body for m in msgs] == [f"g1-{i}".encode() for i in range(6)]
    assert msgs[0].system_properties.message_group == "g1"


def test_transaction_is_invisible_until_commit_and_rollback_never_shows(wire):
    topic = name("tx")
    sent = wire.send(topic, [b"one"], mtype=pb.TRANSACTION)
    tx_id = sent.entries[0].transaction_id
    assert sent.status.code == pb.OK and tx_id
    assert wire.pull_all(topic) == []
    rolled = wire.send(topic, [b"never"], mtype=pb.TRANSACTION).entries[0].transaction_id
    assert wire.end(topic, rolled, pb.ROLLBACK).status.code == pb.OK
    assert wire.end(topic, tx_id, pb.COMMIT).status.code == pb.OK
    assert [m.body for m in wire.pull_all(topic)] == [b"one"]


def test_repeated_commit_is_ok_and_writes_nothing_more(wire):
    topic = name("tx-repeat")
    tx_id = wire.send(topic, [b"x"], mtype=pb.TRANSACTION).entries[0].transaction_id
    assert wire.end(topic, tx_id).status.code == pb.OK
    again = wire.end(topic, tx_id)
    assert again.status.code == pb.OK and "already" in again.status.message
    assert len(wire.pull_all(topic)) == 1


def test_receive_ack_and_redelivery_with_growing_attempt(wire):
    topic, group = name("pop"), name("g")
    wire.send(topic, [b"p1"])
    status, msgs = wire.receive(topic, group, invisible_s=10)  # the least a receive may ask for
    assert status.code == pb.OK and len(msgs) == 1
    sp = msgs[0].system_properties
    assert sp.delivery_attempt == 1 and sp.receipt_handle and sp.body_encoding == pb.IDENTITY
    assert sp.HasField("store_timestamp") and sp.HasField("queue_offset")
    shorten = pb.ChangeInvisibleDurationRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                                receipt_handle=sp.receipt_handle, message_id=sp.message_id)
    shorten.invisible_duration.seconds = 1
    assert wire.call("ChangeInvisibleDuration", shorten).status.code == pb.OK
    # not acked: invisible for 1 s, then delivered again with attempt 2
    status, none = wire.receive(topic, group)
    assert none == [] and status.code == pb.MESSAGE_NOT_FOUND
    status, again = wire.receive(topic, group, poll_s=3)
    assert [m.body for m in again] == [b"p1"] and again[0].system_properties.delivery_attempt == 2
    ack = pb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic))
    ack.entries.add(message_id=again[0].system_properties.message_id,
                    receipt_handle=again[0].system_properties.receipt_handle)
    assert wire.call("AckMessage", ack).status.code == pb.OK
    # the first (superseded) handle is refused
    ack.entries[0].receipt_handle = sp.receipt_handle
    assert wire.call("AckMessage", ack).status.code == pb.INVALID_RECEIPT_HANDLE


def test_change_invisible_duration_returns_a_new_handle_and_supersedes_the_old(wire):
    topic, group = name("civ"), name("g")
    wire.send(topic, [b"c1"])
    _, msgs = wire.receive(topic, group, invisible_s=30)
    old = msgs[0].system_properties.receipt_handle
    req = pb.ChangeInvisibleDurationRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                            receipt_handle=old, message_id=msgs[0].system_properties.message_id)
    req.invisible_duration.seconds = 0
    r = wire.call("ChangeInvisibleDuration", req)
    assert r.status.code == pb.OK and r.receipt_handle and r.receipt_handle != old
    _, again = wire.receive(topic, group, poll_s=2)
    assert [m.body for m in again] == [b"c1"]
    assert wire.call("ChangeInvisibleDuration", req).status.code == pb.INVALID_RECEIPT_HANDLE


def test_long_poll_returns_a_message_sent_while_waiting(wire, module_broker):
    import threading
    import time
    topic, group = name("lp"), name("g")
    wire.queue_count(topic)
    threading.Timer(0.5, lambda: wire.send(topic, [b"late"])).start()
    t0 = time.monotonic()
    status, msgs = wire.receive(topic, group, poll_s=10)
    assert [m.body for m in msgs] == [b"late"] and time.monotonic() - t0 < 5


def test_offsets_update_get_and_query(wire):
    topic, group = name("off"), name("g")
    wire.send(topic, [b"a"], mtype=pb.FIFO, group="k")
    q = [m for m in wire.pull_all(topic)][0].system_properties.queue_id
    mq = pb.MessageQueue(topic=pb.Resource(name=topic), id=q)
    get = wire.call("GetOffset", pb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=mq))
    assert get.status.code == pb.OFFSET_NOT_FOUND
    upd = wire.call("UpdateOffset", pb.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=mq, offset=1))
    assert upd.status.code == pb.OK
    assert wire.call("GetOffset", pb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=mq)).offset == 1
    end = wire.call("QueryOffset", pb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.END))
    assert end.status.code == pb.OK and end.offset == 1
    beyond = wire.call("UpdateOffset", pb.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=mq,
                                                              offset=99))
    assert beyond.status.code == pb.ILLEGAL_OFFSET


def test_heartbeat_assignment_and_termination_answer_ok(wire):
    topic, group = name("hb"), name("g")
    hb = pb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER)
    hb.group.name = group
    assert wire.call("Heartbeat", hb).status.code == pb.OK
    qa = wire.call("QueryAssignment", pb.QueryAssignmentRequest(topic=pb.Resource(name=topic),
                                                                group=pb.Resource(name=group)))
    assert qa.status.code == pb.OK and [a.message_queue.id for a in qa.assignments] == [-1]
    assert qa.assignments[0].message_queue.permission == pb.READ_WRITE
    assert wire.call("NotifyClientTermination", pb.NotifyClientTerminationRequest()).status.code == pb.OK


def test_forward_to_dead_letter_queue_moves_the_message_and_retires_it(wire):
    topic, group = name("dlq"), name("g")
    wire.send(topic, [b"poison"])
    _, msgs = wire.receive(topic, group)
    handle = msgs[0].system_properties.receipt_handle
    req = pb.ForwardMessageToDeadLetterQueueRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                                    receipt_handle=handle, delivery_attempt=1,
                                                    max_delivery_attempts=1)
    assert wire.call("ForwardMessageToDeadLetterQueue", req).status.code == pb.OK
    assert [m.body for m in wire.pull_all(f"%DLQ%{group}")] == [b"poison"]
    assert wire.call("ForwardMessageToDeadLetterQueue", req).status.code == pb.INVALID_RECEIPT_HANDLE
    status, again = wire.receive(topic, group)
    assert again == []


def test_tag_filter_delivers_only_matching_tags(wire):
    topic, group = name("tags"), name("g")
    wire.send(topic, [b"a1"], tag="a")
    wire.send(topic, [b"b1"], tag="b")
    wire.send(topic, [b"c1"], tag="c")
    req = pb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=10,
                                   message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
                                   filter_expression=pb.FilterExpression(type=pb.TAG, expression="a || c"))
    req.long_polling_timeout.seconds = 0
    got = [r.message.body for r in wire.call("ReceiveMessage", req) if r.WhichOneof("content") == "message"]
    assert sorted(got) == [b"a1", b"c1"]


def test_one_send_cannot_mix_transactional_and_normal_messages(wire):
    topic = name("mixed")
    req = pb.SendMessageRequest()
    for mtype in (pb.TRANSACTION, pb.NORMAL):
        m = req.messages.add(body=b"m")
        m.topic.name = topic
        m.system_properties.message_id = uuid.uuid4().hex.upper()
        m.system_properties.message_type = mtype
    r = wire.call("SendMessage", req)
    assert r.status.code == pb.BAD_REQUEST and "mix" in r.status.message
    assert [e.status.code for e in r.entries] == [pb.BAD_REQUEST, pb.BAD_REQUEST]


def test_one_transactional_send_to_two_topics_commits_both_together(wire):
    first, second = name("tx-a"), name("tx-b")
    req = pb.SendMessageRequest()
    for topic in (first, second, first):
        m = req.messages.add(body=topic.encode())
        m.topic.name = topic
        m.system_properties.message_id = uuid.uuid4().hex.upper()
        m.system_properties.message_type = pb.TRANSACTION
    sent = wire.call("SendMessage", req)
    assert sent.status.code == pb.OK and len({e.transaction_id for e in sent.entries}) == 1
    assert wire.pull_all(first) == [] and wire.pull_all(second) == []
    assert wire.end(first, sent.entries[0].transaction_id).status.message == "COMMITTED"
    assert len(wire.pull_all(first)) == 2 and len(wire.pull_all(second)) == 1


def _receive_request(topic: str, group: str) -> pb.ReceiveMessageRequest:
    req = pb.ReceiveMessageRequest(batch_size=32)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.invisible_duration.seconds = 10
    return req


def test_a_receive_without_long_polling_timeout_answers_not_found_before_its_deadline(wire):
    # no long_polling_timeout (the Go and Python clients): the 4 s deadline sets the wait, less half
    # the default 3 s request timeout
    started = time.monotonic()
    responses = wire.call("ReceiveMessage", _receive_request(name("deadline"), name("g")), timeout=4)
    assert responses[0].status.code == pb.MESSAGE_NOT_FOUND
    assert 2.0 <= time.monotonic() - started < 4


@pytest.mark.slow
def test_a_receive_whose_deadline_allows_more_than_20_s_waits_20_s_at_most(wire):
    started = time.monotonic()
    responses = wire.call("ReceiveMessage", _receive_request(name("long-deadline"), name("g")), timeout=40)
    assert responses[0].status.code == pb.MESSAGE_NOT_FOUND  # answered, not cut at 40 s
    assert 19 <= time.monotonic() - started < 25


def test_a_receive_asks_for_32_messages_at_most(wire):
    topic = name("cap")
    wire.send(topic, [b"m%d" % i for i in range(40)])
    status, msgs = wire.receive(topic, name("g"), batch=40)
    assert status.code == pb.OK and len(msgs) == 32


def test_a_rocketmq5_simple_consumers_heartbeat_makes_it_a_pop_member_until_it_terminates(wire, module_broker):
    from txmq.broker.client import NativeClient

    group = name("popg")
    hb = pb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER)
    hb.group.name = group
    assert wire.call("Heartbeat", hb).status.code == pb.OK
    with NativeClient(module_broker.endpoint) as client:
        (member,) = client.list_group_members(group)
        assert member.client_id == wire.client_id and member.pop and member.queues == ()
        assert member.client.startswith("PYTHON") and member.client.endswith("SIMPLE_CONSUMER")
        bye = pb.NotifyClientTerminationRequest()
        bye.group.name = group
        assert wire.call("NotifyClientTermination", bye).status.code == pb.OK
        assert client.list_group_members(group) == []
