"""Accept either a NativeClient or an endpoint string wherever a client is needed."""

from __future__ import annotations

from txmq.broker.client.native_client import NativeClient


def client_for(broker: "NativeClient | str", **kwargs) -> tuple[NativeClient, bool]:
    """(client, owned): owned is True when we created it and must close it."""
    if isinstance(broker, NativeClient):
        return broker, False
    return NativeClient(broker, **kwargs), True
