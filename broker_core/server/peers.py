"""The caller's address from gRPC's peer string, for both services (one parser)."""

from __future__ import annotations


def peer_address(peer: str | None) -> str:
    """host:port from gRPC's peer ('ipv4:h:p', 'ipv6:[h]:p'); "" for 'unix:...' or none."""
    kind, _, address = (peer or "").partition(":")
    return address if kind in ("ipv4", "ipv6") else ""
