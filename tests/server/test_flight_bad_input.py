"""Bad input to the Flight data plane: each gets a clear error, leaves nothing half-written, and the
broker keeps serving. The broker is a real process; the calls are a plain pyarrow.flight client's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.broker_process import BrokerProcess
from txmq.broker import errors
from txmq.broker.client import NativeClient
from txmq.broker.protocol import native_pb2 as pb

MAX_BATCH_BYTES = 1 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("flight-bad-input")
    config = root / "broker.toml"
    config.write_text(f"max_message_bytes = {MAX_BATCH_BYTES}\n")
    with BrokerProcess(root / "data", flush="async", extra_args=["--config", str(config)]) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(broker):
    with NativeClient(broker.endpoint, timeout_s=20) as c:
        c.create_topic("orders", 2)
        c.send_arrow(pa.table({"body": [b"x"] * 10}), topic="orders")
        yield c


@pytest.fixture(scope="module")
def raw(client):
    client.pull_arrow("orders", 0, 0, 1)  # learn where the data plane is
    reader = flight.connect(client.data_plane())
    yield reader
    reader.close()


def _still_serving(client) -> None:
    assert client.send_arrow(pa.table({"body": [b"after"]}), topic="orders").count == 1
    end = client.snapshot_offsets(["orders"])["orders"][0]
    assert client.pull_arrow("orders", 0, 0, end).batch.num_rows == end


def _put(raw, command: bytes | None, table: pa.Table, *, path: bool = False):
    descriptor = flight.FlightDescriptor.for_path("orders") if path else flight.FlightDescriptor.for_command(command)
    writer, metadata = raw.do_put(descriptor, table.schema)
    try:
        writer.write_table(table)
        writer.done_writing()
        metadata.read()
    finally:
        writer.close()


def _put_command(**fields) -> bytes:
    return pb.PutCommand(**fields).SerializeToString()


def test_a_ticket_that_is_not_a_pull_request_is_refused_by_name(raw, client):
    with pytest.raises(flight.FlightServerError, match="malformed ticket"):
        raw.do_get(flight.Ticket(b"\xff\xff\xff not protobuf")).read_all()
    _still_serving(client)


def test_a_ticket_for_an_unknown_topic_names_it(raw, client):
    ticket = pb.PullRequest(topic="no-such-topic", queue_id=0, start_offset=0, end_offset=1)
    with pytest.raises(flight.FlightServerError, match="no-such-topic"):
        raw.do_get(flight.Ticket(ticket.SerializeToString())).read_all()


def test_a_ticket_for_an_unknown_queue_names_it(raw):
    ticket = pb.PullRequest(topic="orders", queue_id=7, start_offset=0, end_offset=1)
    with pytest.raises(flight.FlightServerError, match="no queue 7"):
        raw.do_get(flight.Ticket(ticket.SerializeToString())).read_all()


def test_a_range_beyond_the_queue_is_refused_naming_its_end(client):
    end = client.snapshot_offsets(["orders"])["orders"][1]
    with pytest.raises(errors.IllegalOffset, match=f"last offset {end}"):
        client.pull_arrow("orders", 1, 0, end + 5)


def test_a_put_without_a_command_descriptor_is_refused(raw, client):
    with pytest.raises(flight.FlightServerError, match="must be a command"):
        _put(raw, None, pa.table({"body": [b"x"]}), path=True)
    _still_serving(client)


def test_a_put_command_without_a_kind_is_refused(raw):
    with pytest.raises(flight.FlightServerError, match="SEND or PREPARE"):
        _put(raw, _put_command(default_topic="orders"), pa.table({"body": [b"x"]}))


def test_halves_naming_participant_groups_are_refused_by_a_broker_in_no_group(raw, client):
    before = client.snapshot_offsets(["orders"])
    with pytest.raises(flight.FlightServerError, match="in no group"):
        _put(raw, _put_command(kind=pb.PutCommand.PREPARE, default_topic="orders", transaction_id="T1",
                               participants=["ga", "gb"]), pa.table({"body": [b"x"]}))
    with pytest.raises(flight.FlightServerError, match="its id from the start"):
        _put(raw, _put_command(kind=pb.PutCommand.PREPARE, default_topic="orders", participants=["ga", "gb"]),
             pa.table({"body": [b"x"]}))
    with pytest.raises(flight.FlightServerError, match="group name"):
        _put(raw, _put_command(kind=pb.PutCommand.PREPARE, default_topic="orders", transaction_id="T2",
                               participants=["ga", "b\x01d"]), pa.table({"body": [b"x"]}))
    assert client.snapshot_offsets(["orders"]) == before
    _still_serving(client)


def test_a_put_of_the_wrong_schema_is_refused_and_writes_nothing(raw, client):
    before = client.snapshot_offsets(["orders"])
    with pytest.raises(flight.FlightServerError, match="body"):
        _put(raw, _put_command(kind=pb.PutCommand.SEND, default_topic="orders"), pa.table({"body": [1, 2, 3]}))
    with pytest.raises(flight.FlightServerError, match="colour"):
        _put(raw, _put_command(kind=pb.PutCommand.SEND, default_topic="orders"),
             pa.table({"body": [b"x"], "colour": ["red"]}))
    assert client.snapshot_offsets(["orders"]) == before
    _still_serving(client)


def test_an_oversized_put_batch_is_refused_naming_the_limit_and_writes_nothing(client):
    before = client.snapshot_offsets(["orders"])
    big = pa.record_batch({"body": [b"y" * 4096] * 400})  # 1.6 MiB in one batch
    with pytest.raises(errors.BadRequest, match=f"limit of {MAX_BATCH_BYTES}"):
        client._data.put(lambda: pb.PutCommand(kind=pb.PutCommand.SEND, default_topic="orders"), [big],
                         pb.SendResponse, lambda answer: None, timeout_s=20)
    assert client.snapshot_offsets(["orders"]) == before
    _still_serving(client)


_CUT_OFF_WRITER = textwrap.dedent("""
    import sys
    import pyarrow as pa
    from txmq.broker.client import NativeClient

    endpoint, tx = sys.argv[1], sys.argv[2]
    with NativeClient(endpoint) as client:
        def batches():
            n = 0
            while True:
                n += 1
                yield pa.record_batch({"body": [b"half-%d" % n] * 1000})
        client.prepare_stream(tx, batches(), topic="orders", producer_group="g", sender="cut-off")
