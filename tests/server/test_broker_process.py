"""The broker process: ready line, free port, clean stop on SIGTERM, bad configuration."""

from __future__ import annotations

import subprocess
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
