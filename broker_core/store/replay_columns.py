"""A follower's dispatch of replicated bytes in columns: one compiled pass over the records
(replay_numba.scan_records) instead of a decode per record in Python.

Recovery.Replay.feed takes the complete groups it returns and lets its Python scan go on
from where the compiled one stopped (a blank, a split group, an IPv6 host, the torn or
incomplete tail), so both scans judge the log alike and only the common records change path.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from zlib import crc32

import numpy as np

from txmq.broker.store.commit_ref import COMMIT_REF_TOPIC
from txmq.broker.store.commitlog import CommitLog
from txmq.broker.store.consume_queue import ENTRY_DTYPE
from txmq.broker.store.message import (
    HALF_TOPIC,
    SYSFLAG_GROUP_MEMBER,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
)
from txmq.broker.store.record_layout import MIN_RECORD_SIZE

SCAN_ROWS = 8192  # records per compiled scan (one dispatch each)
SCAN_BYTES = 8 << 20


@functools.cache
def _compiled():
    """The compiled scan's module, imported on first use (it imports numba; cached on disk)."""
    from txmq.broker.store import replay_numba

    return replay_numba


@functools.cache
def load_compiled() -> None:
    """Load the compiled scan now (numba's import and the cached machine code); the buffer is
    read-only as scan_groups's (numba compiles per array type)."""
    k = _compiled()
    k.scan_records(np.frombuffer(b"", dtype=np.uint8), 0, 0, np.empty((0, k.COLUMNS), dtype=np.int64), k.TABLES,
                   k.UNIQ_PREFIX_CRC, k.CRC_PREFIX_BYTES, k.TAGS_NAME, k.UNIQ_NAME, k.KEYS_NAME)


@dataclass
class ScannedGroups:
    """Complete groups (or single records) from `start` to `end`, as dispatch takes them."""

    start: int
    end: int
    records: int
    queued: int
    queue_writes: dict[tuple[str, int], list]  # (topic, queue id) -> [first queue offset, packed entries]
    index_hashes: list[int]
    index_phys: list[int]
    index_times: list[int]


def scan_groups(commitlog: CommitLog, position: int) -> ScannedGroups | None:
    """The complete groups the compiled scan takes from `position` (a group boundary, in a log
    that only grows meanwhile), or None when it takes none and the Python scan must look."""
    seg = commitlog.segment_for(position)
    if seg is None:
        return None
    seg_cap_end = seg.start + seg.capacity
    available = min(commitlog.write_end, seg_cap_end) - position
    if available < MIN_RECORD_SIZE:
        return None
    buf = np.frombuffer(seg.read(position - seg.start, min(available, SCAN_BYTES)), dtype=np.uint8)
    k = _compiled()
    rows = np.empty((min(SCAN_ROWS, len(buf) // MIN_RECORD_SIZE), k.COLUMNS), dtype=np.int64)
    n = k.scan_records(buf, position, seg_cap_end, rows, k.TABLES, k.UNIQ_PREFIX_CRC, k.CRC_PREFIX_BYTES,
                       k.TAGS_NAME, k.UNIQ_NAME, k.KEYS_NAME)
    rows = rows[:n]
    try:
        topics = {int(f): bytes(buf[rows[f, k.TOPIC_AT] - position:rows[f, k.TOPIC_AT] - position
                                    + rows[f, k.TOPIC_LEN]]).decode() for f in np.unique(rows[:, k.TOPIC_FIRST])}
    except UnicodeDecodeError:
        return None  # the Python scan stops there
    # a commit record (COMMIT by reference) dispatches its slots: the Python scan takes its group
    refs = [f for f, t in topics.items() if t == COMMIT_REF_TOPIC]
    if refs:
        rows = rows[:int(np.flatnonzero(np.isin(rows[:, k.TOPIC_FIRST], refs))[0])]
    flags = rows[:, k.SYS_FLAG]
    group_ends = np.flatnonzero((flags & SYSFLAG_GROUP_MEMBER) == 0)
    if not len(group_ends):
        return None
    rows = rows[:group_ends[-1] + 1]
    flags = rows[:, k.SYS_FLAG]
    first = rows[:, k.TOPIC_FIRST]
    # NOT_TYPE and COMMIT records go to their queues, PREPARED ones only in the half topic
    # (dispatch.goes_to_queue)
    in_half = np.isin(first, [f for f, t in topics.items() if t == HALF_TOPIC])
    queued = ((flags & SYSFLAG_TRANSACTION_PREPARED) == 0) | (
        ((flags & SYSFLAG_TRANSACTION_MASK) == SYSFLAG_TRANSACTION_PREPARED) & in_half)
    q = rows[queued]
    queue_writes: dict[tuple[str, int], list] = {}
    if len(q):
        keys = (q[:, k.TOPIC_FIRST] << 32) | (q[:, k.QUEUE_ID] & 0xFFFFFFFF)
        codes, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(codes) + 1))
        for i, code in enumerate(codes):
            sel = q[order[bounds[i]:bounds[i + 1]]]
            offsets = sel[:, k.QUEUE_OFFSET]
            if len(offsets) > 1 and not np.all(np.diff(offsets) == 1):
                return None  # not one run: the Python scan writes it in runs
            entries = np.empty(len(sel), dtype=ENTRY_DTYPE)
            entries["phys"] = sel[:, k.PHYS]
            entries["size"] = sel[:, k.SIZE]
            entries["tag_hash"] = sel[:, k.TAG_HASH]
            queue_id = int(sel[0, k.QUEUE_ID])
            assert (int(code) & 0xFFFFFFFF) == queue_id & 0xFFFFFFFF
            queue_writes[(topics[int(code) >> 32], queue_id)] = [int(offsets[0]), entries.tobytes()]
    # index keys: each UNIQ_KEY, then each KEYS word as "topic#key" (dispatch.index_hashes's order)
    with_uniq = rows[rows[:, k.UNIQ_HASH] != k.NO_VALUE]
    hashes = with_uniq[:, k.UNIQ_HASH].tolist()
    phys = with_uniq[:, k.PHYS].tolist()
    times = with_uniq[:, k.STORE_TS].tolist()
    for row in rows[rows[:, k.KEYS_AT] != k.NO_VALUE]:
        at = int(row[k.KEYS_AT]) - position
        try:
            words = bytes(buf[at:at + int(row[k.KEYS_LEN])]).decode().split(" ")
        except UnicodeDecodeError:
            return None
        topic = topics[int(row[k.TOPIC_FIRST])]
        for word in words:
            if word:
                hashes.append(crc32(f"{topic}#{word}".encode()))
                phys.append(int(row[k.PHYS]))
                times.append(int(row[k.STORE_TS]))
    end = int(rows[-1, k.PHYS] + rows[-1, k.SIZE])
    return ScannedGroups(position, end, len(rows), int(queued.sum()), queue_writes, hashes, phys, times)
