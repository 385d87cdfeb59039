"""SQL92 filters over the RocketMQ 5 protocol (a real broker process, raw gRPC).

FilterExpression{type: SQL} on ReceiveMessage (SimpleConsumer and PushConsumer both
receive this way) and on PullMessage selects messages by their user properties and
TAGS; a bad expression is refused with ILLEGAL_FILTER_EXPRESSION naming the position.
"""

from __future__ import annotations

import uuid

from tests.server.test_rpc_behaviour import name
from txmq.broker.protocol import rocketmq_v2_pb2 as pb


def send_orders(wire, topic: str, count: int) -> None:
    req = pb.SendMessageRequest()
    for i in range(count):
        m = req.messages.add(body=f"order-{i}".encode())
        m.topic.name = topic
        m.system_properties.message_id = uuid.uuid4().hex.upper()
        m.system_properties.message_type = pb.NORMAL
        m.system_properties.body_encoding = pb.IDENTITY
        m.system_properties.tag = "paid" if i % 2 else "new"
        m.user_properties["region"] = "eu" if i % 3 == 0 else "us"
        m.user_properties["amount"] = str(i * 10)
    assert wire.call("SendMessage", req).status.code == pb.OK


def sql(expression: str) -> pb.FilterExpression:
    return pb.FilterExpression(type=pb.SQL, expression=expression)


def receive(wire, topic: str, group: str, filter_expression: pb.FilterExpression):
    req = pb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=64,
                                   message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
                                   filter_expression=filter_expression)
    req.long_polling_timeout.seconds = 0
    return wire.call("ReceiveMessage", req)


def received_bodies(responses) -> list[bytes]:
    return sorted(r.message.body for r in responses if r.WhichOneof("content") == "message")


def pull_queue(wire, topic: str, qid: int, filter_expression: pb.FilterExpression) -> list[bytes]:
    out, offset = [], 0
    while True:
        req = pb.PullMessageRequest(offset=offset, batch_size=8, filter_expression=filter_expression)
        req.group.name = "pull-group"
        req.message_queue.topic.name = topic
        req.message_queue.id = qid
        responses = wire.call("PullMessage", req)
        out += [r.message.body for r in responses if r.WhichOneof("content") == "message"]
        nxt = [r.next_offset for r in responses if r.WhichOneof("content") == "next_offset"]
        if not nxt or nxt[0] == offset:
            return out
        offset = nxt[0]


def expected(count: int, predicate) -> list[bytes]:
    return sorted(f"order-{i}".encode() for i in range(count) if predicate(i))


def test_receive_with_a_sql_filter_delivers_only_matching_messages(wire):
    topic = name("sql-recv")
    send_orders(wire, topic, 30)
    got = received_bodies(receive(wire, topic, name("g"), sql("region = 'eu' AND amount > 100")))
    assert got == expected(30, lambda i: i % 3 == 0 and i * 10 > 100)


def test_a_sql_filter_can_select_on_the_tag(wire):
    topic = name("sql-tag")
    send_orders(wire, topic, 10)
    got = received_bodies(receive(wire, topic, name("g"), sql("TAGS = 'paid' AND amount BETWEEN 30 AND 70")))
    assert got == expected(10, lambda i: i % 2 and 30 <= i * 10 <= 70)


def test_messages_a_group_filtered_out_are_consumed_for_that_group(wire):
    topic, group = name("sql-consumed"), name("g")
    send_orders(wire, topic, 6)
    assert received_bodies(receive(wire, topic, group, sql("amount < 20"))) == expected(6, lambda i: i < 2)
    assert received_bodies(receive(wire, topic, group, pb.FilterExpression(type=pb.TAG, expression="*"))) == []


def test_pull_with_a_sql_filter_returns_only_matching_messages(wire):
    topic = name("sql-pull")
    send_orders(wire, topic, 40)
    got = sorted(b for qid in range(wire.queue_count(topic)) for b in pull_queue(wire, topic, qid,
                                                                                sql("region IN ('us')")))
    assert got == expected(40, lambda i: i % 3 != 0)


def test_a_bad_sql_expression_is_refused_naming_its_position(wire):
    topic = name("sql-bad")
    send_orders(wire, topic, 1)
    status = receive(wire, topic, name("g"), sql("amount > 'ten'"))[0].status
    assert status.code == pb.ILLEGAL_FILTER_EXPRESSION
    assert "position 10" in status.message


def test_an_empty_sql_expression_is_refused(wire):
    topic = name("sql-empty")
    send_orders(wire, topic, 1)
    assert receive(wire, topic, name("g"), sql(""))[0].status.code == pb.ILLEGAL_FILTER_EXPRESSION
