"""The host a broker announces in its routes: one that other hosts can reach.

`--advertised-host` wins; a concrete `--listen` host is announced as is; a wildcard
listen (0.0.0.0, ::) announces the host's primary address, found as RocketMQ finds
brokerIP1: the IPv4 address of an interface that is up and not loopback, here
preferring the interface that carries the default route. A host with none refuses
to start, asking for --advertised-host, rather than announce 127.0.0.1 to others.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from pathlib import Path

WILDCARD_HOSTS = ("0.0.0.0", "::", "")

# Linux ioctls on a socket (netdevice(7)): an interface's flags and its IPv4 address
_SIOCGIFFLAGS, _SIOCGIFADDR = 0x8913, 0x8915
_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8
_RTF_UP = 0x1


def announced_host(listen_host: str, advertised_host: str | None) -> str:
    """The host clients and peers are told to dial; ValueError when a wildcard listen has none."""
    if advertised_host:
        return advertised_host
    if listen_host not in WILDCARD_HOSTS:
        return listen_host
    found = primary_address()
    if found is None:
        raise ValueError(f"listening on a wildcard address ({listen_host or '0.0.0.0'}) but this host has no "
                         "non-loopback IPv4 address to announce: give --advertised-host")
    return found


def primary_address() -> str | None:
    """The IPv4 address of the first up, non-loopback interface (the default route's first), or None."""
    names = [name for _, name in socket.if_nameindex()]
    default = _default_route_interface()
    names.sort(key=lambda name: name != default)  # stable: otherwise the kernel's interface order
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name in names:
            address = _interface_ipv4(sock, name)
            if address is not None and not address.startswith("169.254."):  # link-local: not routed
                return address
    return None


def _interface_ipv4(sock: socket.socket, name: str) -> str | None:
    request = struct.pack("256s", name.encode()[:15])
    try:
        flags = struct.unpack_from("H", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request), 16)[0]
        if not flags & _IFF_UP or flags & _IFF_LOOPBACK:
            return None
        return socket.inet_ntoa(fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)[20:24])
    except OSError:  # the interface went away, or has no IPv4 address
        return None


def _default_route_interface() -> str | None:
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[1] == "00000000" and int(fields[3], 16) & _RTF_UP:
            return fields[0]
    return None
