"""Compiled loops of the filtered read (filter_read.py): a record's named property values found in
its CommitLog bytes without decoding the record, and those values gathered into Arrow buffers."""

from __future__ import annotations

import numpy as np
from numba import njit

import txmq.broker.store.compiled_primitives  # noqa: F401  (where numba may cache, before the njit below)
from txmq.broker.store.record_layout import (BODY_LEN_AT, HEADER_V4_SIZE, HOST_V6_EXTRA, MAGIC_AT, MAGIC_CODE,
                                             SYSFLAG_AT)
from txmq.broker.store.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6

NAME_SEP = 1   # "\x01" between a property's name and value
PAIR_SEP = 2   # "\x02" after a value


@njit(cache=True, inline="always")
def _u32(data, at):
    return (np.int64(data[at]) << 24) | (np.int64(data[at + 1]) << 16) | (np.int64(data[at + 2]) << 8) \
        | np.int64(data[at + 3])


@njit(cache=True, nogil=True)
def find_property_values(data, record_at, sizes, names, name_at, name_len, value_at, value_len, unreadable):
    """For record i at data[record_at[i]:] (sizes[i] bytes) and name k (names[name_at[k]:][:name_len[k]]),
    the first value's start and length in data (value_at[i, k], value_len[i, k]; length -1: no such
    property). A record whose layout does not hold together is marked in unreadable[i] and left to
    the full decode, which names what is wrong with it."""
    total = data.shape[0]
    k_names = name_at.shape[0]
    for i in range(record_at.shape[0]):
        for k in range(k_names):
            value_len[i, k] = -1
        at = record_at[i]
        end = at + sizes[i]
        if at < 0 or end > total or sizes[i] < HEADER_V4_SIZE + 3 or _u32(data, at + MAGIC_AT) != MAGIC_CODE:
            unreadable[i] = True
            continue
        sys_flag = _u32(data, at + SYSFLAG_AT)
        extra = 0
        if sys_flag & SYSFLAG_BORNHOST_V6:
            extra += HOST_V6_EXTRA
        if sys_flag & SYSFLAG_STOREHOST_V6:
            extra += HOST_V6_EXTRA
        body_len_at = at + BODY_LEN_AT + extra
        if body_len_at + 4 > end:
            unreadable[i] = True
            continue
        body_len = _u32(data, body_len_at)
        topic_at = body_len_at + 4 + body_len
        if topic_at + 3 > end:
            unreadable[i] = True
            continue
        props_len_at = topic_at + 1 + np.int64(data[topic_at])
        if props_len_at + 2 > end:
            unreadable[i] = True
            continue
        p = props_len_at + 2
        props_end = p + ((np.int64(data[props_len_at]) << 8) | np.int64(data[props_len_at + 1]))
        if props_end > end:
            unreadable[i] = True
            continue
        while p < props_end:
            sep = p
            while sep < props_end and data[sep] != NAME_SEP:
                sep += 1
            v = sep + 1
            v_end = v
            while v_end < props_end and data[v_end] != PAIR_SEP:
                v_end += 1
            if sep >= props_end:
                break
            n_len = sep - p
            for k in range(k_names):
                if value_len[i, k] >= 0 or name_len[k] != n_len:
                    continue
                same = True
                base = name_at[k]
                for j in range(n_len):
                    if data[p + j] != names[base + j]:
                        same = False
                        break
                if same:
                    value_at[i, k] = v
                    value_len[i, k] = v_end - v
            p = v_end + 1


@njit(cache=True, nogil=True)
def gather_values(data, value_at, value_len, offsets, out):
    """Copy each present value (value_len >= 0) to out at offsets[i]; offsets[i + 1] - offsets[i] is its length."""
    for i in range(value_at.shape[0]):
        length = value_len[i]
        if length > 0:
            src = value_at[i]
            dst = offsets[i]
            for j in range(length):
                out[dst + j] = data[src + j]
