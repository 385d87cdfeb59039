"""The compiled loop of commit_ref.final_records: the records a pull's slots stand for, in one pass (numba).

A pull of messages committed by reference reads thousands of slots; building each final
record in Python (commit_ref.final_record) cost ten times the read of a copy. This loop
writes them all, from the halves' bytes and the columns commit_ref.final_records laid
out, without the GIL: per record a header, one memcpy of the body, the half's
property string less the dropped properties, and the record CRC over header and tail.
commit_ref.final_record is its pure-Python twin and oracle (tests/store/test_commit_ref.py
compares them); anything this loop does not handle (an IPv6 host, a damaged half) makes it
return a status, and the caller takes the twin, which names the problem.

Imported by commit_ref only on the first read of slots.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from txmq.broker.store.commit_ref import SLOT_DTYPE, SLOT_MAGIC, SLOT_SIZE
from txmq.broker.store.compiled_primitives import CRC32_TABLES, crc32_update, memcpy
from txmq.broker.store.record_copy_numba import _find_properties, _i32, _i64, _u32
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

# where slot_columns reads each field (commit_ref.SLOT_DTYPE owns the layout)
_HALF_PHYS, _HALF_SIZE, _FINAL_SIZE, _QUEUE_ID, _TOPIC_INDEX, _BACK, _QUEUE_OFFSET = (
    SLOT_DTYPE.fields[name][1] for name in ("half_phys", "half_size", "final_size", "queue_id", "topic_index", "back",
                                            "queue_offset"))

OK = 0
FALLBACK = 1  # the Python twin decides: an IPv6 host, or a half or size that does not match

_DIGITS = CRC_SUFFIX_LEN - 1


@njit(cache=True, inline="always")
def _put32(out, at, v):
    for j in range(4):
        out[at + j] = (v >> (24 - 8 * j)) & 0xFF


@njit(cache=True, inline="always")
def _put64(out, at, v):
    for j in range(8):
        out[at + j] = (v >> (56 - 8 * j)) & 0xFF


@njit(cache=True, nogil=True)
def slot_columns(data, slot_at, columns):
    """columns[:, i] = slot i's HALFPHYS, HALFSIZE, FINALSIZE, QUEUEID, TOPICINDEX, BACK, QUEUEOFFSET
    (the slot at data[slot_at[i]:]); False when one is not a slot."""
    for i in range(slot_at.shape[0]):
        s = slot_at[i]
        if s < 0 or s + SLOT_SIZE > data.shape[0] or _u32(data, s) != SLOT_SIZE or _u32(data, s + 4) != SLOT_MAGIC:
            return False
        columns[0, i] = _i64(data, s + _HALF_PHYS)
        columns[1, i] = _i32(data, s + _HALF_SIZE)
        columns[2, i] = _i32(data, s + _FINAL_SIZE)
        columns[3, i] = _i32(data, s + _QUEUE_ID)
        columns[4, i] = (np.int64(data[s + _TOPIC_INDEX]) << 8) | np.int64(data[s + _TOPIC_INDEX + 1])
        columns[5, i] = _u32(data, s + _BACK)
        columns[6, i] = _i64(data, s + _QUEUE_OFFSET)
    return True


@njit(cache=True, nogil=True)
def write_finals(halves, half_at, half_phys, half_size, out, out_at, final_size, queue_id, queue_offset, address,
                 topics, topic_at, topic_len, commit_ts, commit_host, commit_flags, drop_mask, commit_of,
                 crc_prefix, names, name_len, kept_flag_bits, commit_flag_bits, crc_tables):
    """Write at out[out_at[i]:] the record slot i stands for; return (OK, 0) or (FALLBACK, i).

    Slot i's half is halves[half_at[i]:] (physical offset half_phys[i], half_size[i] bytes);
    its final record takes final_size[i] bytes, queue_id[i], queue_offset[i], address[i] as its
    physical offset, the topic topics[topic_at[i]:+topic_len[i]], and from its commit record c =
    commit_of[i] the store time commit_ts[c], store host commit_host[c] (8 bytes) and the flag bits
    commit_flags[c] & commit_flag_bits; it keeps the half's flag bits kept_flag_bits and drops the
    properties names[k] whose bit k is set in drop_mask[c]. A record is laid out as
    commit_ref.final_record lays it out (record_layout.py has the layout).
    """
    size_of_halves = halves.shape[0]
    tail_len = crc_prefix.shape[0] + CRC_SUFFIX_LEN
    found = np.empty((names.shape[0], 2), dtype=np.int64)
    base = out.ctypes.data
    src = halves.ctypes.data
    for i in range(half_at.shape[0]):
        h = half_at[i]
        if h < 0 or h + HEADER_V4_SIZE > size_of_halves:
            return FALLBACK, i
        size = _u32(halves, h)
        end = h + size
        if (_u32(halves, h + MAGIC_AT) != MAGIC_CODE or size != half_size[i] or end > size_of_halves
                or _i64(halves, h + PHYS_AT) != half_phys[i]):
            return FALLBACK, i
        sys_flag = _i32(halves, h + SYSFLAG_AT)
        if sys_flag & HOST_V6_BITS:
            return FALLBACK, i
        body_len = _i32(halves, h + BODY_LEN_AT)
        topic_pos = h + HEADER_V4_SIZE + body_len
        if body_len < 0 or topic_pos + 3 > end:
            return FALLBACK, i
        props_at = topic_pos + 3 + np.int64(halves[topic_pos])
        crc_name_at = end - tail_len
        if props_at > crc_name_at:
            return FALLBACK, i
        for j in range(crc_prefix.shape[0]):
            if halves[crc_name_at + j] != crc_prefix[j]:
                return FALLBACK, i
        c = commit_of[i]
        tlen = topic_len[i]
        # the slot's final size says how many property bytes the record drops: most drop none
        dropped = HEADER_V4_SIZE + body_len + 3 + tlen + (crc_name_at - props_at) + tail_len - final_size[i]
        for k in range(names.shape[0]):
            found[k, 0] = -1
        if dropped:
            mask = drop_mask[c]
            _find_properties(halves, props_at, crc_name_at, names, name_len, found)
            for k in range(names.shape[0]):
                if (mask >> k) & 1 and found[k, 0] >= 0:
                    dropped -= found[k, 1] - found[k, 0]
                else:
                    found[k, 0] = -1
            if dropped:
                return FALLBACK, i
        kept = final_size[i] - (HEADER_V4_SIZE + body_len + 3 + tlen + tail_len)
        total = final_size[i]
        o = out_at[i]
        if o < 0 or o + total > out.shape[0]:
            return FALLBACK, i
        # the header
        _put32(out, o, total)
        _put32(out, o + MAGIC_AT, MAGIC_CODE)
        memcpy(base + o + BODY_CRC_AT, src + h + BODY_CRC_AT, 4)
        _put32(out, o + BODY_CRC_AT + 4, queue_id[i])
        memcpy(base + o + FLAG_AT, src + h + FLAG_AT, 4)
        _put64(out, o + FLAG_AT + 4, queue_offset[i])
        _put64(out, o + PHYS_AT, address[i])
        _put32(out, o + SYSFLAG_AT, (sys_flag & kept_flag_bits) | (commit_flags[c] & commit_flag_bits))
        memcpy(base + o + BORN_TS_AT, src + h + BORN_TS_AT, 8 + HOST_V4_SIZE)  # born time and host
        _put64(out, o + BORN_HOST_AT + HOST_V4_SIZE, commit_ts[c])
        for j in range(HOST_V4_SIZE):
            out[o + BORN_HOST_AT + HOST_V4_SIZE + 8 + j] = commit_host[c, j]
        memcpy(base + o + RECONSUME_AT, src + h + RECONSUME_AT, 4)
        _put64(out, o + RECONSUME_AT + 4, half_phys[i])
        _put32(out, o + BODY_LEN_AT, body_len)
        # the body, then the tail: topic, properties less the dropped ones, the CRC property's name
        memcpy(base + o + HEADER_V4_SIZE, src + h + HEADER_V4_SIZE, body_len)
        t = o + HEADER_V4_SIZE + body_len
        out[t] = tlen
        for j in range(tlen):
            out[t + 1 + j] = topics[topic_at[i] + j]
        p = t + 1 + tlen
        props_field = kept + tail_len
        out[p] = (props_field >> 8) & 0xFF
        out[p + 1] = props_field & 0xFF
        p += 2
        at = props_at
        while at < crc_name_at:  # the kept runs between dropped properties, in order
            cut, cut_end = crc_name_at, crc_name_at
            for k in range(names.shape[0]):
                if found[k, 0] >= at and found[k, 0] < cut:
                    cut, cut_end = found[k, 0], found[k, 1]
            memcpy(base + p, src + at, cut - at)
            p += cut - at
            at = cut_end
        memcpy(base + p, src + crc_name_at, crc_prefix.shape[0])
        p += crc_prefix.shape[0]
        crc = crc32_update(crc32_update(np.uint32(0), out, o, o + HEADER_V4_SIZE, crc_tables), out, t, p,
                           crc_tables)
        value = np.int64(crc)
        for j in range(_DIGITS - 1, -1, -1):
            out[p + j] = 48 + value % 10
            value //= 10
        out[p + _DIGITS] = 2
    return OK, 0


__all__ = ["CRC32_TABLES", "FALLBACK", "OK", "slot_columns", "write_finals"]
