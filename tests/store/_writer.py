"""Crash-test writer: appends to a store in `sync` mode and reports every acknowledged append.

Usage: python _writer.py DATA_DIR SEED RUN_ID

Before each append it prints `BEGIN <json bodies> <group 0|1>`; after the append
returns (fsynced) it prints `ACK <json [[topic, queue, queue offset, body], ...]>`.
Both lines are flushed, so whatever the parent read before SIGKILL was printed
before the kill: an ACK line means the append had returned.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from txmq.broker.store import Message, MessageStore, StoreConfig

CONFIG = dict(flush_mode="sync", commitlog_segment_bytes=64 * 1024, consume_queue_entries_per_file=64,
              index_slots=128, index_entries_per_file=512, checkpoint_interval_ms=50)


def main() -> None:
    data_dir, seed, run_id = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng = random.Random(seed)
    store = MessageStore(StoreConfig(data_dir, **CONFIG))
    print("READY", flush=True)
    seq = 0
    while True:
        batch = []
        for _ in range(rng.randrange(1, 9)):
            body = f"{run_id}:{seq}".encode() + b"." * rng.randrange(0, 2000)
            seq += 1
            batch.append(Message(rng.choice(["A", "B"]), body, rng.randrange(3), {"KEYS": f"k{seq}"}))
        group = rng.random() < 0.4
        print("BEGIN", json.dumps([m.body.decode() for m in batch]), int(group), flush=True)
        results = store.append_group(batch) if group else store.append(batch)
        print("ACK", json.dumps([[r.topic, r.queue_id, r.queue_offset, m.body.decode()]
                                 for r, m in zip(results, batch)]), flush=True)


if __name__ == "__main__":
    main()
