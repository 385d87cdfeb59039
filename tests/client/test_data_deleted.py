"""DataDeleted crosses the wire as DataDeleted(min_offset=...), not as a generic error.

Retention is hard to trigger in a test broker, so the native and Flight services
run in-process over a core whose store reports deleted offsets; the wire, the
status mapping and the client are the real ones.
"""

from __future__ import annotations

from concurrent import futures
from types import SimpleNamespace

import grpc
import pytest

from txmq.broker import errors
from txmq.broker.client import NativeClient
from txmq.broker.server.auth import Authenticator
from txmq.broker.server.flight_service import TxmqFlightServer
from txmq.broker.server.metrics import ServerMetrics
from txmq.broker.server.rpc_metrics import RpcMetrics
from txmq.broker.server.native_service import NativeService, build_native_handler


class _RetainedStore:
    """A store whose queue t:0 lost offsets below 100 to retention."""

    topics = SimpleNamespace(get=lambda name: SimpleNamespace(name=name, queue_count=1, permission=6))

    def add_dispatch_listener(self, fn):
        pass

    def queue_ids(self, topic):
        return [0]

    def sealed_queue_ids(self, topic):
        return frozenset()

    def read_queue(self, topic, queue_id, offset, max_count, **kwargs):
        raise errors.DataDeleted(f"offset {offset} of {topic}:{queue_id} was deleted", min_offset=100)

    def min_offset(self, topic, queue_id):
        return 100

    def max_offset(self, topic, queue_id):
        return 150


@pytest.fixture
def stub_client():
    engine = SimpleNamespace(consistent_cut=lambda topics: {("t", 0): 150})
    core = SimpleNamespace(store=_RetainedStore(), engine=engine, router=None, config=None,
                           metrics=ServerMetrics(), rpc_metrics=RpcMetrics(), auth=Authenticator.disabled(),
                           advertised=None)
    service = NativeService(core)
    flight = TxmqFlightServer(service, "127.0.0.1", 0, authenticator=core.auth)
    service.data_plane = ("127.0.0.1", flight.port, False)
    server = grpc.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers((build_native_handler(service),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with NativeClient(f"127.0.0.1:{port}", timeout_s=10) as client:
            yield client
    finally:
        server.stop(0)
        flight.shutdown()


def test_deleted_offsets_raise_data_deleted_with_the_min_offset(stub_client):
    with pytest.raises(errors.DataDeleted) as info:
        stub_client.pull_arrow("t", 0, 5, 10)
    assert info.value.min_offset == 100
    assert "deleted" in str(info.value)


def test_min_offsets_report_the_retained_start(stub_client):
    assert stub_client.min_offsets(["t"]) == {"t": {0: 100}}


def test_a_subscription_below_the_retained_start_raises_data_deleted_when_not_skipping(stub_client):
    with pytest.raises(errors.DataDeleted) as info:
        next(iter(stub_client.subscribe({"t": {0: 5}}, skip_deleted=False)))
    assert info.value.min_offset == 100


def test_a_skipping_subscription_moves_to_the_retained_start_and_raises_only_what_skipping_cannot_pass(stub_client):
    subscription = stub_client.subscribe({"t": {0: 5}})
    with pytest.raises(errors.DataDeleted):  # this store's reads fail from 100 on too: nothing more to skip
        next(iter(subscription))
    assert subscription.positions == {"t": {0: 100}}
