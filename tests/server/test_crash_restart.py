"""kill -9 at the gRPC level: transactions committed through gRPC before the kill are visible exactly once after."""

from __future__ import annotations

import uuid

from tests.server.wire import Wire
from tests.support.broker_process import BrokerProcess
from txmq.broker.protocol import rocketmq_v2_pb2 as pb


def test_committed_transactions_survive_kill_9_exactly_once(tmp_path):
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path / "data", flush="sync",
                           extra_args=["--transaction-timeout", "60s", "--check-interval", "60s"]).start()
    try:
        wire = Wire(broker.endpoint)
        committed, pending, rolled = [], [], []
        for i in range(30):
            body = f"tx-{i}".encode()
            tx = wire.send(topic, [body, body + b"-b"], mtype=pb.TRANSACTION).entries[0].transaction_id
            if i % 3 == 0:
                assert wire.end(topic, tx, pb.COMMIT).status.code == pb.OK
                committed += [body, body + b"-b"]
            elif i % 3 == 1:
                assert wire.end(topic, tx, pb.ROLLBACK).status.code == pb.OK
                rolled.append(tx)
            else:
                pending.append(tx)
        wire.send(topic, [b"plain"])
        wire.close()
        broker.kill()

        broker.restart()
        wire = Wire(broker.endpoint)
        bodies = sorted(m.body for m in wire.pull_all(topic))
        assert bodies == sorted(committed + [b"plain"])
        # committing a transaction after the crash still works, once
        assert wire.end(topic, pending[0], pb.COMMIT).status.code == pb.OK
        assert wire.end(topic, pending[0], pb.COMMIT).status.code == pb.OK
        # a rolled-back one stays rolled back
        assert wire.end(topic, rolled[0], pb.COMMIT).status.code == pb.PRECONDITION_FAILED
        bodies = sorted(m.body for m in wire.pull_all(topic))
        assert bodies == sorted(committed + [b"plain", b"tx-2", b"tx-2-b"])
        wire.close()
    finally:
        broker.stop()
        broker.kill()
