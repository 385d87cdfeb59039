"""Versions of the store format, the replication wire and the native wire (txmq.broker.versions):
what is recorded, what neighbouring releases accept of each other, and what is refused and how."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from txmq.broker import versions
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import Message
from txmq.broker.cluster.coordination import LeaderRecord
from txmq.broker.cluster.epochs import LeaderEpochs
from txmq.broker.cluster.replication import METHODS, SERVICE_NAME, Follower, replication_method_handlers
from txmq.broker.embedded import EmbeddedBroker
from txmq.broker.protocol import native_pb2, native_status
from txmq.broker.protocol import replication_pb2 as rpb
from txmq.broker.protocol import status as status_table
from txmq.broker.protocol.native_methods import NATIVE_METHODS_BY_NAME
from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import Message as StoreMessage
from txmq.broker.store.message_store import GEOMETRY_FILE, MessageStore

Speaks = versions.Speaks


def _meta(data_dir: Path) -> dict:
    return json.loads((data_dir / GEOMETRY_FILE).read_text())


def _set_format(data_dir: Path, fmt: int | None) -> None:
    meta = _meta(data_dir)
    meta.pop("store_format")
    if fmt is not None:
        meta["store_format"] = fmt
    (data_dir / GEOMETRY_FILE).write_text(json.dumps(meta))


def _made_store(data_dir: Path) -> None:
    with MessageStore(StoreConfig(data_dir=data_dir, commitlog_segment_bytes=1 << 20)) as store:
        store.append([StoreMessage("t", b"kept", 0)])


# --- the store format ----------------------------------------------------------------------------


def test_a_new_data_directory_records_the_store_format_this_release_writes(tmp_path):
    _made_store(tmp_path / "d")
    assert _meta(tmp_path / "d")["store_format"] == versions.STORE_FORMAT


def test_a_data_directory_made_before_formats_were_recorded_opens_as_format_1(tmp_path):
    _made_store(tmp_path / "d")
    _set_format(tmp_path / "d", None)
    with MessageStore(StoreConfig(data_dir=tmp_path / "d", commitlog_segment_bytes=1 << 20)) as store:
        assert store.store_format == versions.STORE_FORMAT_UNRECORDED == 1
        assert store.max_offset("t", 0) == 1


def _refusal(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_a_broker_refuses_a_store_format_it_cannot_read_with_one_line_naming_both(tmp_path):
    data = tmp_path / "d"
    _made_store(data)
    newer = versions.STORE_FORMAT + 1
    _set_format(data, newer)
    before = sorted((p.name, p.stat().st_size) for p in (data / "commitlog").iterdir())
    done = _refusal([sys.executable, "-m", "txmq.broker.server", "--data-dir", str(data),
                     "--listen", "127.0.0.1:0"])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"store format {newer}" in lines[0]
    assert f"reads store formats {versions.STORE_FORMAT_OLDEST}-{versions.STORE_FORMAT}" in lines[0]
    assert sorted((p.name, p.stat().st_size) for p in (data / "commitlog").iterdir()) == before
    assert _meta(data)["store_format"] == newer


def test_a_replica_refuses_a_store_format_it_cannot_read_before_it_joins_its_group(tmp_path):
    data = tmp_path / "d"
    _made_store(data)
    (data / "replica.json").write_text(json.dumps({"group": "g", "replica_id": "r1"}))
    _set_format(data, versions.STORE_FORMAT + 1)
    done = _refusal([sys.executable, "-m", "txmq.broker.server", "--data-dir", str(data),
                     "--listen", "127.0.0.1:0", "--etcd", "127.0.0.1:1", "--group", "g"])
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"holds store format {versions.STORE_FORMAT + 1}" in done.stderr


# --- which wire versions talk ----------------------------------------------------------------------


def test_a_release_before_versions_is_wire_version_1():
    assert Speaks.from_wire(0, 0) == Speaks(1, 1)


def test_neighbouring_wire_versions_talk_in_both_directions():
    assert versions.compatible(Speaks(2, 1), Speaks(1, 1))
    assert versions.compatible(Speaks(1, 1), Speaks(2, 1))
    assert versions.compatible(Speaks(3, 2), Speaks(2, 1))


def test_a_peer_older_than_the_oldest_version_served_is_refused_whichever_side_is_newer():
    assert not versions.compatible(Speaks(3, 2), Speaks(1, 1))
    assert not versions.compatible(Speaks(1, 1), Speaks(3, 2))


def test_this_release_serves_the_release_before_versions():
    assert versions.compatible(versions.REPLICATION, Speaks(1, 1))
    assert versions.compatible(versions.NATIVE, Speaks(1, 1))


# --- refusals on the wire ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("b"), flush="async") as b:
        yield b


def _native_call(endpoint: str, headers: list[tuple[str, str]]):
    method = NATIVE_METHODS_BY_NAME["ListTopics"]
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(method.path, request_serializer=method.request_class.SerializeToString,
                                   response_deserializer=method.response_class.FromString)
        return call(native_pb2.ListTopicsRequest(), metadata=headers, timeout=10)


def test_a_native_client_of_a_release_before_versions_is_served(broker):
    assert _native_call(broker.endpoint, []).status.code == native_status.OK_CODE


def test_a_native_client_whose_wire_the_broker_cannot_serve_is_refused_naming_both_versions(broker):
    with pytest.raises(grpc.RpcError) as refused:
        _native_call(broker.endpoint, [(versions.NATIVE_WIRE_HEADER, "9"), (versions.NATIVE_WIRE_OLDEST_HEADER, "9")])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "native wire 9" in refused.value.details()
    assert f"this broker speaks {versions.NATIVE}" in refused.value.details()
    with NativeClient(broker.endpoint) as client:  # and it goes on serving clients it can
        client.send([Message("t", b"after")])


def test_a_leader_refuses_a_follower_whose_replication_wire_it_cannot_serve_and_keeps_serving(group_factory):
    group = group_factory(replicas=1)
    leader = group.wait_leader()
    method = METHODS["Fetch"]
    with grpc.insecure_channel(leader.endpoint) as channel:
        fetch = channel.unary_unary(method.path, request_serializer=rpb.FetchRequest.SerializeToString,
                                    response_deserializer=rpb.FetchResponse.FromString)
        resp = fetch(rpb.FetchRequest(group=group.name, epoch=leader.epoch, replica="127.0.0.1:9", offset=0,
                                      wire_version=9, wire_oldest=9, replica_id="future"), timeout=10)
    assert resp.status.code == status_table.Code.VERSION_UNSUPPORTED
    assert "speaks replication wire 9" in resp.status.message
    assert f"this leader speaks {versions.REPLICATION}" in resp.status.message
    with NativeClient(group.endpoints) as client:
        client.send([Message("t", b"served")])


class _LeaderOfAFutureFormat:
    """A Replication service whose data directory holds a store format this release cannot read."""

    def __init__(self, store_format: int) -> None:
        self.store_format = store_format

    def epoch_end(self, req):
        return rpb.EpochEndResponse(status=native_status.ok_status(), leader_epoch=1, epoch=-1,
                                    segment_bytes=1 << 20, wire_version=versions.REPLICATION.version,
                                    wire_oldest=versions.REPLICATION.oldest, store_format=self.store_format)

    def fetch(self, req):
        raise AssertionError("a follower that cannot read the leader's format must not fetch")


def test_a_follower_refuses_a_leader_whose_store_format_it_cannot_read_naming_both(tmp_path):
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(4))
    fake = _LeaderOfAFutureFormat(versions.STORE_FORMAT + 1)
    server.add_registered_method_handlers(SERVICE_NAME, replication_method_handlers(lambda: fake, "g", lambda ctx: None))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    store = MessageStore(StoreConfig(data_dir=tmp_path / "f", commitlog_segment_bytes=1 << 20, replica=True))
    follower = Follower(store, LeaderEpochs(tmp_path / "f" / "leader-epochs.json"),
                        LeaderRecord(f"127.0.0.1:{port}", 1, b""), group="g", me="127.0.0.1:1", sync_flush=False,
                        state_dir=tmp_path / "f", channel=grpc.insecure_channel(f"127.0.0.1:{port}"),
                        metadata=lambda: [], replica_id="r")
    try:
        follower.start()
        deadline = time.monotonic() + 10
        while follower.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert follower.error is not None
        assert f"writes store format {versions.STORE_FORMAT + 1}" in follower.error
        assert f"reads store formats {versions.STORE_FORMAT_OLDEST}-{versions.STORE_FORMAT}" in follower.error
        assert store.store_format == versions.STORE_FORMAT
    finally:
        follower.stop()
        store.close()
        server.stop(0)
