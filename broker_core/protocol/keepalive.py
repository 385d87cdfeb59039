"""gRPC keepalive for every txmq channel and server: a peer gone silent is noticed in ~2-3 s.

A partition, a blackholed route or a paused process drops packets without a word: TCP keeps the
connection for minutes, so without HTTP/2 pings a call (or a stream: a follower's Follow, a
producer's check-back session, a forwarded call) notices only when its own deadline passes, and a
stream with none never does. With these options each side pings every KEEPALIVE_TIME_MS, idle or
not, and closes the connection when a ping is not answered within KEEPALIVE_TIMEOUT_MS (gRPC
1.85 times a ping out by `grpc.http2.ping_timeout_ms`, 60 s by default, not by the keepalive
timeout: both are set): the calls on it fail UNAVAILABLE and the caller fails over. A connection
attempt (TCP and the HTTP/2 handshake) gives up after CONNECT_TIMEOUT_MS: a paused process or a
blackholed host accepts nothing, and a call would otherwise wait for it up to its deadline.
The server accepts pings that often (its default refuses pings more often than every 5 min
without data, answering GOAWAY "too_many_pings").
"""

from __future__ import annotations

KEEPALIVE_TIME_MS = 1000
KEEPALIVE_TIMEOUT_MS = 1500
CONNECT_TIMEOUT_MS = 1500

# grpc.insecure_channel / secure_channel options (the native and cluster clients, followers,
# forwarding, the coordinator calls between groups)
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),  # no cap on pings while no data flows (default 2)
    ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),  # the connect timeout (default 20 s)
)

# grpc.server options: the broker pings its clients too (a dead client's Telemetry or check-back
# stream ends, so check-backs go to a live session), and accepts the clients' pings
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 2 * KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
    ("grpc.http2.max_ping_strikes", 0),  # never GOAWAY a client for pinging
    ("grpc.http2.max_pings_without_data", 0),
)
