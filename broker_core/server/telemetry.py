"""RocketMQ 5 Telemetry streams: the settings handshake and check-back sessions.

Every official client opens one bidirectional Telemetry stream per broker and
keeps it for its lifetime. It first sends its `Settings`; the broker answers
`TelemetryCommand{status OK, settings}` with the values the client must use
(a producer needs `publishing.max_body_size > 0` or every send fails; a push
consumer needs the long-polling timeout and retry policy and waits up to 10 s
for the reply before giving up).

A producer's stream is also how the broker asks about orphaned transactions:
each stream is a `TelemetrySession` registered with the `CheckbackRouter`,
which pushes `RecoverOrphanedTransactionCommand{message, transaction_id}` down
it; the client answers with EndTransaction (source SOURCE_SERVER_CHECK).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Iterator

from txmq.broker.protocol import rocketmq_v2_pb2 as pb
from txmq.broker.protocol import status as st
from txmq.broker.server.convert import to_wire_message
from txmq.broker.store.message import PROP_REAL_TOPIC
from txmq.broker.server.core_seam import ServiceCore

log = logging.getLogger("txmq.broker.telemetry")

_CLOSE = object()


class TelemetrySession:
    """One client's Telemetry stream, as the check-back router sees it."""

    def __init__(self, client_id: str, producer_group: str) -> None:
        self.client_id = client_id
        self.producer_group = producer_group
        self.topics: set[str] = set()
        self.client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
        self._out: queue.Queue = queue.Queue(maxsize=10_000)
        self._alive = True

    @property
    def alive(self) -> bool:
        return self._alive

    @property
    def is_producer(self) -> bool:
        return self.client_type in (pb.PRODUCER, pb.CLIENT_TYPE_UNSPECIFIED)

    def send(self, command) -> bool:
        if not self._alive:
            return False
        try:
            self._out.put_nowait(command)
            return True
        except queue.Full:
            return False

    def push(self, tx, half) -> bool:
        """Ask this producer about `tx` (the engine's check-back, through the router)."""
        if not self._alive or not self.is_producer:
            return False
        topic = half.properties.get(PROP_REAL_TOPIC) or (tx.topics[0] if tx.topics else half.topic)
        command = pb.TelemetryCommand(
            status=st.ok(),
            recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
                message=to_wire_message(half, topic=topic, transaction=True),
                transaction_id=tx.transaction_id,
            ),
        )
        return self.send(command)

    def close(self) -> None:
        self._alive = False
        try:
            self._out.put_nowait(_CLOSE)
        except queue.Full:
            pass

    def next_command(self, timeout_s: float):
        """The next command to write, None on timeout, _CLOSE when the session ended."""
        try:
            return self._out.get(timeout=timeout_s)
        except queue.Empty:
            return None


def settings_reply(core: ServiceCore, settings: pb.Settings) -> pb.TelemetryCommand:
    """The broker's answer to a client's Settings: the client's own settings plus the broker's values."""
    cfg = core.config
    out = pb.Settings()
    out.CopyFrom(settings)
    which = settings.WhichOneof("pub_sub")
    if which == "publishing" or settings.client_type == pb.PRODUCER:
        out.publishing.max_body_size = cfg.max_body_bytes
        out.publishing.validate_message_type = True
        policy = out.backoff_policy
        policy.Clear()
        policy.max_attempts = 3
        policy.exponential_backoff.initial.nanos = 10_000_000
        policy.exponential_backoff.max.seconds = 1
        policy.exponential_backoff.multiplier = 2.0
    elif which == "subscription":
        sub = out.subscription
        group = core.consumer_groups.get(sub.group.name)  # the proxy merges the group's settings the same way
        sub.fifo = group.fifo
        sub.receive_batch_size = cfg.client_receive_batch_size
        sub.long_polling_timeout.seconds = int(cfg.client_long_polling_s)
        policy = out.backoff_policy
        policy.Clear()
        policy.max_attempts = group.max_delivery_attempts
        for seconds in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200):
            policy.customized_backoff.next.add().seconds = seconds
    else:
        return pb.TelemetryCommand(status=st.status(pb.UNRECOGNIZED_CLIENT_TYPE,
                                                    "settings carry neither publishing nor subscription"),
                                   settings=out)
    out.metric.on = False
    return pb.TelemetryCommand(status=st.ok(), settings=out)


def serve_telemetry(core: ServiceCore, requests, context, *, client_id: str, identity,
                    bad_request_type: type) -> Iterator[pb.TelemetryCommand]:
    """The Telemetry handler: read commands on a helper thread, write replies and check-backs here."""
    session = TelemetrySession(client_id, identity.producer_group)
    core.metrics.stream_opened()
    context.add_callback(session.close)

    def read_commands() -> None:
        try:
            for command in requests:
                if not session.alive:
                    break
                session.send(handle_command(core, session, command, bad_request_type))
        except Exception:  # the client went away or sent garbage framing
            pass
        finally:
            session.close()

    reader = threading.Thread(target=read_commands, name=f"txmq-telemetry-{client_id[:40]}", daemon=True)
    reader.start()
    core.router.register(session)
    try:
        while session.alive or not session._out.empty():
            command = session.next_command(1.0)
            if command is _CLOSE:
                break
            if command is None:
                if not context.is_active():
                    break
                continue
            if command is not _NOTHING:
                yield command
    finally:
        session.close()
        core.router.unregister(session)
        core.metrics.stream_closed()


_NOTHING = object()


def handle_command(core: ServiceCore, session: TelemetrySession, command, bad_request_type: type):
    """Reply to one client command (or _NOTHING when it needs no reply)."""
    if isinstance(command, bad_request_type):
        return pb.TelemetryCommand(status=st.status(pb.BAD_REQUEST, str(command)))
    which = command.WhichOneof("command")
    if which == "settings":
        s = command.settings
        if s.HasField("client_type"):
            session.client_type = s.client_type
        if s.WhichOneof("pub_sub") == "publishing":
            session.topics.update(r.name for r in s.publishing.topics if r.name)
        return settings_reply(core, s)
    if which in ("thread_stack_trace", "verify_message_result"):
        return _NOTHING
    return pb.TelemetryCommand(status=st.status(pb.BAD_REQUEST,
                                                f"unexpected telemetry command {which or 'with no command'}"))
