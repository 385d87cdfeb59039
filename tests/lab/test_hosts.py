"""The lab's hosts and faults: what each one does to the network, files and processes of a host."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import faults, hosts

# A TCP echo server and a client that reports how its connect ended, run on lab hosts.
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 9000)); s.listen(16)
print("listening", flush=True)
while True:
    c, _ = s.accept(); data = c.recv(100); c.sendall(data); c.close()
"""
CLIENT = """
import socket, sys, time
s = socket.socket(); s.settimeout(float(sys.argv[2])); t = time.monotonic()
try:
    s.connect((sys.argv[1], 9000)); s.sendall(b"hi"); print("echo", s.recv(100).decode())
except OSError as e:
    print(type(e).__name__, round(time.monotonic() - t, 2))
"""


def _serve(host: hosts.Host) -> subprocess.Popen:
    proc = host.popen([sys.executable, "-c", SERVER, host.addr], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"listening"
    return proc


def _connect(client: hosts.Host, server: hosts.Host, timeout: float = 1.0) -> str:
    return client.run([sys.executable, "-c", CLIENT, server.addr, str(timeout)]).stdout.strip()


def test_two_hosts_reach_each_other_over_tcp(lab):
    a, b = lab.host("a"), lab.host("b")
    _serve(b)
    assert _connect(a, b) == "echo hi"


def test_a_host_has_no_address_of_the_root_namespace_and_the_root_namespace_none_of_the_lab(lab):
    a = lab.host("a")
    inside = a.run(["ip", "-4", "-o", "addr"]).stdout
    assert a.addr in inside and "127.0.0.1" in inside
    assert len([line for line in inside.splitlines() if "inet " in line]) == 2  # lo and eth0 only
    root = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    assert a.addr not in root
    assert lab.tag not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_a_partition_drops_silently_and_heal_restores(lab):
    a, b = lab.host("a"), lab.host("b")
    _serve(b)
    faults.partition(lab, [a], [b])
    assert _connect(a, b, 1.0).startswith("TimeoutError")  # no refusal, no error: the packets vanish
    faults.heal(lab)
    assert _connect(a, b) == "echo hi"


def test_a_partition_cuts_an_established_connection_silently(lab):
    a, b = lab.host("a"), lab.host("b")
    _serve(b)
    script = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], 9000), timeout=5); print("up", flush=True)
sys.stdin.readline(); s.settimeout(1.0)
try:
    s.sendall(b"x"); print("got", s.recv(100))
except OSError as e:
    print(type(e).__name__)
