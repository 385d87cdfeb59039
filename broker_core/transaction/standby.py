"""A follower's standby transaction table.

A follower writes no table snapshots, so a replica that takes over would replay every half and
op since it last led while the group serves nothing. A follower keeps the table instead,
replaying what it replicates as it goes, so a take-over replays only what arrived since the last
advance.

The table holds only what the follower's log holds: a cut of the log below a record the table
replayed (a divergent tail cut when it follows a new leader, or a restart at the leader's log
start) voids it, and the next advance starts again from the snapshots on disk.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, ContextManager, Protocol

from txmq.broker.store.message import HALF_TOPIC, OP_HALF_TOPIC

from .config import TransactionConfig
from .recovery import RecoveredTable, forget_resolved_before, replay_tail, start_table
from .snapshot import load_snapshots
from .store_seam import EngineStore

log = logging.getLogger(__name__)
STANDBY_BATCH = 128  # records read per hold of the replica's cut lock: its dispatch waits that long at most


class ReplicaLog(EngineStore, Protocol):
    """What the standby reads of a follower's store beyond the engine's seam."""

    log_cuts: list[int]

    def replica_reading(self) -> ContextManager[None]: ...


class StandbyTable:
    def __init__(self, store: ReplicaLog, config: TransactionConfig, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.config = config
        self.state_dir = config.state_dir_of(store.config.data_dir)
        self.clock = clock
        self._lock = threading.Lock()  # an advance and the hand-over
        self._table: RecoveredTable | None = None
        self._seen_cuts = 0
        self.voided = 0  # tables dropped because the log was cut below what they replayed
        self.taken = False

    def advance(self) -> None:
        """Replay what the follower's log gained since the last advance."""
        with self._lock:
            if self.taken:
                return
            self._void_if_cut()
            if self._table is None:
                self._seen_cuts = len(self.store.log_cuts)
                self._table = start_table(self.store, load_snapshots(self.state_dir))
            try:
                replay_tail(self._table, self.store, default_immunity_s=self.config.transaction_timeout_s,
                            max_immunity_s=self.config.max_immunity_s, batch_lock=self.store.replica_reading,
                            batch=STANDBY_BATCH)
            except BaseException:
                self._table = None  # half advanced: never handed over
                raise
            self._void_if_cut()  # a cut while it read: what it read may be gone
            if self._table is not None:
                horizon = int(self.clock() * 1000) - int(self.config.resolved_retention_s * 1000)
                finals, decisions = forget_resolved_before(self._table.finals, self._table.decisions, horizon)
                for k in finals:
                    del self._table.finals[k]
                for k in decisions:
                    del self._table.decisions[k]

    def take(self) -> RecoveredTable | None:
        """The table, handed over once (the store has just been made a leader's): None when a cut
        voided it or none was built; the engine then recovers from the snapshots as before."""
        with self._lock:
            self.taken = True
            self._void_if_cut()
            table, self._table = self._table, None
            return table

    def _void_if_cut(self) -> None:
        cuts = self.store.log_cuts[self._seen_cuts:]
        self._seen_cuts += len(cuts)
        table = self._table
        if table is None or not cuts:
            return
        # a snapshot it started from covers queue offsets, not log offsets: a cut below them shows there
        if (min(cuts) < table.replayed_end or self.store.max_offset(HALF_TOPIC, 0) < table.half_offset
                or self.store.max_offset(OP_HALF_TOPIC, 0) < table.op_offset):
            log.info("standby transaction table voided: the log was cut to %d", min(cuts))
            self._table = None
            self.voided += 1
