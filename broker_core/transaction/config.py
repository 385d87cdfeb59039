"""Settings of the transaction engine and its check-back service.

One dataclass for both because check-back timing (immunity, interval, max
checks) is a property of the transaction table the engine keeps: the engine
decides when a transaction is due, the service only drives the rounds.
Times are seconds (floats), so tests can run check-back at millisecond scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from txmq.broker.timer.schedule import DEFAULT_MAX_DELAY_S


@dataclass
class TransactionConfig:
    # A half is not checked back before it is this old (RocketMQ's transactionTimeOut, 6 s).
    transaction_timeout_s: float = 6.0
    # A per-message CHECK_IMMUNITY_TIME_IN_SECONDS overrides the timeout, capped here (1 h).
    max_immunity_s: float = 3600.0
    # Time between two check-backs of the same transaction, and between two service rounds.
    check_interval_s: float = 30.0
    # Delivered check-backs before the transaction is discarded (RocketMQ: 15).
    max_checks: int = 15
    # A live producer's IN_PROGRESS answer (a Spark micro-batch still running) sets the checks
    # back to zero while the transaction is younger than this: "ask later" without a limit on how
    # often, but not forever (past it the answer counts as UNKNOWN does).
    in_progress_max_age_s: float = 3600.0
    # A transaction whose checks never reach a producer is discarded after this age (72 h).
    orphan_timeout_s: float = 72 * 3600.0
    # At most this many transactions are handed to the listener per round: the
    # check-back "queue" is bounded; the rest stay due for the next round.
    max_checks_per_round: int = 10_000
    # Committed/rolled-back ids are remembered (for idempotent repeats and
    # conflict refusals) this long after their resolution.
    resolved_retention_s: float = 72 * 3600.0
    # Where the table snapshot lives; None = <store data_dir>/transaction.
    state_dir: Path | None = None
    # A snapshot of the table is written when this many seconds passed since the
    # last one (checked on each check-back round and at close).
    snapshot_interval_s: float = 10.0
    # The latest delivery time (from now) a half may carry in TIMER_DELIVER_MS: the timer's
    # horizon (the broker's --timer-max-delay), checked at prepare so a COMMIT never schedules past it.
    timer_max_delay_s: float = DEFAULT_MAX_DELAY_S

    def state_dir_of(self, data_dir: Path) -> Path:
        """Where a store's table snapshots live: state_dir, or its data directory's `transaction`."""
        return Path(self.state_dir or Path(data_dir) / "transaction")

    def __post_init__(self) -> None:
        if self.transaction_timeout_s < 0 or self.check_interval_s <= 0:
            raise ValueError("transaction_timeout_s must be >= 0 and check_interval_s > 0")
        if self.in_progress_max_age_s < 0:
            raise ValueError("in_progress_max_age_s must be >= 0")
        if self.max_checks < 0 or self.max_checks_per_round <= 0:
            raise ValueError("max_checks must be >= 0 and max_checks_per_round > 0")