"""
    proc = a.popen([sys.executable, "-c", script, b.addr], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    faults.partition(lab, [a], [b])
    out, _ = proc.communicate("go\n", timeout=10)
    assert out.strip() == "TimeoutError"


def test_a_one_way_partition_drops_only_one_direction(lab):
    a, b = lab.host("a"), lab.host("b")
    faults.partition(lab, [a], [b], one_way=True)
    assert faults.cuts(lab) == {("a", "b")}
    # a's frames to b go nowhere; b's frames reach a (a cannot answer them, so TCP fails both ways).
    sniff = a.run(["ip", "neigh", "show", b.addr]).stdout
    assert faults.NOWHERE_MAC in sniff
    assert faults.NOWHERE_MAC not in b.run(["ip", "neigh", "show", a.addr]).stdout


def test_isolating_a_host_cuts_it_from_every_other_but_not_the_others_from_each_other(lab):
    a, b, c = lab.host("a"), lab.host("b"), lab.host("c")
    _serve(b)
    faults.isolate(a)
    assert _connect(a, b, 0.5).startswith("TimeoutError")
    assert _connect(c, b) == "echo hi"


def test_a_hidden_path_is_empty_inside_the_host_and_intact_outside(lab, tmp_path):
    secret = tmp_path / "source"
    secret.mkdir()
    (secret / "code.py").write_text("x = 1\n")
    a = lab.host("a", hide=[str(secret)])
    assert a.run(["ls", "-A", str(secret)]).stdout == ""
    assert (secret / "code.py").exists()


def test_a_size_limited_disk_fills_and_frees(lab):
    a = lab.host("a", tmpfs_mb=4)
    assert faults.fill_disk(a) > 3 << 20
    full = a.run([sys.executable, "-c", f"open('{a.disk}/x', 'wb').write(b'y' * 65536)"])
    assert "No space left on device" in full.stderr
    faults.free_disk(a)
    assert a.run([sys.executable, "-c", f"open('{a.disk}/x', 'wb').write(b'y' * 65536)"]).returncode == 0


def test_a_clock_jump_moves_the_wall_clock_of_that_host_only(lab):
    a = lab.host("a")
    script = "import time, sys\nfor _ in range(60):\n    print(time.time(), flush=True); time.sleep(0.05)\n"
    proc = a.popen([sys.executable, "-c", script], stdout=subprocess.PIPE, faketime="+0", text=True)
    before = float(proc.stdout.readline())
    assert abs(before - time.time()) < 5
    faults.clock_jump(a, 3600)
    time.sleep(0.2)
    lines = [float(x) for x in proc.stdout.read().split()]
    assert lines[-1] - time.time() > 3500
    assert abs(time.time() - before) < 30  # the driver's clock did not move


def test_kill9_and_pause_reach_every_process_of_the_host(lab):
    a = lab.host("a")
    proc = a.popen(["sh", "-c", "sleep 100 & sleep 100 & wait"])
    assert faults.wait_until(lambda: len(a.pids()) == 3, 5)
    faults.pause(a)
    states = [Path(f"/proc/{pid}/stat").read_text().split()[2] for pid in a.pids()]
    assert set(states) == {"T"}
    faults.resume(a)
    faults.kill9(a)
    assert a.pids() == [] and proc.poll() is not None


def test_a_link_down_fails_sends_at_once_and_link_up_restores(lab):
    a, b = lab.host("a"), lab.host("b")
    _serve(b)
    faults.link_down(a)
    assert _connect(a, b, 2.0).split()[0] in ("OSError", "TimeoutError")
    faults.link_up(a)
    assert faults.wait_until(lambda: _connect(a, b) == "echo hi", 5)


def test_wiping_a_disk_needs_its_processes_stopped_and_empties_it(lab):
    a = lab.host("a")
    (a.disk / "data").mkdir()
    (a.disk / "data" / "log").write_bytes(b"x")
    a.popen(["sleep", "100"])
    assert faults.wait_until(lambda: a.pids(), 5)
    with pytest.raises(hosts.LabError):
        faults.wipe_disk(a)
    faults.kill9(a)
    faults.wipe_disk(a)
    assert list(a.disk.iterdir()) == []


def _lab_leftovers(tag: str) -> list[str]:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    mounts = Path("/proc/self/mounts").read_text()
    return [line for line in (netns + mounts).splitlines() if tag in line]


def test_everything_is_removed_on_exit(lab_available):
    with hosts.Lab("clean") as lab:
        a = lab.host("a", tmpfs_mb=2)
        lab.host("b", hide=["/usr/share/doc"])
        proc = a.popen(["sleep", "100"])
        tag, workdir = lab.tag, lab.workdir
        assert _lab_leftovers(tag)
    assert _lab_leftovers(tag) == []
    assert proc.poll() is not None and not workdir.exists()


def test_everything_is_removed_after_an_exception(lab_available):
    with pytest.raises(RuntimeError, match="boom"):
        with hosts.Lab("boom") as lab:
            a = lab.host("a", tmpfs_mb=2)
            proc = a.popen(["sleep", "100"])
            faults.partition(lab, [a], [lab.host("b")])
            tag = lab.tag
            raise RuntimeError("boom")
    assert _lab_leftovers(tag) == []
    assert proc.poll() is not None


def test_cleanup_stale_removes_the_leftovers_of_a_dead_run(lab_available, tmp_path):
    # A lab built by a process that is then killed -9 leaves its namespaces and mounts behind.
    script = (
        "import os, sys, time\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from lab import hosts\n"
        "lab = hosts.Lab('dead').__enter__(); lab.host('a', tmpfs_mb=2).popen(['sleep', '100'])\n"
        "print(lab.tag, flush=True); time.sleep(100)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen([sys.executable, "-c", script, root], stdout=subprocess.PIPE, text=True)
    tag = proc.stdout.readline().strip()
    proc.kill()
    proc.wait()
    assert _lab_leftovers(tag)
    removed = hosts.cleanup_stale()
    assert any(tag in r for r in removed)
    assert _lab_leftovers(tag) == []
