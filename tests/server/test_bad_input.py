"""Bad input over the wire: each gets a clear status, the broker keeps serving, its data stays consistent."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings, strategies as hs

from txmq.broker.protocol import rocketmq_v2_pb2 as pb
from txmq.broker.protocol.rocketmq_methods import ROCKETMQ_METHODS, STREAM_STREAM, UNARY_STREAM

UNARY_AND_SERVER_STREAM = [m for m in ROCKETMQ_METHODS if m.kind != STREAM_STREAM]
GARBAGE = [b"\xff\xff\xff\xff", b"\x0a\x05abc", b"\x08" + b"\xff" * 11, b"\x12\x80\x80\x80\x80\x10"]


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def statuses_of(method, raw_responses: list[bytes]) -> list[pb.Status]:
    out = []
    for raw in raw_responses:
        r = method.response_class.FromString(raw)
        if method.kind == UNARY_STREAM:
            if r.WhichOneof("content") == "status":
                out.append(r.status)
        else:
            out.append(r.status)
    return out


@pytest.fixture(scope="module")
def sentinel(module_broker):
    """A committed message that must stay readable exactly once whatever the fuzzing does."""
    from tests.server.wire import Wire
    w = Wire(module_broker.endpoint)
    topic = name("sentinel")
    tx = w.send(topic, [b"keep-me"], mtype=pb.TRANSACTION).entries[0].transaction_id
    assert w.end(topic, tx).status.code == pb.OK
    yield w, topic
    w.close()


def assert_still_consistent(sentinel) -> None:
    w, topic = sentinel
    assert [m.body for m in w.pull_all(topic)] == [b"keep-me"]


@pytest.mark.parametrize("method", UNARY_AND_SERVER_STREAM, ids=lambda m: m.name)
def test_garbage_bytes_get_bad_request_on_every_rpc(wire, sentinel, method):
    for payload in GARBAGE:
        responses = wire.raw(method.path, payload, stream=method.kind == UNARY_STREAM)
        statuses = statuses_of(method, responses)
        assert statuses, f"{method.name} answered without a status"
        assert statuses[0].code == pb.BAD_REQUEST, (method.name, statuses[0])
        assert "not a valid" in statuses[0].message
    assert_still_consistent(sentinel)


def test_garbage_on_the_telemetry_stream_gets_bad_request_and_the_stream_stays_open(wire):
    fn = wire.channel.stream_stream("/apache.rocketmq.v2.MessagingService/Telemetry",
                                    request_serializer=lambda b: b, response_deserializer=pb.TelemetryCommand.FromString)
    settings = pb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing()))
    call = fn(iter([b"\xff\xff", settings.SerializeToString()]), metadata=wire.metadata(), timeout=5)
    first = next(call)
    second = next(call)
    call.cancel()
    assert first.status.code == pb.BAD_REQUEST
    assert second.status.code == pb.OK and second.settings.publishing.max_body_size > 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=hs.sampled_from(UNARY_AND_SERVER_STREAM), payload=hs.binary(max_size=200))
def test_random_bytes_never_break_the_broker(wire, method, payload):
    responses = wire.raw(method.path, payload, stream=method.kind == UNARY_STREAM, timeout=30)
    statuses = statuses_of(method, responses)
    assert statuses and all(s.code != pb.CODE_UNSPECIFIED for s in statuses)


text = hs.text(alphabet=hs.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
resource = hs.builds(lambda n: pb.Resource(name=n), text)
wire_message = hs.builds(
    lambda topic, body, tag, mtype, group, props: _message(topic, body, tag, mtype, group, props),
    resource, hs.binary(max_size=64), hs.none() | text, hs.sampled_from([0, 1, 2, 3, 4, 9]), hs.none() | text,
    hs.dictionaries(text, text, max_size=3))


def _message(topic, body, tag, mtype, group, props):
    m = pb.Message(topic=topic, body=body)
    m.system_properties.message_type = mtype
    m.system_properties.message_id = uuid.uuid4().hex
    if tag is not None:
        m.system_properties.tag = tag
    if group is not None:
        m.system_properties.message_group = group
    for k, v in props.items():
        m.user_properties[k] = v
    return m


requests = hs.one_of(
    hs.builds(lambda ms: ("SendMessage", pb.SendMessageRequest(messages=ms)), hs.lists(wire_message, max_size=3)),
    hs.builds(lambda t, tx, res, src: ("EndTransaction", pb.EndTransactionRequest(
        topic=t, transaction_id=tx, resolution=res, source=src)), resource, text, hs.integers(0, 5),
        hs.integers(0, 5)),
    hs.builds(lambda t: ("QueryRoute", pb.QueryRouteRequest(topic=t)), resource),
    hs.builds(lambda g, t, h: ("AckMessage", pb.AckMessageRequest(
        group=g, topic=t, entries=[pb.AckMessageEntry(receipt_handle=h)])), resource, resource, text),
    hs.builds(lambda g, t, h, s: ("ChangeInvisibleDuration", _change(g, t, h, s)), resource, resource, text,
              hs.integers(-5, 10**7)),
    hs.builds(lambda g, t, q, b, inv: ("ReceiveMessage", _receive(g, t, q, b, inv)), resource, resource,
              hs.integers(-2, 10), hs.integers(-3, 5000), hs.integers(-5, 10**6)),
    hs.builds(lambda g, t, q, off, b: ("PullMessage", pb.PullMessageRequest(
        group=g, message_queue=pb.MessageQueue(topic=t, id=q), offset=off, batch_size=b)),
        resource, resource, hs.integers(-2, 10), hs.integers(-10, 10**12), hs.integers(-3, 100)),
)


def _change(g, t, h, s):
    r = pb.ChangeInvisibleDurationRequest(group=g, topic=t, receipt_handle=h)
    r.invisible_duration.seconds = s
    return r


def _receive(g, t, q, b, inv):
    r = pb.ReceiveMessageRequest(group=g, message_queue=pb.MessageQueue(topic=t, id=q), batch_size=b)
    r.invisible_duration.seconds = inv
    r.long_polling_timeout.seconds = 0
    return r


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests)
def test_generated_requests_always_get_a_status_and_change_nothing_else(wire, sentinel, request):
    rpc, req = request
    result = wire.call(rpc, req, timeout=30)
    if isinstance(result, list):
        statuses = [r.status for r in result if r.WhichOneof("content") == "status"]
        assert statuses
    else:
        assert result.status.code != pb.CODE_UNSPECIFIED
        if rpc == "SendMessage" and req.messages:
            assert len(result.entries) == len(req.messages)
    assert_still_consistent(sentinel)


# --- specific refusals, each with its code and an explanatory message ----------------------

def test_oversized_body_is_refused(wire):
    r = wire.send(name("big"), [b"x" * ((4 << 20) + 1)])
    assert r.status.code == pb.MESSAGE_BODY_TOO_LARGE and "4194304" in r.status.message
    assert len(r.entries) == 1 and r.entries[0].status.code == pb.MESSAGE_BODY_TOO_LARGE


def test_empty_body_is_refused(wire):
    assert wire.send(name("empty"), [b""]).status.code == pb.MESSAGE_BODY_EMPTY


@pytest.mark.parametrize("topic", ["", "has space", "x" * 200, "RMQ_SYS_TRANS_HALF_TOPIC", "ü"])
def test_bad_topic_names_are_refused(wire, topic):
    r = wire.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
    assert r.status.code == pb.ILLEGAL_TOPIC and r.status.message
    assert wire.send(topic, [b"x"]).status.code == pb.ILLEGAL_TOPIC


def test_bad_consumer_group_is_refused(wire):
    status, _ = wire.receive(name("t"), "bad group!")
    assert status.code == pb.ILLEGAL_CONSUMER_GROUP


def test_unknown_transaction_id_is_refused(wire):
    r = wire.end(name("t"), "NO-SUCH-TX")
    assert r.status.code == pb.INVALID_TRANSACTION_ID and "NO-SUCH-TX" in r.status.message


def test_commit_after_rollback_is_a_conflict_and_changes_nothing(wire):
    topic = name("conflict")
    tx = wire.send(topic, [b"x"], mtype=pb.TRANSACTION).entries[0].transaction_id
    assert wire.end(topic, tx, pb.ROLLBACK).status.code == pb.OK
    r = wire.end(topic, tx, pb.COMMIT)
    assert r.status.code == pb.PRECONDITION_FAILED and r.status.message
    assert wire.pull_all(topic) == []


def test_unspecified_resolution_is_refused(wire):
    topic = name("unres")
    tx = wire.send(topic, [b"x"], mtype=pb.TRANSACTION).entries[0].transaction_id
    assert wire.end(topic, tx, pb.TRANSACTION_RESOLUTION_UNSPECIFIED).status.code == pb.BAD_REQUEST


def test_bad_receipt_handles_are_refused(wire):
    topic, group = name("rh"), name("g")
    for handle in ["", "garbage", "0.0.1.2.deadbeef", "1.2.3.4.5.6"]:
        ack = pb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic))
        ack.entries.add(receipt_handle=handle)
        r = wire.call("AckMessage", ack)
        assert r.status.code == pb.INVALID_RECEIPT_HANDLE, handle
        assert r.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE


def test_handle_of_another_group_is_refused(wire):
    topic, group = name("rh2"), name("g")
    wire.send(topic, [b"x"])
    _, msgs = wire.receive(topic, group)
    ack = pb.AckMessageRequest(group=pb.Resource(name=name("other")), topic=pb.Resource(name=topic))
    ack.entries.add(receipt_handle=msgs[0].system_properties.receipt_handle)
    r = wire.call("AckMessage", ack)
    assert r.status.code == pb.INVALID_RECEIPT_HANDLE and "not issued" in r.status.message


def test_a_transactional_message_with_a_delivery_time_is_an_illegal_delivery_time(wire):
    topic = name("delay")
    req = pb.SendMessageRequest()
    m = req.messages.add(body=b"x", topic=pb.Resource(name=topic))
    m.system_properties.message_id = "0001"
    m.system_properties.delivery_timestamp.GetCurrentTime()
    m.system_properties.message_type = pb.TRANSACTION
    assert wire.call("SendMessage", req).status.code == pb.ILLEGAL_DELIVERY_TIME
    assert wire.pull_all(topic) == []


def test_type_conflicts_are_refused(wire):
    assert wire.send(name("t"), [b"x"], mtype=pb.FIFO).status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert wire.send(name("t"), [b"x"], mtype=pb.NORMAL, group="g").status.code == \
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_reserved_user_property_is_refused(wire):
    req = pb.SendMessageRequest()
    m = req.messages.add(body=b"x", topic=pb.Resource(name=name("t")))
    m.user_properties["UNIQ_KEY"] = "mine"
    assert wire.call("SendMessage", req).status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_bad_invisible_and_polling_times_are_refused(wire):
    req = pb.ReceiveMessageRequest(group=pb.Resource(name="g"), batch_size=1,
                                   message_queue=pb.MessageQueue(topic=pb.Resource(name=name("t"))))
    req.invisible_duration.seconds = 10 ** 7
    assert wire.call("ReceiveMessage", req)[0].status.code == pb.ILLEGAL_INVISIBLE_TIME
    req.invisible_duration.seconds = 10
    req.long_polling_timeout.seconds = 3600
    assert wire.call("ReceiveMessage", req)[0].status.code == pb.ILLEGAL_POLLING_TIME


def test_pull_from_a_queue_that_does_not_exist_is_refused(wire):
    topic = name("pq")
    wire.queue_count(topic)
    req = pb.PullMessageRequest(group=pb.Resource(name="g"), offset=0, batch_size=1,
                                message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=99))
    assert wire.call("PullMessage", req)[0].status.code == pb.BAD_REQUEST
