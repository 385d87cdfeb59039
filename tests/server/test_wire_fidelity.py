"""What txmq puts on the RocketMQ 5 wire, field by field, against what Apache RocketMQ's proxy puts there.

Each test names one behaviour of the proxy (proxy/.../grpc/v2 and its converters) that the
official clients read; a raw gRPC client against a broker process checks txmq does the same.
"""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest

from txmq.broker.client.native_client import NativeClient
from txmq.broker.protocol import rocketmq_v2_pb2 as pb

ALL_TYPES = {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def admin(module_broker):
    with NativeClient(module_broker.endpoint) as client:
        yield client


def typed_topic(admin, message_type: str) -> str:
    topic = name(message_type.lower())
    admin.create_topic(topic, 2, message_type)
    return topic


def route_types(wire, topic: str) -> list[set[int]]:
    r = wire.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
    assert r.status.code == pb.OK, r.status
    return [set(q.accept_message_types) for q in r.message_queues]


def send_one(wire, topic: str, *, mtype=pb.NORMAL, group: str | None = None,
             delivery_ms: int | None = None) -> pb.SendMessageResponse:
    req = pb.SendMessageRequest()
    m = req.messages.add(body=b"payload")
    m.topic.name = topic
    m.system_properties.message_id = uuid.uuid4().hex.upper()
    m.system_properties.message_type = mtype
    m.system_properties.body_encoding = pb.IDENTITY
    if group:
        m.system_properties.message_group = group
    if delivery_ms is not None:
        m.system_properties.delivery_timestamp.FromMilliseconds(delivery_ms)
    return wire.call("SendMessage", req)


# --- SendResultEntry ------------------------------------------------------------------------

def test_a_normal_send_carries_its_message_id_as_transaction_id(wire):
    r = wire.send(name("txid"), [b"a", b"b"])
    assert r.status.code == pb.OK and r.status.message == "OK"
    for entry in r.entries:
        assert entry.status.code == pb.OK and entry.status.message == "OK"
        assert entry.message_id and entry.transaction_id == entry.message_id


def test_a_fifo_send_carries_its_message_id_as_transaction_id(wire):
    r = wire.send(name("txid-fifo"), [b"a"], mtype=pb.FIFO, group="g1")
    assert r.entries[0].transaction_id == r.entries[0].message_id


def test_a_send_entry_carries_the_queue_offset_and_no_recall_handle(wire):
    topic = name("offset")
    first = wire.send(topic, [b"a"], mtype=pb.FIFO, group="same")
    second = wire.send(topic, [b"b"], mtype=pb.FIFO, group="same")
    assert second.entries[0].offset == first.entries[0].offset + 1
    assert first.entries[0].recall_handle == ""


def test_a_transactional_send_carries_the_transaction_id_end_transaction_takes(wire):
    topic = name("txid-tx")
    r = wire.send(topic, [b"a"], mtype=pb.TRANSACTION)
    entry = r.entries[0]
    assert entry.transaction_id and entry.message_id
    assert wire.end(topic, entry.transaction_id).status.code == pb.OK


# --- status codes of a refused send -------------------------------------------------------------

def one_message(topic: str | None = None) -> tuple[pb.SendMessageRequest, pb.Message]:
    req = pb.SendMessageRequest()
    m = req.messages.add(body=b"x")
    m.topic.name = topic or name("status")
    m.system_properties.message_id = uuid.uuid4().hex.upper()
    m.system_properties.message_type = pb.NORMAL
    return req, m


def test_a_send_without_messages_is_message_corrupted(wire):
    assert wire.call("SendMessage", pb.SendMessageRequest()).status.code == pb.MESSAGE_CORRUPTED


def test_a_message_without_a_message_id_is_refused_as_an_illegal_message_id(wire):
    req, m = one_message()
    m.system_properties.message_id = " "
    assert wire.call("SendMessage", req).status.code == pb.ILLEGAL_MESSAGE_ID


def test_a_message_group_of_64_bytes_is_an_illegal_message_group(wire):
    req, m = one_message()
    m.system_properties.message_type = pb.FIFO
    m.system_properties.message_group = "g" * 64
    assert wire.call("SendMessage", req).status.code == pb.ILLEGAL_MESSAGE_GROUP
    m.system_properties.message_group = "g" * 63
    assert wire.call("SendMessage", req).status.code == pb.OK


def test_a_blank_message_group_is_an_illegal_message_group(wire):
    req, m = one_message()
    m.system_properties.message_type = pb.FIFO
    m.system_properties.message_group = "  "
    assert wire.call("SendMessage", req).status.code == pb.ILLEGAL_MESSAGE_GROUP


def test_more_than_128_user_properties_are_too_large(wire):
    req, m = one_message()
    for i in range(129):
        m.user_properties[f"p{i}"] = "v"
    assert wire.call("SendMessage", req).status.code == pb.MESSAGE_PROPERTIES_TOO_LARGE


def test_user_properties_over_16_kib_are_too_large(wire):
    req, m = one_message()
    m.user_properties["big"] = "v" * (16 * 1024)
    assert wire.call("SendMessage", req).status.code == pb.MESSAGE_PROPERTIES_TOO_LARGE


@pytest.mark.parametrize("key,value", [("a\tb", "v"), ("k", "line\nbreak")])
def test_a_control_character_in_a_user_property_is_an_illegal_property_key(wire, key, value):
    req, m = one_message()
    m.user_properties[key] = value
    assert wire.call("SendMessage", req).status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_a_control_character_in_a_tag_is_an_illegal_tag(wire):
    req, m = one_message()
    m.system_properties.tag = "a\x07b"
    assert wire.call("SendMessage", req).status.code == pb.ILLEGAL_MESSAGE_TAG


@pytest.mark.parametrize("topic", ["", "bad topic", "RMQ_SYS_TRANS_HALF_TOPIC"])
def test_end_transaction_with_an_illegal_topic_is_refused_as_an_illegal_topic(wire, topic):
    r = wire.end(topic, "0" * 32)
    assert r.status.code == pb.ILLEGAL_TOPIC


def test_end_transaction_with_a_blank_transaction_id_is_an_invalid_transaction_id(wire):
    assert wire.end(name("t"), "  ").status.code == pb.INVALID_TRANSACTION_ID


# --- routes and topic types -------------------------------------------------------------------

def test_an_untyped_topic_announces_every_type_as_a_mixed_topic_does(wire):
    assert route_types(wire, name("mixed")) == [ALL_TYPES] * 4


@pytest.mark.parametrize("message_type,wire_type", [
    ("NORMAL", pb.NORMAL), ("FIFO", pb.FIFO), ("DELAY", pb.DELAY), ("TRANSACTION", pb.TRANSACTION)])
def test_a_typed_topic_announces_only_its_type(wire, admin, message_type, wire_type):
    assert route_types(wire, typed_topic(admin, message_type)) == [{wire_type}] * 2


def test_a_topics_type_survives_a_broker_restart(tmp_path):
    from tests.support.broker_process import BrokerProcess
    from tests.server.wire import Wire
    with BrokerProcess(tmp_path / "store", flush="async") as proc:
        with NativeClient(proc.endpoint) as c:
            c.create_topic("orders", 2, "FIFO")
    with BrokerProcess(tmp_path / "store", flush="async") as proc:
        with NativeClient(proc.endpoint) as c:
            assert c.describe_topic("orders").message_type == "FIFO"
        w = Wire(proc.endpoint)
        try:
            assert route_types(w, "orders") == [{pb.FIFO}] * 2
        finally:
            w.close()


def test_creating_an_existing_topic_without_a_type_keeps_its_type(admin):
    topic = typed_topic(admin, "TRANSACTION")
    assert admin.create_topic(topic, 2).message_type == "TRANSACTION"


def test_a_deleted_topic_made_again_starts_untyped(admin):
    topic = typed_topic(admin, "FIFO")
    admin.delete_topic(topic)
    assert admin.create_topic(topic, 2).message_type == "MIXED"


def test_an_unknown_topic_type_is_refused(admin):
    from txmq.broker.errors import BadRequest
    with pytest.raises(BadRequest, match="PRIORITY"):
        admin.create_topic(name("bad"), 2, "PRIORITY")


@pytest.mark.parametrize("topic_type,mtype,group", [
    ("NORMAL", pb.FIFO, "g"), ("NORMAL", pb.TRANSACTION, None), ("FIFO", pb.NORMAL, None),
    ("TRANSACTION", pb.NORMAL, None), ("DELAY", pb.NORMAL, None)])
def test_a_message_of_another_type_than_its_topics_is_refused_as_a_type_conflict(
        wire, admin, topic_type, mtype, group):
    r = send_one(wire, typed_topic(admin, topic_type), mtype=mtype, group=group)
    assert r.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert topic_type in r.status.message


def test_a_delay_message_to_a_normal_topic_is_a_type_conflict_not_unsupported(wire, admin):
    r = send_one(wire, typed_topic(admin, "NORMAL"), mtype=pb.DELAY,
                 delivery_ms=int(time.time() * 1000) + 60_000)
    assert r.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


@pytest.mark.parametrize("topic_type", ["DELAY", "MIXED"])
def test_a_delay_message_its_topic_accepts_is_scheduled(wire, admin, topic_type):
    r = send_one(wire, typed_topic(admin, topic_type), mtype=pb.DELAY,
                 delivery_ms=int(time.time() * 1000) + 60_000)
    assert r.status.code == pb.OK and r.entries[0].message_id


def test_a_delay_message_past_the_horizon_is_an_illegal_delivery_time(wire, admin):
    r = send_one(wire, typed_topic(admin, "DELAY"), mtype=pb.DELAY,
                 delivery_ms=int(time.time() * 1000) + 4 * 24 * 3600 * 1000)
    assert r.status.code == pb.ILLEGAL_DELIVERY_TIME and "timer_max_delay" in r.status.message


def test_each_type_is_accepted_by_its_own_topic(wire, admin):
    assert send_one(wire, typed_topic(admin, "NORMAL")).status.code == pb.OK
    assert send_one(wire, typed_topic(admin, "FIFO"), mtype=pb.FIFO, group="g").status.code == pb.OK
    assert send_one(wire, typed_topic(admin, "TRANSACTION"), mtype=pb.TRANSACTION).status.code == pb.OK


def test_a_typed_topic_is_listed_with_its_type(admin):
    topic = typed_topic(admin, "FIFO")
    assert {t.name: t.message_type for t in admin.list_topics()}[topic] == "FIFO"


# --- a delivered message ---------------------------------------------------------------------

def received_one(wire, topic: str) -> pb.Message:
    status, msgs = wire.receive(topic, name("g"), poll_s=2)
    assert status.code == pb.OK and len(msgs) == 1, (status, msgs)
    return msgs[0]


def test_a_received_fifo_message_carries_its_group_and_the_sharding_key_property(wire):
    topic = name("fifo-rx")
    wire.send(topic, [b"x"], mtype=pb.FIFO, group="order-7")
    m = received_one(wire, topic)
    assert m.system_properties.message_type == pb.FIFO
    assert m.system_properties.message_group == "order-7"
    assert m.user_properties["__SHARDINGKEY"] == "order-7"


def test_a_received_committed_transactional_message_carries_its_transaction_id_property(wire):
    topic = name("tx-rx")
    entry = wire.send(topic, [b"x"], mtype=pb.TRANSACTION).entries[0]
    wire.end(topic, entry.transaction_id)
    m = received_one(wire, topic)
    assert m.system_properties.message_type == pb.TRANSACTION
    assert m.user_properties["__transactionId__"] == entry.transaction_id
    assert m.system_properties.message_id == entry.message_id


def test_a_received_normal_message_carries_no_system_property_among_its_user_properties(wire):
    topic = name("plain-rx")
    wire.send(topic, [b"x"], tag="t")
    m = received_one(wire, topic)
    assert m.system_properties.message_type == pb.NORMAL
    assert dict(m.user_properties) == {}
    assert not m.system_properties.HasField("message_group")


def test_a_received_message_carries_an_upper_case_md5_body_digest(wire):
    topic = name("digest")
    body = b"\x00digest me"
    wire.send(topic, [body])
    m = received_one(wire, topic)
    assert m.system_properties.body_digest.type == pb.MD5
    assert m.system_properties.body_digest.checksum == hashlib.md5(body).hexdigest().upper()
    assert m.system_properties.body_encoding == pb.IDENTITY


def test_a_received_message_carries_where_and_when_it_was_stored(wire, module_broker):
    topic = name("where")
    sent = wire.send(topic, [b"x"], mtype=pb.FIFO, group="g").entries[0]
    m = received_one(wire, topic)
    sp = m.system_properties
    assert sp.queue_offset == sent.offset
    assert 0 <= sp.queue_id < 4
    assert sp.store_host.endswith(f":{module_broker.endpoint.rsplit(':', 1)[1]}")
    assert sp.born_host.startswith("127.0.0.1")
    now_ms = time.time() * 1000
    assert abs(sp.store_timestamp.ToMilliseconds() - now_ms) < 60_000
    assert abs(sp.born_timestamp.ToMilliseconds() - now_ms) < 60_000


def test_a_received_message_carries_a_receipt_handle_and_its_first_delivery_attempt(wire):
    topic = name("attempt")
    wire.send(topic, [b"x"])
    m = received_one(wire, topic)
    assert m.system_properties.receipt_handle and m.system_properties.delivery_attempt == 1


def test_a_received_message_carries_the_trace_context_it_was_sent_with(wire):
    topic = name("trace")
    req = pb.SendMessageRequest()
    m = req.messages.add(body=b"x")
    m.topic.name = topic
    m.system_properties.message_id = uuid.uuid4().hex.upper()
    m.system_properties.message_type = pb.NORMAL
    m.system_properties.trace_context = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert wire.call("SendMessage", req).status.code == pb.OK
    got = received_one(wire, topic)
    assert got.system_properties.trace_context == m.system_properties.trace_context


def test_a_receive_ends_with_the_delivery_timestamp_as_the_proxys_does(wire):
    topic = name("order")
    wire.send(topic, [b"x"])
    req = pb.ReceiveMessageRequest(batch_size=4)
    req.group.name = name("g")
    req.message_queue.topic.name = topic
    req.long_polling_timeout.FromMilliseconds(2000)
    kinds = [r.WhichOneof("content") for r in wire.call("ReceiveMessage", req, timeout=15)]
    assert kinds == ["status", "message", "delivery_timestamp"]


def test_an_empty_receive_is_message_not_found_then_the_delivery_timestamp(wire):
    req = pb.ReceiveMessageRequest(batch_size=4)
    req.group.name = name("g")
    req.message_queue.topic.name = name("empty")
    req.long_polling_timeout.FromMilliseconds(100)
    responses = wire.call("ReceiveMessage", req, timeout=15)
    assert [r.WhichOneof("content") for r in responses] == ["status", "delivery_timestamp"]
    assert responses[0].status.code == pb.MESSAGE_NOT_FOUND


def test_a_crc32_digest_written_without_leading_zeros_is_accepted(wire):
    import zlib
    body = next(b for i in range(1000) if zlib.crc32(b := f"b{i}".encode()) < 0x10000000)
    req = pb.SendMessageRequest()
    m = req.messages.add(body=body)
    m.topic.name = name("crc")
    m.system_properties.message_id = uuid.uuid4().hex.upper()
    m.system_properties.message_type = pb.NORMAL
    m.system_properties.body_digest.type = pb.CRC32
    m.system_properties.body_digest.checksum = format(zlib.crc32(body), "X")
    assert wire.call("SendMessage", req).status.code == pb.OK


# --- settings ---------------------------------------------------------------------------------

def settings_reply(wire, settings: pb.Settings) -> pb.TelemetryCommand:
    import grpc
    from txmq.broker.protocol.rocketmq_methods import ROCKETMQ_METHODS
    method = next(m for m in ROCKETMQ_METHODS if m.name == "Telemetry")
    stream = wire.channel.stream_stream(method.path, request_serializer=method.request_class.SerializeToString,
                                        response_deserializer=method.response_class.FromString)
    call = stream(iter([pb.TelemetryCommand(settings=settings)]), metadata=wire.metadata(), timeout=10)
    try:
        return next(call)
    finally:
        call.cancel()
        assert isinstance(call, grpc.Call)


def test_a_producers_settings_carry_the_proxys_retry_policy_body_limit_and_type_check(wire):
    s = pb.Settings(client_type=pb.PRODUCER)
    s.publishing.topics.add(name="orders")
    reply = settings_reply(wire, s)
    assert reply.status.code == pb.OK
    pub = reply.settings.publishing
    assert pub.max_body_size == 4 * 1024 * 1024 and pub.validate_message_type
    backoff = reply.settings.backoff_policy
    assert backoff.max_attempts == 3
    assert backoff.exponential_backoff.initial.ToMilliseconds() == 10
    assert backoff.exponential_backoff.max.ToMilliseconds() == 1000
    assert backoff.exponential_backoff.multiplier == 2.0
    assert not reply.settings.metric.on


def test_a_consumers_settings_carry_the_proxys_batch_polling_and_retry_schedule(wire):
    s = pb.Settings(client_type=pb.SIMPLE_CONSUMER)
    s.subscription.group.name = "g"
    reply = settings_reply(wire, s)
    sub = reply.settings.subscription
    assert sub.receive_batch_size == 32 and sub.long_polling_timeout.seconds == 20 and not sub.fifo
    backoff = reply.settings.backoff_policy
    assert backoff.max_attempts == 17
    assert [d.seconds for d in backoff.customized_backoff.next][:4] == [1, 5, 10, 30]


def test_a_fifo_groups_settings_say_fifo_with_its_attempts(wire, admin):
    group = name("fifo-settings")
    admin.update_consumer_group(group, fifo=True, retry_max_times=3)
    s = pb.Settings(client_type=pb.PUSH_CONSUMER)
    s.subscription.group.name = group
    reply = settings_reply(wire, s)
    assert reply.settings.subscription.fifo
    assert reply.settings.backoff_policy.max_attempts == 4


def test_a_fifo_group_is_assigned_each_queue_and_another_one_assignment_of_every_queue(wire, admin):
    topic, group = name("fifo-assign"), name("fifo-assign")
    admin.create_topic(topic, 3, message_type="FIFO")
    admin.update_consumer_group(group, fifo=True)

    def assigned(consumer_group: str) -> list[int]:
        r = wire.call("QueryAssignment", pb.QueryAssignmentRequest(topic=pb.Resource(name=topic),
                                                                   group=pb.Resource(name=consumer_group)))
        assert r.status.code == pb.OK
        return [a.message_queue.id for a in r.assignments]
    assert assigned(group) == [0, 1, 2]
    assert assigned(name("plain")) == [-1]


# --- what txmq does not do, refused by name ------------------------------------------------------

def test_a_priority_message_is_refused_as_unsupported(wire):
    req, m = one_message()
    m.system_properties.message_type = pb.PRIORITY
    m.system_properties.priority = 3
    r = wire.call("SendMessage", req)
    assert r.status.code == pb.UNSUPPORTED and "PRIORITY" in r.status.message


def test_a_lite_topic_message_is_refused_as_unsupported(wire):
    req, m = one_message()
    m.system_properties.message_type = pb.LITE
    m.system_properties.lite_topic = "lite-1"
    r = wire.call("SendMessage", req)
    assert r.status.code == pb.UNSUPPORTED and "lite" in r.status.message.lower()


def test_sync_lite_subscription_is_refused_as_unsupported(wire):
    req = pb.SyncLiteSubscriptionRequest(topic=pb.Resource(name="t"), group=pb.Resource(name="g"))
    r = wire.call("SyncLiteSubscription", req)
    assert r.status.code == pb.UNSUPPORTED and "lite topics" in r.status.message


def test_recalling_on_a_topic_without_delay_messages_is_a_type_conflict(wire, admin):
    req = pb.RecallMessageRequest(topic=pb.Resource(name=typed_topic(admin, "NORMAL")), recall_handle="h")
    assert wire.call("RecallMessage", req).status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_a_recall_handle_this_broker_never_gave_out_is_a_bad_request(wire, admin):
    req = pb.RecallMessageRequest(topic=pb.Resource(name=typed_topic(admin, "DELAY")), recall_handle="h")
    r = wire.call("RecallMessage", req)
    assert r.status.code == pb.BAD_REQUEST and "recall handle" in r.status.message


def test_a_message_sent_without_a_born_host_is_born_at_the_callers_address(wire):
    topic = name("born")
    req, m = one_message(topic)
    assert wire.call("SendMessage", req).status.code == pb.OK
    got = received_one(wire, topic)
    assert got.system_properties.born_host.startswith("127.0.0.1:")


def test_a_message_read_from_a_dead_letter_topic_names_its_origin(wire):
    topic, group = name("dlq-origin"), name("g")
    sent = wire.send(topic, [b"poison"]).entries[0]
    _, msgs = wire.receive(topic, group)
    req = pb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic),
        receipt_handle=msgs[0].system_properties.receipt_handle, delivery_attempt=1, max_delivery_attempts=1)
    assert wire.call("ForwardMessageToDeadLetterQueue", req).status.code == pb.OK
    dead = received_one(wire, f"%DLQ%{group}")
    assert dead.system_properties.dead_letter_queue.topic == topic
    assert dead.system_properties.dead_letter_queue.message_id == sent.message_id
    assert "ORIGIN_TOPIC" not in dead.user_properties


def test_a_message_of_a_normal_topic_names_no_dead_letter_origin(wire):
    topic = name("alive")
    wire.send(topic, [b"x"])
    assert not received_one(wire, topic).system_properties.HasField("dead_letter_queue")


def test_a_receive_naming_no_invisible_duration_hides_messages_for_the_proxys_60_seconds(wire):
    topic = name("auto-renew")
    wire.send(topic, [b"x"])
    req = pb.ReceiveMessageRequest(batch_size=4, auto_renew=True)
    req.group.name = name("g")
    req.message_queue.topic.name = topic
    req.long_polling_timeout.FromMilliseconds(2000)
    msgs = [r.message for r in wire.call("ReceiveMessage", req, timeout=15) if r.WhichOneof("content") == "message"]
    assert msgs[0].system_properties.invisible_duration.seconds == 60
