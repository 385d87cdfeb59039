"""A client-side check-back session: answer the broker's "did it commit?" questions.

The session keeps one server stream open (reconnecting with backoff while the
producer lives); for each check request it calls the handler and, for COMMIT
or ROLLBACK, ends the transaction with source "check". UNKNOWN answers nothing:
the broker asks again later, up to its maximum number of checks. IN_PROGRESS tells
the broker the producer is still working on it: asked again later, its checks do not
count towards the maximum while the transaction is younger than the broker's bound.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Sequence

import grpc

from txmq.broker import errors
from txmq.broker.client.types import CheckRequest, LocalTransactionState
from txmq.broker.protocol.native_status import error_from

if TYPE_CHECKING:
    from txmq.broker.client.native_client import NativeClient

log = logging.getLogger(__name__)

RECONNECT_START_S = 0.1
RECONNECT_MAX_S = 5.0


class CheckbackSession:
    """A background thread holding one check-back stream for (producer_group, topics)."""

    def __init__(self, client: "NativeClient", producer_group: str, topics: Sequence[str],
                 handler: Callable[[CheckRequest], str | LocalTransactionState]) -> None:
        self.client = client
        self.producer_group = producer_group
        self.topics = list(topics)
        self.handler = handler
        self.answered = 0
        self.in_progress = 0
        self.checks = 0
        self._registered = threading.Event()
        self._stop = threading.Event()
        self._call = None
        self._thread = threading.Thread(target=self._run, name=f"txmq-checkback-{producer_group}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait_registered(self, timeout_s: float = 10.0) -> bool:
        """True once the broker has registered this session (checks can be routed to it)."""
        return self._registered.wait(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5)

    def __enter__(self) -> "CheckbackSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        backoff = RECONNECT_START_S
        while not self._stop.is_set():
            try:
                self._call = self.client._open_checkback_stream(self.producer_group, self.topics)
                for frame in self._call:
                    if frame.status.code and frame.status.code != 20000:
                        raise error_from(frame.status)
                    if frame.registered:
                        self._registered.set()
                        backoff = RECONNECT_START_S
                        continue
                    self._answer(frame)
            except grpc.RpcError as exc:
                if self._stop.is_set():
                    break
                log.debug("check-back stream ended: %s", exc)
                if isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNAVAILABLE:
                    self.client._fail_over()  # a group's other replicas reach its (new) leader
            except errors.TxmqError as exc:
                log.warning("check-back session refused: %s", exc)
            except Exception:  # a failing handler must not kill the session
                log.exception("check-back session error")
            finally:
                self._registered.clear()
            if self._stop.wait(backoff):
                break
            backoff = min(backoff * 2, RECONNECT_MAX_S)

    def _answer(self, frame) -> None:
        from txmq.broker.client.native_client import received_message

        self.checks += 1
        request = CheckRequest(transaction_id=frame.transaction_id, producer_group=frame.producer_group,
                               message=received_message(frame.half) if frame.HasField("half") else None,
                               check_times=frame.check_times)
        try:
            state = LocalTransactionState.parse(self.handler(request))
        except Exception:
            log.exception("check-back handler failed for transaction %s; answering UNKNOWN", frame.transaction_id)
            return
        if state is LocalTransactionState.UNKNOWN:
            return
        if state is LocalTransactionState.IN_PROGRESS:
            try:
                self.client.end_transaction(frame.transaction_id, state.value, source="check",
                                            producer_group=self.producer_group or None)
                self.in_progress += 1
            except errors.TxmqError as exc:  # e.g. a broker of an earlier release: as UNKNOWN
                log.warning("check-back answer IN_PROGRESS for %s refused: %s", frame.transaction_id, exc)
            return
        try:
            self.client.end_transaction(frame.transaction_id, state.value, source="check",
                                        producer_group=self.producer_group or None)
            self.answered += 1
        except errors.TxmqError as exc:
            log.warning("check-back answer %s for %s refused: %s", state.value, frame.transaction_id, exc)
