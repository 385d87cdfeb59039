"""With an auth file, native calls need a valid signature and stay within the account's topics and groups."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.support.broker_process import BrokerProcess
from txmq.broker import errors
from txmq.broker.client import NativeClient

AUTH = """
[[accounts]]
access_key = "orders-app"
secret_key = "s3cret"
producer_groups = ["orders"]
publish = ["orders"]
subscribe = ["orders"]

[[accounts]]
access_key = "ops"
secret_key = "root"
publish = ["*"]
subscribe = ["*"]
admin = true
"""

BATCH = pa.table({"body": [b"x"]})


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("auth")
    (root / "auth.toml").write_text(AUTH)
    with BrokerProcess(root / "data", flush="async", extra_args=["--auth-file", str(root / "auth.toml")]) as proc:
        with NativeClient(proc.endpoint, access_key="ops", secret_key="root") as ops:
            ops.create_topic("orders", 2)
            ops.create_topic("payroll", 2)
        yield proc


def test_unsigned_call_is_unauthorized(auth_broker):
    with NativeClient(auth_broker.endpoint) as anonymous:
        with pytest.raises(errors.Unauthorized):
            anonymous.list_topics()


def test_wrong_secret_is_unauthorized(auth_broker):
    with NativeClient(auth_broker.endpoint, access_key="orders-app", secret_key="guess") as client:
        with pytest.raises(errors.Unauthorized):
            client.send_arrow(BATCH, topic="orders")


def test_account_publishes_and_commits_within_its_topic_and_group(auth_broker):
    with NativeClient(auth_broker.endpoint, access_key="orders-app", secret_key="s3cret") as client:
        assert client.send_arrow(BATCH, topic="orders").count == 1
        prep = client.prepare_arrow("", BATCH, topic="orders", producer_group="orders", sender="s")
        assert client.end_transaction(prep.transaction_id, "COMMIT").state == "COMMITTED"


def test_publishing_to_a_foreign_topic_is_forbidden(auth_broker):
    with NativeClient(auth_broker.endpoint, access_key="orders-app", secret_key="s3cret") as client:
        with pytest.raises(errors.Forbidden, match="payroll"):
            client.send_arrow(BATCH, topic="payroll")
        with pytest.raises(errors.Forbidden):
            client.pull_arrow("payroll", 0, 0, 1)


def test_foreign_producer_group_and_admin_calls_are_forbidden(auth_broker):
    with NativeClient(auth_broker.endpoint, access_key="orders-app", secret_key="s3cret") as client:
        with pytest.raises(errors.Forbidden):
            client.prepare_arrow("", BATCH, topic="orders", producer_group="billing", sender="s")
        with pytest.raises(errors.Forbidden):
            client.create_topic("mine", 1)
        assert [t.name for t in client.list_topics()] == ["orders"]


def test_the_flight_data_plane_refuses_unsigned_and_wrongly_signed_calls(auth_broker):
    import pyarrow.flight as flight

    with NativeClient(auth_broker.endpoint, access_key="orders-app", secret_key="s3cret") as client:
        client.send_arrow(BATCH, topic="orders")
        location = client.data_plane()
    raw = flight.connect(location)
    with pytest.raises(flight.FlightUnauthenticatedError):
        raw.get_flight_info(flight.FlightDescriptor.for_path("orders"))
    forged = flight.FlightCallOptions(headers=[
        (b"x-mq-date-time", b"20260101T000000Z"),
        (b"authorization", b"MQv2-HMAC-SHA1 Credential=orders-app, SignedHeaders=x-mq-date-time, Signature=00")])
    with pytest.raises(flight.FlightUnauthenticatedError):
        raw.get_flight_info(flight.FlightDescriptor.for_path("orders"), forged)
    raw.close()


def test_a_signed_plain_flight_client_reads_within_its_account(auth_broker):
    import pyarrow.flight as flight

    with NativeClient(auth_broker.endpoint, access_key="orders-app", secret_key="s3cret") as client:
        client.send_arrow(BATCH, topic="orders")
        location, headers = client.data_plane(), client._metadata()
    raw = flight.connect(location)
    options = flight.FlightCallOptions(headers=[(k.encode(), v.encode()) for k, v in headers])
    info = raw.get_flight_info(flight.FlightDescriptor.for_path("orders"), options)
    assert sum(raw.do_get(e.ticket, options).read_all().num_rows for e in info.endpoints) == info.total_records > 0
    with pytest.raises(flight.FlightServerError, match="payroll"):
        raw.get_flight_info(flight.FlightDescriptor.for_path("payroll"), options)
    raw.close()
