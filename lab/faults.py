"""Faults on lab hosts: partitions of any shape, links down, pauses, kill -9, clock jumps, wiped and full disks.

Partitions are silent drops made with neighbour entries: the sender's ARP entry for a cut-off peer is
replaced by a permanent one pointing at a MAC address no host has, so its frames go nowhere and no error
comes back (no RST, no ICMP, no EINVAL as a blackhole route gives a local sender). TCP notices only by
its own timeouts, as across a real network that lost a link. No netem, no iptables.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from lab.hosts import Host, Lab, LabError, _ip

# A locally administered unicast address that no host of any lab carries.
NOWHERE_MAC = "02:00:5e:10:de:ad"


def _drop(sender: Host, receiver: Host) -> None:
    _ip("neigh", "replace", receiver.addr, "lladdr", NOWHERE_MAC, "nud", "permanent", "dev", "eth0", ns=sender.ns)
    sender.lab._cuts.add((sender.name, receiver.name))


def _undrop(sender: Host, receiver: Host) -> None:
    _ip("neigh", "del", receiver.addr, "dev", "eth0", ns=sender.ns, check=False)
    sender.lab._cuts.discard((sender.name, receiver.name))


def partition(lab: Lab, side_a: Sequence[Host], side_b: Sequence[Host], *, one_way: bool = False) -> None:
    """Drop every packet between the two sides silently; with `one_way`, only packets from a to b.

    Cumulative: partitions already in place stay (heal() removes them all)."""
    if set(h.name for h in side_a) & set(h.name for h in side_b):
        raise ValueError("a host cannot be on both sides of a partition")
    for a in side_a:
        for b in side_b:
            _drop(a, b)
            if not one_way:
                _drop(b, a)


def heal(lab: Lab) -> None:
    """Remove every partition of the lab (links taken down stay down: link_up brings them back)."""
    for sender, receiver in sorted(lab._cuts):
        _undrop(lab.hosts[sender], lab.hosts[receiver])


def cuts(lab: Lab) -> set[tuple[str, str]]:
    """The (sender, receiver) pairs whose packets are dropped now."""
    return set(lab._cuts)


def isolate(host: Host, others: Iterable[Host] | None = None) -> None:
    """Cut `host` off from every other host of its lab (or from `others`), both ways."""
    peers = [h for h in (host.lab.hosts.values() if others is None else others) if h is not host]
    partition(host.lab, [host], peers)


def link_down(host: Host) -> None:
    """Take the host's only interface down: its own sends fail at once (network unreachable), others' time out."""
    _ip("link", "set", "eth0", "down", ns=host.ns)


def link_up(host: Host) -> None:
    _ip("link", "set", "eth0", "up", ns=host.ns)
    # Its address route comes back with the link; nothing else was lost.


def pause(host: Host) -> None:
    """SIGSTOP every process on the host (a GC pause, a stalled VM); returns once each is stopped
    (a signal is delivered when its process is next scheduled, which on a loaded host takes a while)."""
    host.kill_all(signal.SIGSTOP)
    wait_until(lambda: all(_state(pid) in ("T", "t", None) for pid in host.pids()), 5, 0.01)


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None  # gone meanwhile


def resume(host: Host) -> None:
    host.kill_all(signal.SIGCONT)


def kill9(host: Host) -> None:
    """SIGKILL every process on the host and wait until they are gone (a power cut of that machine)."""
    host.kill_all(signal.SIGKILL)


def wipe_disk(host: Host) -> None:
    """Empty the host's data directory (a replaced disk). Its processes must be stopped first."""
    if host.pids():
        raise LabError(f"{host.name} still runs processes {host.pids()}: kill9 it before wiping its disk")
    for child in host.disk.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


FILLER = ".lab-filler"


def fill_disk(host: Host, leave_bytes: int = 0) -> int:
    """Fill the host's size-limited disk until `leave_bytes` remain; returns the bytes written.

    Only for hosts made with `tmpfs_mb` (a real disk is never filled)."""
    if host.disk_mb is None:
        raise LabError(f"{host.name} has no size-limited disk: make it with lab.host(..., tmpfs_mb=N)")
    path = host.disk / FILLER
    written = 0
    chunk = b"\0" * (1 << 20)
    with open(path, "ab") as f:
        while True:
            free = shutil.disk_usage(host.disk).free
            if free <= leave_bytes:
                break
            n = min(len(chunk), free - leave_bytes)
            try:
                written += f.write(chunk[:n])
                f.flush()
            except OSError:
                break
    return written


def free_disk(host: Host) -> None:
    """Remove what fill_disk wrote."""
    (host.disk / FILLER).unlink(missing_ok=True)


def clock_jump(host: Host, seconds: float) -> None:
    """Move the wall clock of the host's faketime processes by `seconds` (cumulative; negative = back).

    Only processes started with `popen(..., faketime=...)` see it; Go programs such as etcd read the
    clock without libc and are not affected. The monotonic clock never moves, as on a real host."""
    host.clock_offset_s += seconds
    tmp = host.faketime_file.with_suffix(".tmp")
    tmp.write_text(f"{host.clock_offset_s:+.3f}\n")
    os.replace(tmp, host.faketime_file)


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll `predicate` until it is true or `timeout_s` passed; returns whether it became true."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
