"""The broker process: ready line, free port, clean stop on SIGTERM, bad configuration."""

from __future__ import annotations

import subprocess
import time
import sys

from tests.server.wire import Wire
from tests.support.broker_process import BrokerProcess
from txmq.broker.protocol import rocketmq_v2_pb2 as pb


def test_port_zero_prints_the_real_port_and_sigterm_stops_cleanly(tmp_path):
    proc = BrokerProcess(tmp_path / "d", flush="async").start()
    try:
        assert proc.port > 0
        assert (tmp_path / "d" / "abort").exists()
        w = Wire(proc.endpoint)
        assert w.send("clean-stop", [b"x"]).status.code == pb.OK
        w.close()
    finally:
        code = proc.stop()
    assert code == 0
    assert not (tmp_path / "d" / "abort").exists(), "a clean stop must remove the abort marker"
    assert any("stopped" in line for line in proc.output)


def test_bad_configuration_exits_with_a_message(tmp_path):
    r = subprocess.run([sys.executable, "-m", "txmq.broker.server", "--data-dir", str(tmp_path),
                        "--listen", "nonsense", "--flush", "sync"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "HOST:PORT" in r.stderr


def test_a_broker_stops_cleanly_while_a_client_holds_flight_streams_open(tmp_path):
    import pyarrow as pa
    import pyarrow.flight as flight

    from txmq.broker.client import NativeClient
    from txmq.broker.protocol import native_pb2 as pb

    broker = BrokerProcess(tmp_path / "data", flush="async").start()
    try:
        with NativeClient(broker.endpoint) as client:
            client.create_topic("held", 1)
            client.send_arrow(pa.table({"body": [b"x" * 1000] * 20000}), topic="held")
            raw = flight.connect(client.data_plane())
            ticket = pb.PullRequest(topic="held", queue_id=0, start_offset=0, end_offset=20000, max_bytes=1 << 16)
            held_read = raw.do_get(flight.Ticket(ticket.SerializeToString()))
            held_read.read_chunk()  # and never read on
            command = pb.PutCommand(kind=pb.PutCommand.SEND, default_topic="held")
            held_put, _ = raw.do_put(flight.FlightDescriptor.for_command(command.SerializeToString()),
                                     pa.schema([("body", pa.binary())]))
            held_put.write_batch(pa.record_batch({"body": [b"y"]}))  # and never ended
            started = time.monotonic()
            assert broker.stop(timeout_s=30) == 0
            assert time.monotonic() - started < 15
        assert not (tmp_path / "data" / "abort").exists()
    finally:
        broker.kill()
