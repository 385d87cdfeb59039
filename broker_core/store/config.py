"""StoreConfig: every tunable of the message store in one place.

Defaults follow RocketMQ where it has one (1 GiB CommitLog segments, 500 ms
async flush, 72 h retention); index files are smaller than RocketMQ's because a
txmq broker is usually one process on one machine. Tests shrink the sizes so
that segment, queue-file and index-file rolls are exercised with little data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass
class StoreConfig:
    data_dir: Path
    flush_mode: Literal["async", "sync"] = "async"
    flush_interval_ms: int = 500
    commitlog_segment_bytes: int = 1 << 30
    consume_queue_entries_per_file: int = 300_000
    index_slots: int = 500_000
    index_entries_per_file: int = 2_000_000
    max_body_bytes: int = 4 << 20
    max_properties_bytes: int = 32767
    retention_hours: float = 72
    disk_max_used_ratio: float = 0.75
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    checkpoint_interval_ms: int = 1000
    # The newest bytes of the CommitLog kept in the page cache; flushed bytes older than
    # that are dropped from it (page_cache.py). 0: never drop (the kernel decides alone).
    page_cache_keep_bytes: int = 2 << 30
    # A replica of a replicated group: its log may end inside a split group whose END the
    # leader has yet to send, so recovery keeps that group open instead of calling it dead.
    replica: bool = False

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if self.flush_mode not in ("async", "sync"):
            raise ValueError(f"flush_mode must be 'async' or 'sync', got {self.flush_mode!r}")
        if self.commitlog_segment_bytes < 4096:
            raise ValueError(f"commitlog_segment_bytes must be at least 4096, got {self.commitlog_segment_bytes}")
        if self.page_cache_keep_bytes < 0:
            raise ValueError(f"page_cache_keep_bytes must not be negative, got {self.page_cache_keep_bytes}")
        if self.consume_queue_entries_per_file < 1 or self.index_slots < 1 or self.index_entries_per_file < 1:
            raise ValueError("queue-file and index sizes must be positive")
