"""Free loopback ports below the kernel's ephemeral range, for processes that must come back on
the port they had (a broker restarted after a crash, an etcd member): a port the kernel handed
out as ephemeral may be taken by any outgoing connection in the moment between two binds."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port_range() -> tuple[int, int]:
    """Where free_port draws from: [low, high). TXMQ_FREE_PORTS="low-high" narrows it, so that
    processes run side by side (parallel test workers) never draw the same port."""
    configured = os.environ.get("TXMQ_FREE_PORTS")
    if configured:
        low, high = (int(x) for x in configured.split("-"))
        assert 1024 <= low < high <= 65536, f"TXMQ_FREE_PORTS={configured!r} is not low-high within 1024-65536"
        return low, high
    low, _ = _ephemeral_range()
    return max(1024, low - 12000), low


def free_port() -> int:
    """A loopback port free now and below the kernel's ephemeral range, so that no outgoing
    connection or port-0 bind made before the caller binds it can take it; never the same twice
    in one process."""
    floor, low = free_port_range()
    for _ in range(200):
        port = random.randrange(floor, low)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise OSError(f"no free loopback port in {floor}..{low - 1}")