""")


def test_a_put_cut_off_mid_stream_leaves_only_whole_batches(broker, client):
    tx = f"cut-off-{uuid.uuid4().hex}"
    writer = subprocess.Popen([sys.executable, "-c", _CUT_OFF_WRITER, broker.endpoint, tx])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if client.get_transaction(tx).half_count >= 5000:
                    break
            except errors.UnknownTransaction:
                pass
            time.sleep(0.05)
        else:
            pytest.fail("the writer never stored 5 batches")
    finally:
        writer.kill()
        writer.wait(30)
    time.sleep(0.5)  # the broker notices the stream is gone
    halves = client.get_transaction(tx).half_count
    assert halves >= 5000 and halves % 1000 == 0
    client.end_transaction(tx, "ROLLBACK")
    _still_serving(client)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_fuzzed_tickets_get_an_error_or_a_valid_stream_and_the_broker_keeps_serving(raw, ticket):
    try:
        raw.do_get(flight.Ticket(ticket)).read_all()
    except flight.FlightServerError as exc:
        assert str(exc)
    assert raw.get_flight_info(flight.FlightDescriptor.for_path("orders")).total_records > 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_fuzzed_put_commands_get_an_error_or_an_answer_and_the_broker_keeps_serving(raw, command):
    try:
        _put(raw, command, pa.table({"body": [b"fuzz"]}))
    except flight.FlightServerError as exc:
        assert str(exc)
    assert raw.get_flight_info(flight.FlightDescriptor.for_path("orders")).total_records > 0


def test_an_unknown_flight_action_is_refused_by_name(raw, client):
    with pytest.raises(flight.FlightServerError, match="unknown Flight action 'drop-everything'"):
        list(raw.do_action(flight.Action("drop-everything", b"")))
    _still_serving(client)


def test_an_end_transaction_action_whose_body_is_not_a_request_is_refused_by_name(raw, client):
    with pytest.raises(flight.FlightServerError, match="malformed end-transaction action"):
        list(raw.do_action(flight.Action("end-transaction", b"\xff\xff\xff not protobuf")))
    _still_serving(client)


def test_an_end_transaction_action_commits_and_answers_as_the_grpc_call_does(raw, client):
    client.create_topic("committed", 1)
    prepared = client.prepare_arrow("", pa.table({"body": [b"half"]}), topic="committed", producer_group="g",
                                    sender="s")
    request = pb.EndTransactionRequest(transaction_id=prepared.transaction_id, resolution=pb.COMMIT)
    (result,) = raw.do_action(flight.Action("end-transaction", request.SerializeToString()))
    answer = pb.EndTransactionResponse.FromString(result.body.to_pybytes())
    assert (answer.state, answer.newly_ended, answer.committed_count) == ("COMMITTED", True, 1)
    repeat = client._call("EndTransaction", request)  # the gRPC call: the same transaction, already ended
    assert (repeat.state, repeat.newly_ended) == ("COMMITTED", False)
    assert client.pull_arrow("committed", 0, 0, 1).batch.column("body").to_pylist() == [b"half"]


def test_an_end_transaction_action_for_an_unknown_transaction_raises_the_brokers_error(client):
    with pytest.raises(errors.UnknownTransaction) as failure:
        client.end_transaction("no-such-transaction", "COMMIT")
    assert "no-such-transaction" in str(failure.value)
