"""Routes name an address other hosts can reach, also when the broker listens on a wildcard address.

The cross-host tests run the broker and its clients on hosts of the lab (lab/hosts.py: network
namespaces on a bridge, addresses that exist only inside them); they need root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import hosts as lab_hosts
from txmq.broker.server.addresses import announced_host, primary_address

TXMQ = str(Path(sys.executable).parent / "txmq")
PORT = 18081  # each lab host has its own network namespace: any port is free there


def test_an_advertised_host_is_announced_whatever_the_listen_address():
    assert announced_host("0.0.0.0", "broker-1.example") == "broker-1.example"
    assert announced_host("127.0.0.1", "broker-1.example") == "broker-1.example"


def test_a_concrete_listen_host_is_announced_as_it_is():
    assert announced_host("10.1.2.3", None) == "10.1.2.3"


def test_a_wildcard_listen_announces_this_hosts_primary_address_not_loopback():
    primary = primary_address()
    if primary is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    assert announced_host("0.0.0.0", None) == primary and not primary.startswith("127.")
    assert announced_host("::", None) == primary


@pytest.fixture
def lab():
    reason = lab_hosts.available()
    if reason is not None:
        pytest.skip(reason)
    with lab_hosts.Lab("adv") as made:
        yield made


def _start_broker(host: lab_hosts.Host, data_dir: Path) -> subprocess.Popen:
    proc = host.popen([sys.executable, "-m", "txmq.broker.server", "--data-dir", str(data_dir),
                       "--listen", f"0.0.0.0:{PORT}", "--flush", "async"],
                      env={**_env(), "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    for line in proc.stdout:  # the broker prints its ready line once it serves
        if "ready on" in line:
            assert f"announced as {host.addr}:{PORT}" in line, line
            return proc
        assert time.monotonic() < deadline, "the broker did not start"
    raise AssertionError(f"the broker exited with code {proc.wait()}")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TXMQ_")}


def test_a_wildcard_broker_is_read_from_another_host_through_its_routes(lab, tmp_path):
    broker_host, client_host = lab.host("broker"), lab.host("client")
    broker = _start_broker(broker_host, tmp_path / "data")
    endpoint = f"{broker_host.addr}:{PORT}"

    def txmq(*args: str, stdin: str | None = None) -> str:
        done = client_host.run([TXMQ, *args, "--broker", endpoint], env=_env(), timeout=120, input=stdin)
        assert done.returncode == 0, done.stderr
        return done.stdout

    txmq("topic", "create", "far", "--queues", "1")
    txmq("send", "far", "across hosts")
    # describe dials each group's leader as the routes name it: 127.0.0.1 would be the client itself
    described = json.loads(txmq("topic", "describe", "far", "--json"))
    assert {q["leader"] for q in described["queues"]} == {endpoint}
    assert described["queues"][0]["messages"] == 1
    assert txmq("tail", "far", "--from", "earliest", "--count", "1").strip().endswith("across hosts")
    broker.terminate()
    broker.wait(30)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_wildcard_broker_on_a_host_with_only_loopback_refuses_to_start_asking_for_advertised_host(tmp_path):
    if lab_hosts.available() is not None:
        pytest.skip(lab_hosts.available())
    # a network namespace of its own with only `lo`: there is no address another host could use
    done = subprocess.run(["unshare", "--net", sys.executable, "-m", "txmq.broker.server", "--data-dir",
                           str(tmp_path / "data"), "--listen", f"0.0.0.0:{PORT}"],
                          capture_output=True, text=True, timeout=60, env=_env())
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(r"give --advertised-host", lines[0]), done.stderr
    assert not (tmp_path / "data").exists(), "nothing is written before the configuration is accepted"
