"""Accept either a NativeClient or an endpoint string wherever a client is needed."""

from __future__ import annotations

from txmq.broker.client.native_client import NativeClient


def client_for(broker: "NativeClient | ClusterClient | str", **kwargs) -> tuple[NativeClient, bool]:
    """(client, owned): owned is True when we created it and must close it. A ClusterClient
    stands in for a NativeClient where a producer or consumer takes one."""
    from txmq.broker.client.cluster_client import ClusterClient

    if isinstance(broker, (NativeClient, ClusterClient)):
        return broker, False
    return NativeClient(broker, **kwargs), True
