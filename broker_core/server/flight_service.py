"""The broker's Arrow Flight service: the data plane for bulk reads and writes.

- DoGet streams a queue range (ticket: a native `PullRequest`) as record batches in
  the Spark source's schema; each batch's app_metadata is a `PullProgress`. A ticket whose
  `subscribe` is set is a push subscription: a stream of every queue's committed
  messages as they are published, that ends only when the client or the broker goes.
- DoPut takes a stream of batches (descriptor command: a native `PutCommand`) as plain
  sends or as a transaction's halves, and answers each batch on the metadata stream
  with the `SendResponse` or `PrepareResponse` the gRPC call would give.
- DoAction `end-transaction` (body: a native `EndTransactionRequest`) ends a transaction and
  answers the `EndTransactionResponse` the gRPC call would give.
- GetFlightInfo (descriptor path: [topic]) and ListFlights give a plain Flight client one
  endpoint per queue, ending at a consistent cut: any Arrow tool can read a topic.

The transport is Flight's C++ gRPC server: record batches go to and from the wire without
Python touching their bytes. The work itself is the native service's (`NativeService.
pull_stream`, `send_rows`, `prepare_rows`), so a call has one implementation whichever
transport carries it. Errors travel as a native `Status` in the Flight error's
extra_info, so the client re-raises the broker's exact error class.
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Generator, Iterator, TypeVar

import pyarrow as pa
import pyarrow.flight as flight
from google.protobuf.message import DecodeError

from txmq.broker import errors
from txmq.broker.protocol import native_pb2 as pb
from txmq.broker.protocol.native_arrow import END_TRANSACTION_ACTION, PULL_SCHEMA, RECORDS_SCHEMA
from txmq.broker.protocol.native_status import status_for
from txmq.broker.server.auth import ANONYMOUS, Authenticator, Identity
from txmq.broker.server.native_service import NativeService

log = logging.getLogger(__name__)

_CALLER = "txmq-caller"
# Threads that build the streams' next batches: about one per core, whatever the number of streams.
READ_AHEAD_THREADS = 2


def flight_error(exc: BaseException) -> flight.FlightError:
    """The Flight error carrying `exc` as a native Status (its class and fields) in extra_info."""
    status = status_for(exc).SerializeToString()
    message = str(exc) or type(exc).__name__
    if isinstance(exc, errors.Unauthorized):
        return flight.FlightUnauthenticatedError(message, extra_info=status)
    if isinstance(exc, errors.TxmqError):
        return flight.FlightServerError(message, extra_info=status)
    return flight.FlightInternalError(f"internal error: {message}", extra_info=status)


class _Caller(flight.ServerMiddleware):
    """Who made a call: its Identity and its client id (check-backs go back to that client)."""

    def __init__(self, identity: Identity, client_id: str) -> None:
        self.identity = identity
        self.client_id = client_id


class _CallerFactory(flight.ServerMiddlewareFactory):
    """Authenticates every call with the gRPC services' accounts and HMAC signature headers."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator

    def start_call(self, info, headers):
        client_id = (headers.get("x-mq-client-id") or [""])[0]
        if not self.authenticator.enabled:
            return _Caller(ANONYMOUS, client_id)
        metadata = [(name, values[0]) for name, values in headers.items() if values]
        try:
            identity = self.authenticator.authenticate(metadata)
        except errors.TxmqError as exc:
            raise flight_error(exc) from None
        return _Caller(identity, client_id)


def _parse(message_class, payload: bytes, what: str):
    try:
        return message_class.FromString(payload)
    except DecodeError:
        raise errors.BadRequest(f"malformed {what}: not a {message_class.DESCRIPTOR.full_name} "
                                f"({len(payload)} bytes)") from None


def _guarded(fn: Callable) -> Callable:
    """Every failure leaves as a Flight error naming the problem; unexpected ones are logged."""
    def handle(self, context, *args):
        try:
            return fn(self, context, *args)
        except flight.FlightError:
            raise
        except Exception as exc:
            if not isinstance(exc, errors.TxmqError):
                log.exception("flight %s failed", fn.__name__)
            raise flight_error(exc) from None
    handle.__name__ = fn.__name__
    return handle


