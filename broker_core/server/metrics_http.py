"""The Prometheus endpoint (`--metrics-listen HOST:PORT`, path /metrics).

Transaction figures use RocketMQ's metric names (rocketmq_half_messages,
rocketmq_commit_messages_total, rocketmq_rollback_messages_total,
rocketmq_transaction_finish_latency) so existing RocketMQ dashboards work;
send/pull throughput and latency come from the native service's RpcMetrics
and the gRPC front's ServerMetrics. A stdlib HTTP server in a daemon thread:
scrapes are rare and cheap, so nothing more is needed.
"""

from __future__ import annotations

import logging
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # the services' view of the core; nothing of it is needed to render
    from txmq.broker.server.core_seam import ServiceCore

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, Any]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "+Inf"
    return repr(float(value)) if isinstance(value, float) else str(int(value))


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self._declared: set[str] = set()

    def declare(self, name: str, kind: str, help_text: str) -> None:
        if name not in self._declared:
            self._declared.add(name)
            self.lines.append(f"# HELP {name} {help_text}")
            self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, labels: dict[str, Any] | None = None) -> None:
        self.lines.append(f"{name}{_labels(labels or {})} {_number(value)}")

    def histogram(self, name: str, buckets: Iterable[tuple[float, int]], total: float, count: int,
                  labels: dict[str, Any] | None = None) -> None:
        labels = labels or {}
        for bound, n in buckets:
            self.sample(f"{name}_bucket", n, {**labels, "le": "+Inf" if math.isinf(bound) else repr(float(bound))})
        self.sample(f"{name}_sum", float(total), labels)
        self.sample(f"{name}_count", count, labels)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _transaction_metrics(w: _Writer, tx: dict) -> None:
    w.declare("rocketmq_half_messages", "gauge", "Half messages waiting for their transaction to end.")
    pending = tx.get("pending_halves", {})
    if not pending:
        w.sample("rocketmq_half_messages", 0)
    for topic, n in sorted(pending.items()):
        w.sample("rocketmq_half_messages", n, {"topic": topic})
    w.declare("rocketmq_commit_messages_total", "counter", "Messages made visible by COMMIT.")
    w.sample("rocketmq_commit_messages_total", tx.get("committed_messages", 0))
    w.declare("rocketmq_rollback_messages_total", "counter", "Transactions rolled back.")
    w.sample("rocketmq_rollback_messages_total", tx.get("rollbacks", 0))
    w.declare("txmq_transactions_committed_total", "counter", "Transactions committed.")
    w.sample("txmq_transactions_committed_total", tx.get("commits", 0))
    w.declare("txmq_transactions_discarded_total", "counter", "Transactions discarded after their check-backs.")
    w.sample("txmq_transactions_discarded_total", tx.get("discards", 0))
    w.declare("txmq_transaction_checks_total", "counter", "Check-back requests sent to producers.")
    w.sample("txmq_transaction_checks_total", tx.get("checks_sent", 0))
    latency = tx.get("resolution_latency_s")
    if latency:
        w.declare("rocketmq_transaction_finish_latency", "histogram",
                  "Seconds from a transaction's first half to its COMMIT, ROLLBACK or discard.")
        w.histogram("rocketmq_transaction_finish_latency", latency["buckets"], latency["sum"], latency["count"])


def _rpc_metrics(w: _Writer, rpc: dict) -> None:
    w.declare("txmq_messages_total", "counter", "Messages moved by native operation (send, prepare, end, pull, pull_plan: pulls a client read locally).")
    w.declare("txmq_rpc_calls_total", "counter", "Native data-path calls by operation.")
    w.declare("txmq_rpc_latency_seconds", "histogram", "Native data-path call latency by operation.")
    for op, data in sorted(rpc.items()):
        w.sample("txmq_messages_total", data["messages"], {"op": op})
        w.sample("txmq_rpc_calls_total", data["calls"], {"op": op})
        lat = data["latency_s"]
        w.histogram("txmq_rpc_latency_seconds", lat["buckets"], lat["sum"], lat["count"], {"op": op})
    w.declare("rocketmq_messages_in_total", "counter", "Messages written by producers (native sends and halves).")
    w.sample("rocketmq_messages_in_total",
             sum(rpc.get(op, {}).get("messages", 0) for op in ("send", "prepare")))
    w.declare("rocketmq_messages_out_total", "counter", "Messages read by consumers (native pulls).")
    w.sample("rocketmq_messages_out_total", sum(rpc.get(op, {}).get("messages", 0) for op in ("pull", "pull_plan")))


def _server_metrics(w: _Writer, server: dict) -> None:
    calls = server.get("calls", {})
    w.declare("txmq_grpc_calls_total", "counter", "RocketMQ-protocol gRPC calls by RPC and status code.")
    for (rpc, code), n in sorted(calls.items()):
        w.sample("txmq_grpc_calls_total", n, {"rpc": rpc, "code": code})
    w.declare("txmq_grpc_latency_seconds_total", "counter", "Total seconds spent per RocketMQ-protocol RPC.")
    for rpc, seconds in sorted(server.get("latency_s", {}).items()):
        w.sample("txmq_grpc_latency_seconds_total", float(seconds), {"rpc": rpc})
    for key in ("messages_in", "messages_out", "open_streams", "uptime_s"):
        if key in server:
            name = f"txmq_grpc_{key}" + ("_total" if key.startswith("messages") else "")
            w.declare(name, "counter" if key.startswith("messages") else "gauge", f"gRPC front: {key}.")
            w.sample(name, server[key])


