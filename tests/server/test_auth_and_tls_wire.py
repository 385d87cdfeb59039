"""Authentication, producer-group isolation and TLS at the wire level."""

from __future__ import annotations

import json
import shutil
import uuid

import grpc
import pytest

from tests.support.tls import self_signed

from tests.server.wire import Wire
from tests.support.broker_process import BrokerProcess
from txmq.broker.protocol import rocketmq_v2_pb2 as pb


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("auth")
    f = d / "auth.json"
    f.write_text(json.dumps({"accounts": [
        {"access_key": "alice", "secret_key": "a-secret", "producer_groups": ["pg-a"], "publish": ["*"],
         "subscribe": ["*"]},
        {"access_key": "bob", "secret_key": "b-secret", "producer_groups": ["pg-b"], "publish": ["*"],
         "subscribe": ["bob-*"]},
    ]}))
    with BrokerProcess(d / "store", flush="async", extra_args=["--auth-file", str(f)]) as proc:
        yield proc


def topic() -> str:
    return f"auth-{uuid.uuid4().hex[:8]}"


def test_signed_calls_pass(auth_broker):
    w = Wire(auth_broker.endpoint, ak="alice", sk="a-secret")
    assert w.send(topic(), [b"x"]).status.code == pb.OK


def test_a_credential_scoped_after_its_access_key_authenticates_by_the_key(auth_broker):
    # the Go client writes Credential=AK//Rocketmq; the proxy reads the key before the first '/'
    w = Wire(auth_broker.endpoint, ak="alice//Rocketmq", sk="a-secret")
    assert w.send(topic(), [b"x"]).status.code == pb.OK


@pytest.mark.parametrize("ak,sk", [("alice", "wrong"), ("eve", "a-secret"), (None, None), ("", "")])
def test_unsigned_or_wrongly_signed_calls_get_unauthorized(auth_broker, ak, sk):
    w = Wire(auth_broker.endpoint, ak=ak, sk=sk)
    r = w.send(topic(), [b"x"])
    assert r.status.code == pb.UNAUTHORIZED and r.status.message
    route = w.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=topic())))
    assert route.status.code == pb.UNAUTHORIZED


def test_subscribe_permission_is_per_topic(auth_broker):
    bob = Wire(auth_broker.endpoint, ak="bob", sk="b-secret")
    status, _ = bob.receive("alice-topic", "g1")
    assert status.code == pb.FORBIDDEN and "alice-topic" in status.message


def test_no_client_may_end_another_producer_groups_transaction(auth_broker):
    alice = Wire(auth_broker.endpoint, ak="alice", sk="a-secret")
    bob = Wire(auth_broker.endpoint, ak="bob", sk="b-secret")
    t = topic()
    tx = alice.send(t, [b"secret"], mtype=pb.TRANSACTION).entries[0].transaction_id
    r = bob.end(t, tx, pb.COMMIT)
    assert r.status.code == pb.FORBIDDEN and "pg-a" in r.status.message
    assert alice.pull_all(t) == []
    assert alice.end(t, tx, pb.COMMIT).status.code == pb.OK
    assert [m.body for m in alice.pull_all(t)] == [b"secret"]


def _self_signed(tmp_path):
    return self_signed(tmp_path)


def _tls_wire(endpoint: str, cert) -> Wire:
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    return Wire(endpoint, channel=grpc.secure_channel(endpoint, creds))


def test_a_default_broker_serves_tls_and_plaintext_on_one_port_with_a_generated_certificate(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    with BrokerProcess(tmp_path / "store", flush="async") as proc:
        cert = tmp_path / "store" / "tls" / "cert.pem"
        assert _tls_wire(proc.endpoint, cert).send(topic(), [b"over tls"]).status.code == pb.OK
        assert Wire(proc.endpoint).send(topic(), [b"in plaintext"]).status.code == pb.OK
        first = cert.read_bytes()
    with BrokerProcess(tmp_path / "store", flush="async") as proc:  # a restart keeps its certificate
        assert cert.read_bytes() == first
        assert _tls_wire(proc.endpoint, cert).send(topic(), [b"again"]).status.code == pb.OK


def test_a_configured_certificate_is_served_beside_plaintext(tmp_path):
    cert, key = _self_signed(tmp_path)
    with BrokerProcess(tmp_path / "store", flush="async",
                       extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]) as proc:
        assert _tls_wire(proc.endpoint, cert).send(topic(), [b"over tls"]).status.code == pb.OK
        assert Wire(proc.endpoint).send(topic(), [b"in plaintext"]).status.code == pb.OK
        assert not (tmp_path / "store" / "tls").exists()


def test_tls_mode_enforcing_refuses_plaintext(tmp_path):
    cert, key = _self_signed(tmp_path)
    with BrokerProcess(tmp_path / "store", flush="async",
                       extra_args=["--tls-cert", str(cert), "--tls-key", str(key), "--tls-mode", "enforcing"]) as proc:
        assert _tls_wire(proc.endpoint, cert).send(topic(), [b"over tls"]).status.code == pb.OK
        plain = Wire(proc.endpoint)
        with pytest.raises(grpc.RpcError):
            plain.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=topic())), timeout=3)


def test_tls_mode_disabled_refuses_tls(tmp_path):
    with BrokerProcess(tmp_path / "store", flush="async", extra_args=["--tls-mode", "disabled"]) as proc:
        assert Wire(proc.endpoint).send(topic(), [b"in plaintext"]).status.code == pb.OK
        assert not (tmp_path / "store" / "tls").exists()
        cert, _ = _self_signed(tmp_path)
        with pytest.raises(grpc.RpcError):
            _tls_wire(proc.endpoint, cert).call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=topic())),
                                                timeout=3)


def test_tls_broker_serves_its_flight_data_plane_over_tls(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    import pyarrow as pa
    import pyarrow.flight as flight

    from txmq.broker.client import NativeClient

    cert, key = _self_signed(tmp_path)
    with BrokerProcess(tmp_path / "store", flush="async",
                       extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]) as proc:
        with NativeClient(proc.endpoint, tls=True, ca_file=str(cert)) as client:
            assert client.send_arrow(pa.table({"body": [b"over flight tls"]}), topic="secure").count == 1
            assert client.data_plane().startswith("grpc+tls://")
            end = client.snapshot_offsets(["secure"])["secure"]
            rows = [r for q, e in end.items() if e for r in client.pull_arrow("secure", q, 0, e).batch.to_pylist()]
            assert [r["body"] for r in rows] == [b"over flight tls"]
            plain = flight.connect(client.data_plane().replace("grpc+tls", "grpc+tcp"))
            with pytest.raises(flight.FlightError):
                plain.get_flight_info(flight.FlightDescriptor.for_path("secure"), flight.FlightCallOptions(timeout=3))
            plain.close()
