"""A small thread pool for the RocketMQ protocol's short unary calls.

RocketMQ clients send one message per call and keep one call in flight per
producer, so many producers mean many calls at once. grpc's thread-pool server
runs each call on a thread of its own, while the GIL runs the Python work of
one at a time: eight producers keep eight threads handing the GIL and the
store's write lock to each other. Two threads, the other calls queued in between, do the same
work with few handoffs (figures: docs/benchmarks.md).

Only calls that never wait long go to this pool. Streams (ReceiveMessage,
PullMessage, Telemetry) hold their thread through a long poll or a session, and
the native service's calls carry large batches, long polls and COMMITs of
millions of halves: all of them stay on the main pool. With sync flush the pool
is off unless configured: a send then waits for its fsync, and group commit
batches the fsyncs of the writes in flight, which two threads would cap at two.

grpc runs a method's calls on the pool its behaviour names in the attribute
`experimental_thread_pool` (grpc's `_select_thread_pool_for_behavior`); a grpc
that does not know the attribute runs them on the main pool.
"""

from __future__ import annotations

from concurrent import futures
from typing import Callable

DEFAULT_WORKERS_ASYNC_FLUSH = 2
THREAD_NAME_PREFIX = "txmq-short"


def short_call_workers(configured: int | None, flush: str) -> int:
    """The pool's size: as configured, else 2 with async flush and 0 (no pool) with sync flush."""
    if configured is not None:
        return configured
    return DEFAULT_WORKERS_ASYNC_FLUSH if flush == "async" else 0


def short_call_pool(configured: int | None, flush: str) -> futures.ThreadPoolExecutor | None:
    workers = short_call_workers(configured, flush)
    if workers == 0:
        return None
    return futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=THREAD_NAME_PREFIX)


def run_on(pool: futures.ThreadPoolExecutor | None, behavior: Callable) -> Callable:
    """`behavior` (a unary handler) marked to run on `pool` (unchanged when there is no pool)."""
    if pool is not None:
        behavior.experimental_thread_pool = pool  # type: ignore[attr-defined]
    return behavior
