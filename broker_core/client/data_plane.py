"""The client half of the broker's Arrow Flight data plane (server/flight_service.py).

Bulk reads are DoGet streams of record batches, bulk writes DoPut streams of
batches answered batch by batch; the bytes go through Flight's C++ transport,
not Python. The Flight endpoint is not configured by the user: the broker
announces it (the native DataPlane call), and it is asked again whenever the
connection fails, because a restarted broker may listen on another port.

After a failover the location known is a replica that no longer leads (its Flight service is
closed: "Connection refused"), or one that is gone silent. A write stream that could not be
opened there sent nothing, so the put asks the control channel (which fails over between the
group's replicas, and which a follower answers for its leader) where the data plane is now and
opens it there, for as long as the caller allows: a new leader is written to within moments of
its election instead of the write failing (a Spark task attempt lost) or waiting for a timeout.
A stream already open to a leader that went silent would wait for its deadline (the Flight
connection has no keepalive: Arrow's server would refuse the pings), so while a put stream
runs the control channel is asked every WATCH_INTERVAL_S where the data plane is; when it has
moved, the stream is given up at once (BrokerUnavailable: its last batches may or may not be
stored, as after any broken stream).
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from typing import Any, Callable, Iterable, Iterator, TypeVar

import pyarrow as pa
import pyarrow.flight as flight
from google.protobuf.message import DecodeError

from txmq.broker import errors
from txmq.broker.client.local_read import LocalSegments
from txmq.broker.client.types import PullResult, PushedBatch
from txmq.broker.protocol import keepalive
from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.protocol.native_status import error_from

log = logging.getLogger(__name__)

# gRPC channel arguments of the Flight client: a connection attempt to a host that accepts nothing
# (paused, partitioned) gives up as soon as the control channel's does (gRPC's default is 20 s).
# No keepalive pings: Arrow's Flight server keeps gRPC's ping policy and would send the client away.
FLIGHT_CHANNEL_OPTIONS = [("grpc.min_reconnect_backoff_ms", keepalive.CONNECT_TIMEOUT_MS)]
# between look-ups of the data plane while a group elects its next leader (a second or two)
RELOCATE_BACKOFF_START_S = 0.05
RELOCATE_BACKOFF_MAX_S = 0.25
# how often the control channel is asked where the data plane is while a put stream is open
WATCH_INTERVAL_S = 1.0

Response = TypeVar("Response", pb.SendResponse, pb.PrepareResponse)
A = TypeVar("A")

# (host, port, tls) of a broker's Flight service; host "" means the host the client dialled.
Locate = Callable[[], tuple[str, int, bool]]


def typed_error(exc: Exception, what: str) -> errors.TxmqError:
    """The txmq error a Flight failure stands for: the broker's own (its Status rides in
    extra_info), else one for the transport's failure."""
    extra = exc.extra_info if isinstance(exc, flight.FlightError) else b""
    if extra:
        try:
            status = pb.Status.FromString(extra)
        except DecodeError:
            status = None
        if status is not None and status.error_class:
            return error_from(status)  # type: ignore[return-value]
    if isinstance(exc, flight.FlightUnauthenticatedError):
        return errors.Unauthorized(f"{what}: {exc}")
    if isinstance(exc, flight.FlightTimedOutError):
        return errors.RequestTimeout(f"{what}: {exc}")
    if isinstance(exc, (flight.FlightUnavailableError, flight.FlightCancelledError)):
        return errors.BrokerUnavailable(f"{what}: {exc}")
    return errors.TxmqError(f"{what} failed: {exc}")