class TxmqFlightServer(flight.FlightServerBase):
    """Flight over a NativeService; listens from construction until `shutdown()`."""

    def __init__(self, service: NativeService, host: str, port: int, *, authenticator: Authenticator,
                 tls_cert: Path | None = None, tls_key: Path | None = None, max_batch_bytes: int = 256 << 20) -> None:
        scheme = "grpc+tls" if tls_cert else "grpc+tcp"
        where = f"[{host}]" if ":" in host else host
        certificates = [flight.CertKeyPair(Path(tls_cert).read_bytes(), Path(tls_key).read_bytes())] if tls_cert else []
        super().__init__(f"{scheme}://{where}:{port}", tls_certificates=certificates,
                         middleware={_CALLER: _CallerFactory(authenticator)})
        self.service = service
        self.tls = bool(tls_cert)
        # a put's batch is held in memory whole while it is written: larger ones are refused
        self.max_batch_bytes = max_batch_bytes
        # Flight asks a stream for its next batch only once the current one is written: these
        # threads build it meanwhile, so decoding and sending overlap
        self._read_ahead = ThreadPoolExecutor(READ_AHEAD_THREADS, thread_name_prefix="txmq-flight-read")

    def shutdown(self) -> None:
        super().shutdown()
        self._read_ahead.shutdown(wait=False, cancel_futures=True)

    def _caller(self, context) -> _Caller:
        caller = context.get_middleware(_CALLER)
        assert caller is not None, "every Flight call passes the caller middleware"
        return caller

    def _identity(self, context) -> Identity:
        return self._caller(context).identity

    # ---- reads ---------------------------------------------------------------
    @_guarded
    def do_get(self, context, ticket):
        request = _parse(pb.PullRequest, ticket.ticket, "ticket")
        if request.HasField("subscribe"):
            # no read-ahead: a subscription waits for publishes, which would hold a pool thread; and
            # Flight asks for the next batch only once this one is written, which bounds what it holds
            pushed = self.service.subscribe_stream(self._identity(context), request.subscribe, context.is_cancelled)
            return flight.GeneratorStream(PULL_SCHEMA, _with_metadata(pushed))
        batches = self.service.pull_stream(self._identity(context), request)
        schema = RECORDS_SCHEMA if request.records else PULL_SCHEMA
        return flight.GeneratorStream(schema, _read_ahead(_with_metadata(batches), self._read_ahead))

    @_guarded
    def get_flight_info(self, context, descriptor):
        return self._flight_info(self._identity(context), descriptor)

    def _flight_info(self, identity: Identity, descriptor) -> flight.FlightInfo:
        if descriptor.descriptor_type != flight.DescriptorType.PATH or len(descriptor.path) != 1:
            raise errors.BadRequest("describe a topic with a one-element path descriptor: "
                                    "FlightDescriptor.for_path(topic)")
        topic = descriptor.path[0].decode("utf-8", "replace")
        tickets = self.service.flight_endpoints(identity, topic)
        endpoints = [flight.FlightEndpoint(t.SerializeToString(), []) for t in tickets]
        rows = sum(t.end_offset - t.start_offset for t in tickets)
        return flight.FlightInfo(PULL_SCHEMA, descriptor, endpoints, rows, -1)

    @_guarded
    def list_flights(self, context, criteria):
        identity = self._identity(context)
        infos = []
        for topic in self.service.store.topics.list(include_system=False):
            if identity.may_subscribe(topic.name):
                infos.append(self._flight_info(identity, flight.FlightDescriptor.for_path(topic.name)))
        return iter(infos)

    # ---- writes --------------------------------------------------------------
    @_guarded
    def do_put(self, context, descriptor, reader, writer):
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            raise errors.BadRequest("a put's descriptor must be a command (a txmq PutCommand)")
        command = _parse(pb.PutCommand, descriptor.command, "put command")
        if command.kind not in (pb.PutCommand.SEND, pb.PutCommand.PREPARE):
            raise errors.BadRequest("a put command's kind must be SEND or PREPARE")
        caller = self._caller(context)
        transaction_id = command.transaction_id
        for chunk in _chunks(reader):
            batch = chunk.data
            if batch.nbytes > self.max_batch_bytes:
                raise errors.BadRequest(f"a put batch of {batch.nbytes} bytes is over the broker's limit of "
                                        f"{self.max_batch_bytes} (max_message_bytes): send smaller batches")
            table = pa.Table.from_batches([batch])
            if command.kind == pb.PutCommand.SEND:
                response = self.service.send_rows(caller.identity, command.default_topic, table, (),
                                                  return_message_ids=command.return_message_ids)
            else:
                response = self.service.prepare_rows(caller.identity, caller.client_id, transaction_id, command.producer_group,
                                                     command.sender, command.default_topic, table, (),
                                                     return_message_ids=command.return_message_ids,
                                                     participants=tuple(command.participants))
                transaction_id = response.transaction_id
            writer.write(pa.py_buffer(response.SerializeToString()))

    # ---- actions -------------------------------------------------------------
    @_guarded
    def do_action(self, context, action):
        if action.type != END_TRANSACTION_ACTION:
            raise errors.BadRequest(f"unknown Flight action {action.type!r}: this broker answers "
                                    f"{END_TRANSACTION_ACTION!r}")
        request = _parse(pb.EndTransactionRequest, action.body.to_pybytes(), "end-transaction action")
        response = self.service.end_transaction(self._identity(context), request)
        return [flight.Result(pa.py_buffer(response.SerializeToString()))]

    def list_actions(self, context):
        return [flight.ActionType(END_TRANSACTION_ACTION, "end a transaction: an EndTransactionRequest's "
                                                          "EndTransactionResponse")]


def _with_metadata(batches: Iterator[tuple[pa.RecordBatch, pb.PullProgress]]):
    """(batch, app_metadata) pairs for a GeneratorStream; a failure mid-stream leaves as a Flight error."""
    try:
        for batch, progress in batches:
            yield batch, pa.py_buffer(progress.SerializeToString())
    except flight.FlightError:
        raise
    except Exception as exc:
        if not isinstance(exc, errors.TxmqError):
            log.exception("flight do_get failed mid-stream")
        raise flight_error(exc) from None


T = TypeVar("T")
_END = object()


def _read_ahead(items: Generator[T, None, None], pool: Executor) -> Iterator[T]:
    """`items` in order, each next one made on `pool` while the caller handles the one before."""
    pending = pool.submit(next, items, _END)
    try:
        while (item := pending.result()) is not _END:
            pending = pool.submit(next, items, _END)
            yield item
    finally:
        if not pending.cancel():
            pending.exception()  # a generator cannot be closed while it runs: wait for it first
        items.close()


def _chunks(reader) -> Iterator:
    """The put's batches; a schema that is not a send's, or a stream cut off, is refused by name."""
    while True:
        try:
            yield reader.read_chunk()
        except StopIteration:
            return
        except (pa.ArrowInvalid, OSError) as exc:
            raise errors.BadRequest(f"the put stream could not be read: {exc}") from None
