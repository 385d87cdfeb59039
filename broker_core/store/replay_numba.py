"""The compiled scan of replay_columns: walks CommitLog records, checks them as recovery's scan
does, and writes what dispatching each needs into one int64 row (numba, nopython).

Imported only through replay_columns._compiled (it imports numba).
"""

from __future__ import annotations

import zlib

import numpy as np
from numba import njit

from txmq.broker.store.compiled_primitives import CRC32_TABLES, crc32_update
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, SYSFLAG_SPLIT_GROUP
from txmq.broker.store.record_layout import (
    BLANK_MIN_BYTES,
    BODY_CRC_AT,
    BODY_LEN_AT,
    CRC_PREFIX,
    CRC_SUFFIX_LEN,
    CRC_TAIL_LEN,
    HEADER_V4_SIZE,
    HOST_V6_BITS,
    MAGIC_CODE,
    MIN_RECORD_SIZE,
    PHYS_AT,
    QUEUE_ID_AT,
    QUEUE_OFFSET_AT,
    STORE_TS_AT,
    SYSFLAG_AT,
)

# the columns of a scanned row
PHYS, SIZE, SYS_FLAG, QUEUE_ID, QUEUE_OFFSET, STORE_TS, TAG_HASH, UNIQ_HASH, TOPIC_FIRST, KEYS_AT, KEYS_LEN, \
    TOPIC_AT, TOPIC_LEN = range(13)
COLUMNS = 13
NO_VALUE = -1  # UNIQ_HASH and KEYS_AT of a record without that property

TAGS_NAME = np.frombuffer(PROP_TAGS.encode(), dtype=np.uint8).copy()
UNIQ_NAME = np.frombuffer(PROP_UNIQ_KEY.encode(), dtype=np.uint8).copy()
KEYS_NAME = np.frombuffer(PROP_KEYS.encode(), dtype=np.uint8).copy()
CRC_PREFIX_BYTES = np.frombuffer(CRC_PREFIX, dtype=np.uint8).copy()
TABLES = CRC32_TABLES
# the CRC of the index key prefix of a UNIQ_KEY ("#U#" + the key; dispatch.index_hashes)
UNIQ_PREFIX_CRC = np.uint32(zlib.crc32(b"#U#"))
MAX_TOPICS = 64  # distinct topics in one scan; a scan stops at the next one (the caller scans again)


@njit(cache=True, nogil=True, inline="always")
def _be(buf, at, width):
    v = np.int64(0)
    for i in range(width):
        v = (v << np.int64(8)) | np.int64(buf[at + i])
    return v


@njit(cache=True, nogil=True, inline="always")
def _same(buf, at, length, name):
    if length != len(name):
        return False
    for i in range(length):
        if buf[at + i] != name[i]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _same_bytes(buf, a, b, length):
    for i in range(length):
        if buf[a + i] != buf[b + i]:
            return False
    return True