def _store_metrics(w: _Writer, stats: dict) -> None:
    for key, value in sorted(stats.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        name = "txmq_store_" + "".join(c if c.isalnum() else "_" for c in key)
        w.declare(name, "gauge", f"Store figure {key}.")
        w.sample(name, value)


def _replication_metrics(w: _Writer, status: dict) -> None:
    """A group leader's replication figures (cluster/node.py's status)."""
    for key, kind in (("epoch", "gauge"), ("log_end", "gauge"), ("confirmed", "gauge"),
                      ("elections_won", "counter"), ("demotions", "counter"), ("acks_refused", "counter")):
        name = f"txmq_replication_{key}"
        w.declare(name, kind, f"Replication: {key.replace('_', ' ')} of this replica.")
        w.sample(name, status.get(key, 0))
    followers = status.get("followers", {})
    for key, help_text in (("offset", "CommitLog bytes each follower holds."),
                           ("lag_bytes", "Bytes each follower is behind the leader."),
                           ("behind_seconds", "Seconds since each follower last caught up."),
                           ("in_sync", "1 when the follower is in the in-sync set.")):
        name = f"txmq_replication_follower_{key}"
        w.declare(name, "gauge", help_text)
        for endpoint, f in sorted(followers.items()):
            value = {"offset": f["offset"], "lag_bytes": max(0, status.get("log_end", 0) - f["offset"]),
                     "behind_seconds": f["behind_s"], "in_sync": int(f["in_sync"])}[key]
            w.sample(name, value, {"follower": endpoint})


def _move_metrics(w: _Writer, status: dict) -> None:
    """Queue moves run from this broker (cluster/moves.py) and the queues this group has sealed."""
    name = "txmq_queue_moves_total"
    w.declare(name, "counter", "Queue moves run from this broker, by outcome.")
    for outcome, n in sorted(status["counts"].items()):
        w.sample(name, n, {"outcome": outcome})
    for key, help_text in (("running", "Queue moves running from this broker now."),
                           ("sealed_queues", "Queues of this group sealed by moves (moved away or being moved).")):
        w.declare(f"txmq_queue_moves_{key}", "gauge", help_text)
        w.sample(f"txmq_queue_moves_{key}", status[key])
    copies = status.get("copies")
    if copies:  # history copies into this group (cluster/copier.py)
        for name, key, help_text in (
                ("txmq_queue_copy_bytes_total", "copied_bytes", "Bytes of moved queues' history copied into this group."),
                ("txmq_queue_copy_messages_total", "copied_messages",
                 "Messages of moved queues' history copied into this group.")):
            w.declare(name, "counter", help_text)
            w.sample(name, copies[key])
        w.declare("txmq_queue_copy_running", "gauge", "History copies running into this group now.")
        w.sample("txmq_queue_copy_running", len(copies["running"]))
        for name, field, help_text in (
                ("txmq_queue_copy_progress_messages", "copied", "Messages copied so far, by running copy."),
                ("txmq_queue_copy_total_messages", "total", "Messages to copy, by running copy."),
                ("txmq_queue_copy_bytes_per_second", "bytes_per_s", "A running copy's mean rate."),
                ("txmq_queue_copy_rate_limit_bytes", "rate_limit", "A running copy's limit (0: none).")):
            w.declare(name, "gauge", help_text)
            for c in copies["running"]:
                w.sample(name, c[field], {"topic": c["topic"], "queue": c["queue"]})


def render(core: ServiceCore) -> str:
    """The whole exposition text for one scrape (each source guarded: a failing one is skipped)."""
    w = _Writer()
    sources = (
        (_transaction_metrics, lambda: core.engine.metrics.snapshot()),
        (_rpc_metrics, lambda: core.rpc_metrics.snapshot()),
        (_server_metrics, lambda: core.metrics.snapshot()),
        (_store_metrics, lambda: core.store.stats()),
    )
    if core.replication_status is not None:
        sources += ((_replication_metrics, core.replication_status),)
    moves = core.moves
    if moves is not None:
        sources += ((_move_metrics, lambda: {**moves.status(), "running": len(moves.status()["running"]),
                                             "sealed_queues": len(core.store.sealed_queues())}),)
    for write, read in sources:
        try:
            write(w, read())
        except Exception:
            log.exception("metrics source %s failed", write.__name__)
    return w.text()


class MetricsServer:
    """A /metrics HTTP server running in a daemon thread."""

    def __init__(self, core: ServiceCore, host: str, port: int) -> None:
        core_ref = core

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404, "only /metrics is served here")
                    return
                body = render(core_ref).encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("metrics: " + fmt, *args)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.host, self.port = self.httpd.server_address[:2]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="txmq-metrics", daemon=True)

    def start(self) -> "MetricsServer":
        self._thread.start()
        return self

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start_metrics_server(core: ServiceCore, host: str, port: int) -> MetricsServer:
    """What Broker.start calls for --metrics-listen; prints where it serves."""
    server = MetricsServer(core, host, port).start()
    print(f"txmq metrics on http://{server.host}:{server.port}/metrics", flush=True)
    return server
