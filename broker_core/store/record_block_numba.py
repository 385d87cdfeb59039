"""The compiled loop of record_block.py: a block's records encoded in one pass (numba).

Imported by record_block only for blocks large enough to pay for loading it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from txmq.broker.store.compiled_primitives import CRC32_TABLES, crc32_update, memcpy

_HEADER = 88  # an IPv4 header: the only kind a RecordBlock holds
_DIGITS = 10  # the record CRC's decimal digits, then "\x02"


@njit(cache=True, nogil=True)
def encode_records(out, headers, heads, head_len, body_addr, body_len, props_addr, props_len, crc_tables):
    """Write the records back to back into `out`; return the bytes written.

    Record i is headers[i] (88 bytes, its placement already filled in), its body
    (body_len[i] bytes at address body_addr[i]), heads[i][:head_len[i]] (TOPICLEN,
    topic, PROPLEN), its property string through the CRC property's name
    (props_len[i] bytes at props_addr[i]) and the record CRC: 10 digits and \\x02.
    The CRC covers the header, then everything from TOPICLEN through the CRC
    property's name (the body has its own, in the header).
    """
    base = out.ctypes.data
    header_base = headers.ctypes.data
    at = 0
    for i in range(headers.shape[0]):
        record = at
        memcpy(base + at, header_base + i * _HEADER, _HEADER)
        at += _HEADER
        memcpy(base + at, body_addr[i], body_len[i])
        at += body_len[i]
        tail = at
        for j in range(head_len[i]):
            out[at + j] = heads[i, j]
        at += head_len[i]
        memcpy(base + at, props_addr[i], props_len[i])
        at += props_len[i]
        crc = crc32_update(np.uint32(0), out, record, record + _HEADER, crc_tables)
        crc = np.int64(crc32_update(crc, out, tail, at, crc_tables))
        for j in range(_DIGITS - 1, -1, -1):
            out[at + j] = 48 + crc % 10
            crc //= 10
        out[at + _DIGITS] = 2
        at += _DIGITS + 1
    return at


__all__ = ["CRC32_TABLES", "encode_records"]
