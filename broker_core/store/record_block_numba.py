"""The compiled loops of record_block.py: a block's records encoded in two passes (numba).

Imported by record_block only for blocks large enough to pay for loading it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from txmq.broker.store.compiled_primitives import (
    CRC32_TABLES,
    X2N_TABLE,
    crc32_combine,
    crc32_shift,
    crc32_update,
    memcpy,
)
from txmq.broker.store.record_layout import CRC_SUFFIX_LEN, HEADER_V4_SIZE

_DIGITS = CRC_SUFFIX_LEN - 1  # the record CRC's decimal digits, then "\x02"


@njit(cache=True, nogil=True)
def crc32_each(data, starts, lengths, out, crc_tables):
    """out[i] = zlib.crc32(data[starts[i]:starts[i] + lengths[i]]): the BODYCRC of new records' bodies."""
    for i in range(starts.shape[0]):
        out[i] = crc32_update(np.uint32(0), data, starts[i], starts[i] + lengths[i], crc_tables)


@njit(cache=True, nogil=True)
def fill_records(out, heads, head_len, body_addr, body_len, props_addr, props_len, tail_crc, tail_shift,
                 crc_tables, x2n):
    """Write everything of the records back to back into `out` but their headers and CRC digits
    (finish_records adds those once the records are placed), and take the CRC of each
    record's tail; return the bytes the records take.

    Record i is an IPv4 header (HEADER_V4_SIZE bytes), its body (body_len[i] bytes at address
    body_addr[i]), its tail: heads[i][:head_len[i]] (TOPICLEN, topic, PROPLEN) and its
    property string through the CRC property's name (props_len[i] bytes at
    props_addr[i]), then the record CRC: 10 digits and \x02. The record CRC covers the
    header and the tail; the tail does not depend on where the record lands, so its CRC
    (tail_crc[i]) and what combines it with the header's (tail_shift[i], crc32_shift of
    its length) are taken here, while its bytes are fresh in this core's cache. Nothing
    here depends on placement: a split group's part is filled while it is built, off the
    writing thread.
    """
    base = out.ctypes.data
    at = 0
    shift_of = -1
    shift = np.uint32(0)
    for i in range(head_len.shape[0]):
        at += HEADER_V4_SIZE
        memcpy(base + at, body_addr[i], body_len[i])
        at += body_len[i]
        tail = at
        for j in range(head_len[i]):
            out[at + j] = heads[i, j]
        at += head_len[i]
        memcpy(base + at, props_addr[i], props_len[i])
        at += props_len[i]
        tail_crc[i] = crc32_update(np.uint32(0), out, tail, at, crc_tables)
        if at - tail != shift_of:  # the tails of a part mostly have one length: one shift for them
            shift_of = at - tail
            shift = crc32_shift(shift_of, x2n)
        tail_shift[i] = shift
        at += _DIGITS + 1
    return at


@njit(cache=True, nogil=True)
def finish_records(out, headers, sizes, tail_crc, tail_shift, crc_tables):
    """Copy each record's header (its placement filled in) into records fill_records wrote and
    write its CRC digits: the header's CRC combined with the tail's. Return the bytes of the
    records. Only the header and the digits of a record are touched, not its body or tail."""
    base = out.ctypes.data
    header_base = headers.ctypes.data
    flat = headers.reshape(-1)
    at = 0
    for i in range(headers.shape[0]):
        memcpy(base + at, header_base + i * HEADER_V4_SIZE, HEADER_V4_SIZE)
        header_crc = crc32_update(np.uint32(0), flat, i * HEADER_V4_SIZE, (i + 1) * HEADER_V4_SIZE, crc_tables)
        crc = np.int64(crc32_combine(header_crc, tail_crc[i], tail_shift[i]))
        digits = at + sizes[i] - _DIGITS - 1
        for j in range(_DIGITS - 1, -1, -1):
            out[digits + j] = 48 + crc % 10
            crc //= 10
        out[digits + _DIGITS] = 2
        at += sizes[i]
    return at


__all__ = ["CRC32_TABLES", "X2N_TABLE", "fill_records", "finish_records"]