@njit(cache=True, nogil=True)
def scan_records(buf, pos0, seg_cap_end, rows, tables, uniq_prefix_crc, crc_prefix, tags_name, uniq_name, keys_name):
    """Scan the records at the start of `buf` (which holds the log from `pos0`, inside a segment
    ending at `seg_cap_end`) into `rows`; returns how many it scanned. It stops before the first
    thing it does not take whole: the end of the data or of `rows`, a blank, a record that is
    incomplete, invalid (as recovery.scan judges it), of a split group or with an IPv6 host, or
    with properties it cannot parse. Recovery's Python scan goes on from there."""
    n = 0
    at = 0
    end_of_data = len(buf)
    topics = np.empty(MAX_TOPICS, dtype=np.int64)  # the first row of each distinct topic
    n_topics = 0
    while n < rows.shape[0]:
        if end_of_data - at < HEADER_V4_SIZE:
            break
        size = _be(buf, at, 4)
        if _be(buf, at + 4, 4) != MAGIC_CODE or size < MIN_RECORD_SIZE or size > end_of_data - at:
            break
        pos = pos0 + at
        end = at + size
        if _be(buf, at + PHYS_AT, 8) != pos or pos + size + BLANK_MIN_BYTES > seg_cap_end:
            break
        sys_flag = _be(buf, at + SYSFLAG_AT, 4)
        if sys_flag >= 2 ** 31:
            sys_flag -= 2 ** 32
        if sys_flag & (HOST_V6_BITS | SYSFLAG_SPLIT_GROUP):
            break
        body_len = _be(buf, at + BODY_LEN_AT, 4)
        body_at = at + HEADER_V4_SIZE
        tail_at = body_at + body_len
        if body_len >= 2 ** 31 or tail_at + 3 > end:
            break
        topic_len = np.int64(buf[tail_at])
        props_at = tail_at + 3 + topic_len
        if props_at > end or _be(buf, props_at - 2, 2) != end - props_at or end - props_at < CRC_TAIL_LEN:
            break
        crc_at = end - CRC_SUFFIX_LEN
        if buf[end - 1] != 2 or not _same(buf, crc_at - len(crc_prefix), len(crc_prefix), crc_prefix):
            break
        digits_ok = True
        want = np.int64(0)
        for i in range(10):
            d = np.int64(buf[crc_at + i]) - 48
            if d < 0 or d > 9:
                digits_ok = False
            want = want * 10 + d
        if not digits_ok:
            break
        crc = crc32_update(np.uint32(0), buf, at, body_at, tables)
        crc = crc32_update(crc, buf, tail_at, crc_at, tables)
        if np.int64(crc) != want:
            break
        if np.int64(crc32_update(np.uint32(0), buf, body_at, tail_at, tables)) != _be(buf, at + BODY_CRC_AT, 4):
            break
        # properties before the CRC property: name \x01 value \x02 ...; the last of a name counts
        tags_at = tags_len = uniq_at = uniq_len = keys_at = keys_len = np.int64(-1)
        p = props_at
        props_end = end - CRC_TAIL_LEN - 1  # the separator before the CRC property excluded
        parsed = True
        if props_at < end - CRC_TAIL_LEN:
            while p <= props_end:
                item_end = p
                while item_end < props_end and buf[item_end] != 2:
                    item_end += 1
                name_end = p
                while name_end < item_end and buf[name_end] != 1:
                    name_end += 1
                if name_end == item_end:
                    parsed = False
                    break
                value_at = name_end + 1
                if _same(buf, p, name_end - p, tags_name):
                    tags_at, tags_len = value_at, item_end - value_at
                elif _same(buf, p, name_end - p, uniq_name):
                    uniq_at, uniq_len = value_at, item_end - value_at
                elif _same(buf, p, name_end - p, keys_name):
                    keys_at, keys_len = value_at, item_end - value_at
                p = item_end + 1
        if not parsed:
            break
        topic_at = tail_at + 1
        first = -1
        for j in range(n_topics):  # a window holds a few topics: the first record of each names them
            k = topics[j]
            if rows[k, TOPIC_LEN] == topic_len and _same_bytes(buf, rows[k, TOPIC_AT] - pos0, topic_at, topic_len):
                first = k
                break
        if first < 0:
            if n_topics == MAX_TOPICS:
                break
            first = topics[n_topics] = n
            n_topics += 1
        row = rows[n]
        row[PHYS] = pos
        row[SIZE] = size
        row[SYS_FLAG] = sys_flag
        row[QUEUE_ID] = _be(buf, at + QUEUE_ID_AT, 4) - (2 ** 32 if buf[at + QUEUE_ID_AT] >= 128 else 0)
        row[QUEUE_OFFSET] = _be(buf, at + QUEUE_OFFSET_AT, 8)
        row[STORE_TS] = _be(buf, at + STORE_TS_AT, 8)
        row[TAG_HASH] = 0 if tags_len <= 0 else np.int64(crc32_update(np.uint32(0), buf, tags_at, tags_at + tags_len,
                                                                      tables)) + 1
        row[UNIQ_HASH] = NO_VALUE if uniq_len <= 0 else np.int64(
            crc32_update(uniq_prefix_crc, buf, uniq_at, uniq_at + uniq_len, tables))
        row[TOPIC_FIRST] = first
        row[KEYS_AT] = NO_VALUE if keys_len <= 0 else pos0 + keys_at
        row[KEYS_LEN] = keys_len
        row[TOPIC_AT] = pos0 + topic_at
        row[TOPIC_LEN] = topic_len
        n += 1
        at = end
    return n
