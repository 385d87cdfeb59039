"""Which threads run which calls: two small pools beside grpc's main thread pool.

grpc's thread-pool server runs every call on a thread of its own from one large
pool (`max_workers`: long polls and telemetry streams each hold a thread for
their whole life). Two kinds of calls do better on a few threads of their own.

**Short calls** (`short_call_pool`): the RocketMQ protocol's unary calls, i.e.
sends, transaction ends, acks, routes and offsets. RocketMQ clients send one
message per call and keep one call in flight per producer, so many producers
mean many calls at once, while the GIL runs the Python work of one at a time:
eight producers keep eight threads handing the GIL and the store's write lock
to each other. Measured in-process with eight threads calling SendMessage +
EndTransaction: 7 context switches per transaction instead of 0.5 with one
thread, and 70% more CPU per transaction. On two threads, the other calls
queued in between, the same work makes few handoffs: over the wire, 8
producers of single-message transactions got 13% more transactions/s for 12%
less broker CPU each (against the same broker with the pool off, 3 alternating
rounds); one producer is unchanged. With sync flush this pool is off unless
configured: a send then waits for its fsync, and group commit batches the
fsyncs of the writes in flight, which two threads would cap at two.

**Pulls** (`pull_pool`): the native PullArrow. A pull is ~20 ms of numpy and
Arrow work on 16 MiB, much of it outside the GIL, so concurrent pulls spread
over the cores. The pool has all cores but one, at least one: the last core
stays with the rest of the broker and with a consumer on the same host (Spark
executors reading through shared memory). On this 2-core machine that is one
thread, and Spark's read of 2M rows went from 0.418–0.436 to 0.447–0.464 of
the in-memory source (3 alternating rounds): two pulls at once on two cores
cost 40–60% more broker CPU per row and took the core Spark needed.

Streams, long polls (WaitForOffsets) and the native service's other calls (large
batches, COMMITs of millions of halves) stay on the main pool.

grpc runs a method's calls on the pool its behaviour names in the attribute
`experimental_thread_pool` (grpc's `_select_thread_pool_for_behavior`); a grpc
that does not know the attribute runs them on the main pool, as before.
"""

from __future__ import annotations

import os
from concurrent import futures
from typing import Callable

DEFAULT_SHORT_CALL_WORKERS_ASYNC_FLUSH = 2
SHORT_CALL_THREAD_PREFIX = "txmq-short"
PULL_THREAD_PREFIX = "txmq-pull"


def short_call_workers(configured: int | None, flush: str) -> int:
    """The short-call pool's size: as configured, else 2 with async flush and 0 (no pool) with sync flush."""
    if configured is not None:
        return configured
    return DEFAULT_SHORT_CALL_WORKERS_ASYNC_FLUSH if flush == "async" else 0


def pull_workers(configured: int | None, cpu_count: int | None = None) -> int:
    """The pull pool's size: as configured, else all cores but one (at least one)."""
    if configured is not None:
        return configured
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    return max(1, cores - 1)


def short_call_pool(configured: int | None, flush: str) -> futures.ThreadPoolExecutor | None:
    return _pool(short_call_workers(configured, flush), SHORT_CALL_THREAD_PREFIX)


def pull_pool(configured: int | None) -> futures.ThreadPoolExecutor | None:
    return _pool(pull_workers(configured), PULL_THREAD_PREFIX)


def _pool(workers: int, prefix: str) -> futures.ThreadPoolExecutor | None:
    """A pool of `workers` threads; None for 0 (the calls stay on the main pool)."""
    if workers == 0:
        return None
    return futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=prefix)


def run_on(pool: futures.ThreadPoolExecutor | None, behavior: Callable) -> Callable:
    """`behavior` (a unary handler) marked to run on `pool` (unchanged when there is no pool)."""
    if pool is not None:
        behavior.experimental_thread_pool = pool  # type: ignore[attr-defined]
    return behavior
