"""The compiled loop of record_copy.py: the sources of many copies read in one pass (numba).

A COMMIT of a Spark micro-batch copies a million halves. Read column-wise with
numpy (columnar_read.decode_columns, then a property index over the gathered
tails), each part of the copy costs a dozen array passes, and every pass takes
the GIL back from the thread writing the previous part; the part builder ends up
waiting for the GIL more than it computes. This loop reads each source once,
checks it as decode_columns does, and finds the properties a copy needs
(dispatch inputs, properties to drop) while it is there, all without the GIL.

Imported by record_copy only for copies large enough to pay for loading it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from txmq.broker.store.compiled_primitives import load_u64, trailing_zeros
from txmq.broker.store.record_layout import (
    BODY_CRC_AT,
    BODY_LEN_AT,
    BORN_HOST_AT,
    BORN_TS_AT,
    CRC_SUFFIX_LEN,
    FLAG_AT,
    HEADER_V4_SIZE,
    HOST_V4_SIZE,
    HOST_V6_BITS,
    MAGIC_AT,
    MAGIC_CODE,
    PHYS_AT,
    RECONSUME_AT,
    SYSFLAG_AT,
)

# What scan_sources found wrong with a source (0: nothing). The caller names the source.
BAD_NONE = 0
BAD_TRUNCATED_HEADER = 1
BAD_MAGIC = 2
BAD_NOT_A_RECORD_START = 3
BAD_SIZE = 4
BAD_BODY_LENGTH = 5
BAD_TOPIC = 6
BAD_PROPERTIES = 7
IPV6_HOST = 8  # not an error: a source with an IPv6 host, which the numpy path copies
WHAT_IS_WRONG = {
    BAD_TRUNCATED_HEADER: "truncated record header", BAD_MAGIC: "bad magic code",
    BAD_NOT_A_RECORD_START: "queue entry does not point at a record start",
    BAD_SIZE: "record size disagrees with its queue entry", BAD_BODY_LENGTH: "body length does not fit the record size",
    BAD_TOPIC: "topic does not fit the record",
    BAD_PROPERTIES: "properties length or CRC property position disagree with the record size",
}

# Rows of the `columns` matrix scan_sources fills (int64, one column per source).
BODY_AT, BODY_LEN, PROPS_AT, PROPS_LEN, BORN_TS, SYS_FLAG, FLAG, RECONSUME, BODY_CRC = range(9)
COLUMN_ROWS = 9


@njit(cache=True, inline="always")
def _u32(data, at):
    return (np.int64(data[at]) << 24) | (np.int64(data[at + 1]) << 16) | (np.int64(data[at + 2]) << 8) \
        | np.int64(data[at + 3])


@njit(cache=True, inline="always")
def _i32(data, at):
    value = _u32(data, at)
    return value - (np.int64(1) << 32) if value >= (np.int64(1) << 31) else value


@njit(cache=True, inline="always")
def _i64(data, at):
    return (_u32(data, at) << 32) | _u32(data, at + 4)


@njit(cache=True, nogil=True)
def scan_sources(data, record_at, phys, sizes, crc_prefix, names, name_len, columns, born_host, found):
    """Read and check the sources at data[record_at[i]:], record i named by physical offset phys[i]
    and size sizes[i]; return (0, 0) or (what is wrong, the first source it is wrong with).

    Fills, per source i: columns[:, i] (the rows named above; PROPS_LEN runs through the
    CRC property's name, as a copy re-uses it), born_host[i] (the 8 stored bytes) and
    found[i, k] = (start, end) of the property named names[k][:name_len[k]] in the
    property string ("name\\x01value\\x02", end past the \\x02), or (-1, -1).
    A source with an IPv6 host stops the scan with IPV6_HOST.
    """
    size_of_data = data.shape[0]
    tail_len = crc_prefix.shape[0] + CRC_SUFFIX_LEN
    for i in range(record_at.shape[0]):
        at = record_at[i]
        if at < 0 or at + HEADER_V4_SIZE > size_of_data:
            return BAD_TRUNCATED_HEADER, i
        size = _u32(data, at)
        if _u32(data, at + MAGIC_AT) != MAGIC_CODE:
            return BAD_MAGIC, i
        if _i64(data, at + PHYS_AT) != phys[i]:
            return BAD_NOT_A_RECORD_START, i
        sys_flag = _i32(data, at + SYSFLAG_AT)
        if sys_flag & HOST_V6_BITS:
            return IPV6_HOST, i
        end = at + size
        if size != sizes[i] or end > size_of_data:
            return BAD_SIZE, i
        body_len = _i32(data, at + BODY_LEN_AT)
        body_at = at + HEADER_V4_SIZE
        topic_at = body_at + body_len
        if body_len < 0 or topic_at + 3 > end:
            return BAD_BODY_LENGTH, i
        props_at = topic_at + 3 + np.int64(data[topic_at])
        if props_at > end:
            return BAD_TOPIC, i
        crc_name_at = end - tail_len
        props_field = (np.int64(data[props_at - 2]) << 8) | np.int64(data[props_at - 1])
        if props_field != end - props_at or crc_name_at < props_at:
            return BAD_PROPERTIES, i
        for j in range(crc_prefix.shape[0]):
            if data[crc_name_at + j] != crc_prefix[j]:
                return BAD_PROPERTIES, i
        columns[BODY_AT, i] = body_at
        columns[BODY_LEN, i] = body_len
        columns[PROPS_AT, i] = props_at
        columns[PROPS_LEN, i] = end - CRC_SUFFIX_LEN - props_at
        columns[BORN_TS, i] = _i64(data, at + BORN_TS_AT)
        columns[SYS_FLAG, i] = sys_flag
        columns[FLAG, i] = _i32(data, at + FLAG_AT)
        columns[RECONSUME, i] = _i32(data, at + RECONSUME_AT)
        columns[BODY_CRC, i] = _u32(data, at + BODY_CRC_AT)
        for j in range(HOST_V4_SIZE):
            born_host[i, j] = data[at + BORN_HOST_AT + j]
        _find_properties(data, props_at, crc_name_at, names, name_len, found[i])
    return BAD_NONE, 0


@njit(cache=True, inline="always")
def _next_separator(base, p, stop):
    """The position of the first \\x01 or \\x02 in the bytes [p, stop) at address `base`, or
    `stop`: eight bytes a step (a word's bytes equal to 1 or 2 found by the zero-byte test on
    it xor 0x01.. and xor 0x02..; the lowest hit of that test is exact). A step may read up to
    7 bytes past `stop`: the callers' strings are followed by the CRC property (20 bytes)."""
    ones = np.uint64(0x0101010101010101)
    twos = np.uint64(0x0202020202020202)
    highs = np.uint64(0x8080808080808080)
    while p < stop:
        word = load_u64(base + p)
        a = word ^ ones
        b = word ^ twos
        hits = ((a - ones) & ~a | (b - ones) & ~b) & highs
        if hits:
            at = p + np.int64(trailing_zeros(hits) >> np.uint64(3))
            return at if at < stop else stop
        p += 8
    return stop


@njit(cache=True, inline="always")
def _find_properties(data, start, stop, names, name_len, found):
    """found[k] = (start, end) of property k in data[start:stop] (properties "name\\x01value\\x02"
    back to back), or (-1, -1). Names and values hold no \\x01 or \\x02 (validated when the
    source was written); a string that breaks that ends the walk, never a read past the record."""
    for k in range(names.shape[0]):
        found[k, 0] = -1
        found[k, 1] = -1
    base = data.ctypes.data
    p = start
    while p < stop:
        q = _next_separator(base, p, stop)
        if q >= stop or data[q] != 1:
            return
        r = _next_separator(base, q + 1, stop)
        if r >= stop or data[r] != 2:
            return
        for k in range(names.shape[0]):
            n = name_len[k]
            if q - p != n or found[k, 0] >= 0:
                continue
            same = True
            for j in range(n):
                if data[p + j] != names[k, j]:
                    same = False
                    break
            if same:
                found[k, 0] = p
                found[k, 1] = r + 1
        p = r + 1


__all__ = ["BAD_NONE", "COLUMN_ROWS", "IPV6_HOST", "WHAT_IS_WRONG", "scan_sources"]