class _StreamThreads:
    """Threads that run put streams, kept for the next stream once one ends: starting a thread is a
    large part of a small prepare's time. A stream given up keeps its thread until the stream's
    own deadline ends it; the next stream takes or starts another."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue] = []
        self._closed = False

    def start(self, job: Callable[[], None]) -> threading.Event:
        """Run `job` on an idle thread (or a new one); the event is set once it has returned."""
        done = threading.Event()
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(jobs,), name="txmq-flight-put", daemon=True).start()
        jobs.put((job, done))
        return done

    def _serve(self, jobs: queue.SimpleQueue) -> None:
        while (item := jobs.get()) is not None:
            job, done = item
            try:
                job()
            finally:
                done.set()
            with self._lock:
                if self._closed:
                    return
                self._idle.append(jobs)

    def close(self) -> None:
        """End the idle threads; a thread running a stream ends after it."""
        with self._lock:
            self._closed, idle, self._idle = True, self._idle, []
        for jobs in idle:
            jobs.put(None)


class DataPlane:
    """One Flight connection to a broker's data plane, opened on first use."""

    def __init__(self, locate: Locate, dialled_host: Callable[[], str], headers: Callable[[], list],
                 *, ca_file: str | None = None) -> None:
        self._locate = locate
        self._dialled_host = dialled_host
        self._headers = headers
        self._ca_file = ca_file
        # reentrant: locating the data plane may fail over to another endpoint, which resets this
        self._lock = threading.RLock()
        self._client: flight.FlightClient | None = None
        self._location: str | None = None
        self._closed = False
        self._threads = _StreamThreads()

    def _location_of(self, host: str, port: int, tls: bool) -> str:
        host = host or self._dialled_host()
        where = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return f"{'grpc+tls' if tls else 'grpc+tcp'}://{where}:{port}"

    def _connect(self) -> flight.FlightClient:
        with self._lock:
            if self._client is None:
                host, port, tls = self._locate()
                self._location = self._location_of(host, port, tls)
                kwargs: dict = {"generic_options": FLIGHT_CHANNEL_OPTIONS}
                if tls and self._ca_file:
                    with open(self._ca_file, "rb") as fh:
                        kwargs["tls_root_certs"] = fh.read()
                self._client = flight.FlightClient(self._location, **kwargs)
            return self._client

    def location(self) -> str:
        """Where the broker's Flight service is (connecting first if need be)."""
        self._connect()
        assert self._location is not None
        return self._location

    def reset(self) -> None:
        """Forget the connection: the next call asks the broker where its data plane is."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def close(self) -> None:
        """Forget the connection for good: a put waiting for a new leader stops."""
        self._closed = True
        self._threads.close()
        self.reset()

    def _options(self, timeout_s: float | None) -> flight.FlightCallOptions:
        headers = [(k.encode(), v.encode()) for k, v in self._headers()]
        return flight.FlightCallOptions(timeout=timeout_s, headers=headers)

    def read(self, request: pb.PullRequest, *, timeout_s: float | None,
             local: LocalSegments | None = None) -> Iterator[PullResult]:
        """The DoGet stream of `request` as PullResults, one per batch, in offset order; batches the
        broker answered with a read plan are decoded from `local` (LocalReadUnavailable if they
        cannot be here)."""
        what = f"reading {request.topic}/{request.queue_id} [{request.start_offset}, {request.end_offset})"
        try:
            reader = self._connect().do_get(flight.Ticket(request.SerializeToString()), self._options(timeout_s))
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    return
                metadata = chunk.app_metadata  # None when every field is zero (an empty range at 0)
                progress = pb.PullProgress.FromString(metadata.to_pybytes()) if metadata else pb.PullProgress()
                batch = chunk.data
                if progress.HasField("plan"):
                    if local is None:
                        raise errors.TxmqError(f"{what}: the broker sent a read plan this client did not ask for")
                    batch = local.batch(progress.plan, request.topic, request.queue_id)
                yield PullResult(batch=batch, next_offset=progress.next_offset,
                                 min_offset=progress.min_offset, max_offset=progress.max_offset)
        except (flight.FlightError, pa.ArrowException) as exc:
            if isinstance(exc, (flight.FlightUnavailableError, flight.FlightCancelledError)):
                self.reset()
            raise typed_error(exc, what) from None

    def follow(self, request: pb.SubscribeRequest, on_open: Callable[[flight.FlightStreamReader], None]
               ) -> Iterator[PushedBatch]:
        """The DoGet stream of a subscription, batch by batch as the broker pushes them; it has no
        deadline (it lasts until a failure or the reader, handed to `on_open`, is cancelled)."""
        what = "subscription to " + ", ".join(item.topic for item in request.start)
        connection = self._connect()
        try:
            reader = connection.do_get(flight.Ticket(pb.PullRequest(subscribe=request).SerializeToString()),
                                       self._options(None))
            on_open(reader)
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    return
                progress = pb.PullProgress.FromString(chunk.app_metadata.to_pybytes())
                yield PushedBatch(progress.topic, progress.queue_id, chunk.data, progress.next_offset)
        except (flight.FlightError, pa.ArrowException) as exc:
            if connection is not self._client:  # another call failed over and closed this connection
                raise errors.BrokerUnavailable(f"{what}: the connection was reset ({exc})") from None
            # not when cancelled: that is the subscriber closing it, and other streams share the connection
            if isinstance(exc, flight.FlightUnavailableError):
                self.reset()
            raise typed_error(exc, what) from None

    def put(self, command_for: Callable[[], pb.PutCommand], batches: Iterable[pa.RecordBatch],
            response_class: type[Response], on_answer: Callable[[Response], None], *,
            timeout_s: float | None, relocate_s: float = 0.0) -> None:
        """Stream `batches` to the broker with DoPut, taken from the iterable as they are sent;
        `on_answer` gets the broker's answer to each, in order. A batch whose schema differs
        from the stream's starts a new stream, with a command from `command_for()` made then
        (a transaction's later streams carry the id its first answer gave).

        A failure is raised as the broker's error; the batches it answered before stay
        written (each batch is one call), and a write is never re-sent here: whether the
        batch in flight was stored is for the caller's recovery to find out. Only a stream that
        could not be opened (nothing sent) is tried again, at the data plane the control channel
        names then, for up to `relocate_s` (a failover's election)."""
        pending = iter(batches)
        batch = next(pending, None)
        while batch is not None:
            batch = self._put_stream(command_for, batch, pending, response_class, on_answer, timeout_s, relocate_s)

    def _open_put(self, command_for: Callable[[], pb.PutCommand], schema: pa.Schema, what: str,
                  timeout_s: float | None, relocate_s: float) -> tuple[flight.FlightStreamWriter, flight.FlightMetadataReader]:
        """A DoPut stream at the current leader's data plane. A stream that could not be opened sent
        nothing (the schema carries no rows), so it is tried again at the data plane the control
        channel names then, for up to `relocate_s`; then BrokerUnreachable."""
        def open_put(connection: flight.FlightClient):
            descriptor = flight.FlightDescriptor.for_command(command_for().SerializeToString())
            return connection.do_put(descriptor, schema, self._options(timeout_s))

        try:
            return self._relocating(open_put, what, relocate_s)
        except errors.BrokerUnavailable as exc:
            raise errors.BrokerUnreachable(f"{exc} (nothing was sent)") from None

    def action(self, kind: str, request: Any, response_class: type[A], *, timeout_s: float | None,
               relocate_s: float) -> A:
        """The answer to Flight action `kind` (protocol/native_arrow.py) with the native `request`.
        Only for idempotent actions: one the data plane did not answer is asked again, at the data
        plane the control channel names then, for up to `relocate_s` (a failover's election)."""
        body = request.SerializeToString()

        def act(connection: flight.FlightClient) -> A:
            results = list(connection.do_action(flight.Action(kind, body), self._options(timeout_s)))
            if len(results) != 1:
                raise errors.TxmqError(f"Flight action {kind}: the broker gave {len(results)} results, not one")
            return response_class.FromString(results[0].body.to_pybytes())

        return self._relocating(act, f"Flight action {kind}", relocate_s)

    def _relocating(self, attempt: Callable[[flight.FlightClient], A], what: str, relocate_s: float) -> A:
        """`attempt` at the data plane; while it cannot be reached (BrokerUnavailable), the location
        is asked again through the control channel and tried, with backoff, for up to `relocate_s`."""
        retry_until = time.monotonic() + relocate_s
        backoff = RELOCATE_BACKOFF_START_S
        while True:
            where = self._location
            try:
                return attempt(self._connect())
            except (flight.FlightError, pa.ArrowException) as exc:
                error = typed_error(exc, what)
            except errors.BrokerUnavailable as exc:  # the control channel found no replica to tell it
                error = exc
            if not isinstance(error, errors.BrokerUnavailable):
                raise error from None  # the broker's own refusal (a bad command, no permission)
            self.reset()
            if self._closed or time.monotonic() + backoff >= retry_until:
                raise error from None
            log.info("data plane %s unreachable (%s); asking where it is now", where, error)
            time.sleep(backoff * (0.5 + random.random() / 2))
            backoff = min(backoff * 2, RELOCATE_BACKOFF_MAX_S)

    def _put_stream(self, command_for: Callable[[], pb.PutCommand], first: pa.RecordBatch,
                    pending: Iterator[pa.RecordBatch], response_class: type[Response],
                    on_answer: Callable[[Response], None], timeout_s: float | None,
                    relocate_s: float) -> pa.RecordBatch | None:
        """One DoPut from `first` on while the schema stays the same; the batch that changed it."""
        schema = first.schema
        what = "sending" if command_for().kind == pb.PutCommand.SEND else "preparing"
        writer, metadata = self._open_put(command_for, schema, what, timeout_s, relocate_s)
        where = self._location
        abandoned = threading.Event()
        outcome: list = []

        def run() -> None:
            try:
                outcome.append(_write_and_read(writer, metadata, first, pending, response_class, on_answer,
                                               abandoned))
            except BaseException as exc:  # the batches' iterator or on_answer raised: the caller's to see
                outcome.append(exc)

        # on a thread other than the caller's, so that the caller can give it up when the leader
        # moves (a Flight call cannot be cancelled from another thread; closing its client does not end it)
        self._watch(self._threads.start(run), where, what, abandoned)
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        written, answered, rest, failure = outcome[0]
        if failure is not None:
            if isinstance(failure, (flight.FlightUnavailableError, flight.FlightCancelledError)):
                self.reset()
            raise typed_error(failure, what) from None
        if answered != written:
            raise errors.TxmqError(f"{what}: the broker answered {answered} of {written} batches")
        return rest

    def _watch(self, done: threading.Event, where: str | None, what: str, abandoned: threading.Event) -> None:
        """Wait for a put stream until `done`; while it runs, ask the control channel every
        WATCH_INTERVAL_S where the data plane is, and give the stream up when it has moved (its
        thread ends at the stream's deadline, and writes and answers nothing more meanwhile)."""
        while not done.wait(WATCH_INTERVAL_S):
            try:
                now = self._location_of(*self._locate())
            except errors.BrokerUnavailable:
                continue  # no replica can tell now: the stream's own deadline bounds the wait
            if now != where:
                abandoned.set()
                self.reset()
                raise errors.BrokerUnavailable(f"{what}: the data plane moved from {where} to {now} while the "
                                               "stream was open (a new leader); whether its last batches were "
                                               "stored is unknown")


def _write_and_read(writer: flight.FlightStreamWriter, metadata: flight.FlightMetadataReader, first: pa.RecordBatch,
                    pending: Iterator[pa.RecordBatch], response_class: type[Response],
                    on_answer: Callable[[Response], None], abandoned: threading.Event
                    ) -> tuple[int, int, pa.RecordBatch | None, Exception | None]:
    """Write `first` and the following batches of its schema, then read their answers: (written,
    answered, the batch of another schema that ended the stream, the failure). Once `abandoned`,
    it takes no more batches and passes on no more answers (the caller has given the stream up)."""
    schema = first.schema
    written, answered, rest = 0, 0, None
    failure: Exception | None = None
    try:
        batch: pa.RecordBatch | None = first
        while batch is not None and not abandoned.is_set():
            if not batch.schema.equals(schema):
                rest = batch
                break
            writer.write_batch(batch)
            written += 1
            batch = next(pending, None)
        writer.done_writing()
        while answered < written:
            buffer = metadata.read()
            if buffer is None or abandoned.is_set():
                break
            on_answer(response_class.FromString(buffer.to_pybytes()))
            answered += 1
    except (flight.FlightError, pa.ArrowException, OSError) as exc:
        failure = exc
    try:
        writer.close()  # raises the broker's error when the stream ended with one
    except (flight.FlightError, pa.ArrowException, OSError) as exc:
        failure = exc
    return written, answered, rest, failure
