"""The compiled loops of pull_decode_kernel.py (numba, nopython, GIL released, cached on disk).

Importing this module imports numba; pull_decode_kernel.py imports it only for pulls
large enough to pay for that. Bodies are copied with LLVM's memcpy on addresses
(store/compiled_primitives.py). The compiled functions work on flat numpy arrays
only; the tables they read (system property names, the CRC property's name, hex
digits) are passed in as arguments by `scan_records` and `message_ids_of`, since
numba does not cache code that holds global arrays. `scan` returns a status
instead of raising: any record it would have to reject is left to the numpy
path, which names the problem (pull_decode_kernel.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from txmq.broker.store.pull_decode_kernel import (
    _FALLBACK,
    _SPECIAL,
    _MORE,
    _OK,
    KEYS,
    SYSTEM,
    TAG,
    TRANSACTION_ID,
    UNIQ_KEY,
    USER,
)
from txmq.broker.store.property_names import SYSTEM_PROPERTIES
from txmq.broker.store.message import (
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
)
from txmq.broker.store.compiled_primitives import load_u64, prefetch, trailing_zeros
from txmq.broker.store.compiled_primitives import memcpy as _memcpy
from txmq.broker.store.record_copy_numba import _find_properties
from txmq.broker.store.record_layout import (
    BORN_TS_AT,
    BODY_LEN_AT,
    CRC_PREFIX,
    CRC_TAIL_LEN,
    HEADER_V4_SIZE,
    HOST_V4_SIZE,
    HOST_V6_EXTRA,
    MAGIC_AT,
    MAGIC_CODE,
    PHYS_AT,
    QUEUE_ID_AT,
    QUEUE_OFFSET_AT,
    STORE_HOST_AT,
    STORE_TS_AT,
    SYSFLAG_AT,
)

_NAME_SEP, _PAIR_SEP, _SPACE = 1, 2, 32
_THREES = np.uint64(0x0303030303030303)
_HIGH_BITS = np.uint64(0x8080808080808080)
_BUCKETS = 256  # of the system-name hash table
_SEEN = 32  # property places whose names scan() remembers from the record before


@njit(cache=True, nogil=True, inline="always")
def _be(data, at, width):
    """The big-endian unsigned integer of `width` bytes at data[at]."""
    v = np.int64(0)
    for j in range(width):
        v = (v << 8) | np.int64(data[at + j])
    return v


@njit(cache=True, nogil=True, inline="always")
def _signed(v, width):
    bits = 8 * width
    if bits < 64 and v >= (np.int64(1) << (bits - 1)):
        return v - (np.int64(1) << bits)
    return v


@njit(cache=True, nogil=True)
def _utf8_ok(data, start, end):
    """Whether data[start:end] is valid UTF-8 (what Arrow's binary-to-string cast accepts)."""
    i = start
    while i < end:
        b = data[i]
        if b < 0x80:
            i += 1
            continue
        if 0xC2 <= b <= 0xDF:
            n, lo, hi = 1, 0x80, 0xBF
        elif b == 0xE0:
            n, lo, hi = 2, 0xA0, 0xBF
        elif 0xE1 <= b <= 0xEC or 0xEE <= b <= 0xEF:
            n, lo, hi = 2, 0x80, 0xBF
        elif b == 0xED:
            n, lo, hi = 2, 0x80, 0x9F
        elif b == 0xF0:
            n, lo, hi = 3, 0x90, 0xBF
        elif 0xF1 <= b <= 0xF3:
            n, lo, hi = 3, 0x80, 0xBF
        elif b == 0xF4:
            n, lo, hi = 3, 0x80, 0x8F
        else:
            return False
        if i + n >= end:  # the sequence is cut off
            return False
        c = data[i + 1]
        if c < lo or c > hi:
            return False
        for j in range(2, n + 1):
            c = data[i + j]
            if c < 0x80 or c > 0xBF:
                return False
        i += n + 1
    return True


@njit(cache=True, nogil=True, inline="always")
def _name_hash(data, at, length):
    """The bucket of the property name data[at:at+length] (length > 0) in the system-name table."""
    return (length * 131 + np.int64(data[at]) * 31 + np.int64(data[at + length // 2]) * 7
            + np.int64(data[at + length - 1])) & (_BUCKETS - 1)


def _name_table() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The system property names as a hash table: their bytes back to back, ordered by bucket,
    so a name is compared only with the one or two names of its bucket: (bytes, start of each
    name and one past the last, first name of each bucket, one past its last, each name's kind)."""
    encoded = [np.frombuffer(n.encode(), dtype=np.uint8) for n in SYSTEM_PROPERTIES]
    buckets = [int(_name_hash(b, 0, len(b))) for b in encoded]
    order = sorted(range(len(encoded)), key=lambda i: (buckets[i], encoded[i].tobytes()))
    starts = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum([len(encoded[i]) for i in order], out=starts[1:])
    first = np.zeros(_BUCKETS, dtype=np.int64)
    last = np.zeros(_BUCKETS, dtype=np.int64)
    for rank, i in enumerate(order):
        h = buckets[i]
        if last[h] == first[h]:
            first[h] = rank
        last[h] = rank + 1
    kinds = np.array([_SPECIAL.get(encoded[i].tobytes().decode(), SYSTEM) for i in order], dtype=np.int64)
    padding = np.zeros(8, dtype=np.uint8)  # _same_bytes reads up to 7 bytes past a name
    return np.concatenate([*(encoded[i] for i in order), padding]), starts, first, last, kinds


@njit(cache=True, nogil=True, inline="always")
def _same_bytes(a, b, length):
    """Whether the `length` bytes at raw addresses a and b are equal, eight bytes a step (both
    readable for up to 7 bytes past `length`)."""
    j = 0
    while j + 8 <= length:
        if load_u64(a + j) != load_u64(b + j):
            return False
        j += 8
    if j == length:
        return True
    rest = np.uint64(8 * (length - j))
    return ((load_u64(a + j) ^ load_u64(b + j)) & ((np.uint64(1) << rest) - np.uint64(1))) == 0


@njit(cache=True, nogil=True, inline="always")
def _kind(data, at, length, names, name_at, first, last, kinds):
    """What the property name data[at:at+length] is: a kind of pull_decode_kernel.py's. Names are
    compared eight bytes a step: the text's name is followed by its value and the CRC
    property, the table by padding."""
    if length == 0:
        return USER
    h = _name_hash(data, at, length)
    for i in range(first[h], last[h]):
        s = name_at[i]
        if name_at[i + 1] - s == length and _same_bytes(data.ctypes.data + at, names.ctypes.data + s, length):
            return kinds[i]
    if length >= 2 and data[at] == 95 and data[at + 1] == 95:  # "__": hidden from readers
        return SYSTEM
    return USER


@njit(cache=True, nogil=True, inline="always")
def _separator(address, at, high):
    """(where the first \\x01 or \\x02 at or after `at` is, `high` OR-ed with every byte before
    it), eight bytes a step: a byte below 3 is flagged by (w - 0x03..03) & ~w & 0x80..80, and
    the lowest flag is exact (a borrow only runs up from a flagged byte). A \\x00 is text, not a
    separator. The caller guarantees a separator before the readable bytes end."""
    while True:
        w = load_u64(address + at)
        flags = (w - _THREES) & ~w & _HIGH_BITS
        if flags == 0:
            high |= w
            at += 8
            continue
        k = np.int64(trailing_zeros(flags) >> np.uint64(3))
        if k:
            high |= w & ((np.uint64(1) << np.uint64(8 * k)) - np.uint64(1))
        at += k
        if (w >> np.uint64(8 * k)) & np.uint64(0xFF) != 0:
            return at, high
        at += 1  # a \\x00


_AHEAD = 4  # records ahead whose bytes scan() asks the CPU to load


@njit(cache=True, nogil=True, inline="always")
def _prefetch_record(src, a, size, size_of_data):
    """Start loading the record at data[a:a+size] into the cache, one request per line."""
    if a >= 0 and a + size <= size_of_data:
        for line in range(0, size, 64):
            prefetch(src + a + line)


@njit(cache=True, nogil=True)
def scan(data, at, phys, sizes, topic, names, name_at, first, last, kinds, crc_name, crc_tail,
         magic, born_v6, store_v6, body_offsets, bodies, tokens, pairs,
         in_place, final_size, final_host_len, drop_names, drop_len, drop_mask):
    """One pass over the records: header checks, fixed fields, each body copied into `bodies`
    (Arrow offsets into `body_offsets`: the records are read front to back once), and where
    the other columns' values are: KEYS tokens into `tokens` (start, length) and user
    properties into `pairs` (name start, length, value start, length). When those run out of
    rows the status is _MORE: the caller calls again with larger ones (growing them in here
    would cost reference counting on every pair).

    `in_place`: the records are the halves of messages committed by reference (`phys` and
    `sizes` the halves'), decoded as the records their slots stand for: the topic is not
    checked (a half lies in the half topic) but each slot's final_size[i] is, against the half's
    size with `topic`, a store host of final_host_len[i] bytes and less the properties
    drop_names[k] whose bit k is set in drop_mask[i] (as commit_ref.final_record cuts them);
    the caller overrides the fields the slot gives (queue, store time and host)."""
    n = len(at)
    o = 0
    src = data.ctypes.data
    dst = bodies.ctypes.data
    size_of_data = len(data)
    queue_id = np.empty(n, dtype=np.int32)
    queue_offset = np.empty(n, dtype=np.int64)
    born = np.empty(n, dtype=np.int64)
    stored = np.empty(n, dtype=np.int64)
    host_at = np.empty(n, dtype=np.int64)
    host_len = np.empty(n, dtype=np.int64)
    tag_at = np.zeros(n, dtype=np.int64)
    tag_len = np.full(n, -1, dtype=np.int64)
    uniq_at = np.zeros(n, dtype=np.int64)
    uniq_len = np.full(n, -1, dtype=np.int64)
    tx_at = np.zeros(n, dtype=np.int64)
    tx_len = np.full(n, -1, dtype=np.int64)
    key_count = np.zeros(n, dtype=np.int64)
    user_count = np.zeros(n, dtype=np.int64)
    n_tokens = 0
    n_pairs = 0
    # the previous record's names by position: records of one producer repeat them, so a name
    # equal to the one at its place in the record before has its kind (no table lookup)
    seen_at = np.zeros(_SEEN, dtype=np.int64)
    seen_len = np.full(_SEEN, -1, dtype=np.int64)
    seen_kind = np.zeros(_SEEN, dtype=np.int64)
    found = np.empty((drop_names.shape[0], 2), dtype=np.int64)
    status = _OK
    for i in range(n):
        if i + _AHEAD < n:
            _prefetch_record(src, at[i + _AHEAD], sizes[i + _AHEAD], size_of_data)
        a = at[i]
        if a < 0 or a + HEADER_V4_SIZE > size_of_data:
            status = _FALLBACK
            break
        size = _be(data, a, 4)
        if _be(data, a + MAGIC_AT, 4) != magic or _signed(_be(data, a + PHYS_AT, 8), 8) != phys[i] or size != sizes[i]:
            status = _FALLBACK
            break
        end = a + size
        flags = _signed(_be(data, a + SYSFLAG_AT, 4), 4)
        born_extra = HOST_V6_EXTRA if flags & born_v6 else 0
        store_extra = HOST_V6_EXTRA if flags & store_v6 else 0
        len_at = a + BODY_LEN_AT + born_extra + store_extra
        if end > size_of_data or len_at + 4 > end:
            status = _FALLBACK
            break
        queue_id[i] = _signed(_be(data, a + QUEUE_ID_AT, 4), 4)
        queue_offset[i] = _signed(_be(data, a + QUEUE_OFFSET_AT, 8), 8)
        born[i] = _signed(_be(data, a + BORN_TS_AT, 8), 8) * 1000
        stored[i] = _signed(_be(data, a + STORE_TS_AT + born_extra, 8), 8) * 1000
        host_at[i] = a + STORE_HOST_AT + born_extra
        host_len[i] = HOST_V4_SIZE + store_extra
        blen = _signed(_be(data, len_at, 4), 4)
        tail = len_at + 4 + blen
        if blen < 0 or tail + 3 > end:
            status = _FALLBACK
            break
        body_offsets[i] = o
        _memcpy(dst + o, src + len_at + 4, blen)
        o += blen
        topic_len = np.int64(data[tail])
        props_at = tail + 3 + topic_len
        if props_at > end or (not in_place and topic_len != len(topic)):
            status = _FALLBACK
            break
        for j in range(0 if in_place else topic_len):
            if data[tail + 1 + j] != topic[j]:
                status = _FALLBACK
                break
        if status != _OK:
            break
        crc_at = end - crc_tail
        if _signed(_be(data, props_at - 2, 2), 2) != end - props_at or crc_at < props_at:
            status = _FALLBACK
            break
        for j in range(len(crc_name)):
            if data[crc_at + j] != crc_name[j]:
                status = _FALLBACK
                break
        if status != _OK:
            break
        if in_place:  # the bytes the final record drops: most drop none (its size says)
            dropped = (size - store_extra + final_host_len[i] - HOST_V4_SIZE - topic_len + len(topic)
                       - final_size[i])
            if dropped:
                _find_properties(data, props_at, crc_at, drop_names, drop_len, found)
                for k in range(drop_names.shape[0]):
                    if (drop_mask[i] >> k) & 1 and found[k, 0] >= 0:
                        dropped -= found[k, 1] - found[k, 0]
            if dropped:
                status = _FALLBACK
                break
        stop = crc_at - 1  # the property text ends with the \x02 before the CRC property
        if stop <= props_at:
            continue
        if data[stop] != _PAIR_SEP:
            status = _FALLBACK
            break
        high = np.uint64(0)  # every byte of the text OR-ed: UTF-8 needs checking only if one is >= 0x80
        p = props_at
        place = 0
        while p <= stop:  # the \x02 at `stop` ends every search (8-byte reads stay in the record)
            q, high = _separator(src, p, high)  # the name ends at the first separator
            if data[q] != _NAME_SEP:
                status = _FALLBACK
                break
            r, high = _separator(src, q + 1, high)
            if data[r] != _PAIR_SEP:
                status = _FALLBACK
                break
            if place < _SEEN and seen_len[place] == q - p and _same_bytes(src + p, src + seen_at[place], q - p):
                kind = seen_kind[place]
            else:
                kind = _kind(data, p, q - p, names, name_at, first, last, kinds)
                if place < _SEEN:
                    seen_at[place], seen_len[place], seen_kind[place] = p, q - p, kind
            place += 1
            if kind == TAG:
                tag_at[i], tag_len[i] = q + 1, r - q - 1
            elif kind == UNIQ_KEY:
                uniq_at[i], uniq_len[i] = q + 1, r - q - 1
            elif kind == TRANSACTION_ID:
                tx_at[i], tx_len[i] = q + 1, r - q - 1
            elif kind == KEYS:
                t = q + 1
                while t < r:
                    if data[t] == _SPACE:
                        t += 1
                        continue
                    u = t
                    while u < r and data[u] != _SPACE:
                        u += 1
                    if n_tokens == len(tokens):
                        status = _MORE
                        break
                    tokens[n_tokens, 0], tokens[n_tokens, 1] = t, u - t
                    n_tokens += 1
                    key_count[i] += 1
                    t = u
                if status != _OK:
                    break
            elif kind == USER:
                if n_pairs == len(pairs):
                    status = _MORE
                    break
                pairs[n_pairs, 0], pairs[n_pairs, 1] = p, q - p
                pairs[n_pairs, 2], pairs[n_pairs, 3] = q + 1, r - q - 1
                n_pairs += 1
                user_count[i] += 1
            p = r + 1
        if status != _OK:
            break
        if high & _HIGH_BITS and not _utf8_ok(data, props_at, stop):
            status = _FALLBACK
            break
    body_offsets[n] = o
    return (status, queue_id, queue_offset, born, stored, host_at, host_len,
            tag_at, tag_len, uniq_at, uniq_len, tx_at, tx_len, key_count, tokens[:n_tokens], user_count,
            pairs[:n_pairs])


@njit(cache=True, nogil=True)
def gather(data, starts, lengths, offsets, values):
    """Fill Arrow offsets (int32, n + 1) and values with data[starts[i]:starts[i]+lengths[i]]
    back to back (no bytes where lengths[i] < 0)."""
    n = len(starts)
    o = 0
    src = data.ctypes.data
    dst = values.ctypes.data
    for i in range(n):
        offsets[i] = o
        k = lengths[i]
        if k > 0:
            _memcpy(dst + o, src + starts[i], k)
            o += k
    offsets[n] = o


@njit(cache=True, nogil=True)
def message_ids(data, uniq_at, uniq_len, hosts, host_at, host_len, phys, hex_digits, offsets, values):
    """Each record's UNIQ_KEY where it is set and not empty (in `data`), else its offset message
    id: the store host's bytes (in `hosts`: the records' own bytes, or the commit records' hosts
    of messages committed by reference), then the physical offset's 8 big-endian bytes, in
    uppercase hex."""
    n = len(uniq_at)
    o = 0
    for i in range(n):
        offsets[i] = o
        k = uniq_len[i]
        if k > 0:
            _memcpy(values.ctypes.data + o, data.ctypes.data + uniq_at[i], k)
            o += k
            continue
        h = host_at[i]
        for j in range(host_len[i]):
            b = hosts[h + j]
            values[o] = hex_digits[b >> 4]
            values[o + 1] = hex_digits[b & 15]
            o += 2
        v = phys[i]
        for j in range(7, -1, -1):
            b = (v >> (8 * j)) & 255
            values[o] = hex_digits[b >> 4]
            values[o + 1] = hex_digits[b & 15]
            o += 2
    offsets[n] = o


_NAMES = _name_table()
_CRC_NAME = np.frombuffer(CRC_PREFIX, dtype=np.uint8).copy()
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8).copy()


_NO_INT64S = np.zeros(0, dtype=np.int64)
_NO_NAMES = np.zeros((0, 1), dtype=np.uint8)


def scan_records(data, at, phys, sizes, topic, body_offsets, bodies, tokens, pairs, in_place=None):
    """`scan` with the tables and record-layout constants it reads; `in_place` (final sizes, store
    host lengths, drop name table, name lengths, drop masks) for halves of messages committed by reference."""
    refs = (False, _NO_INT64S, _NO_INT64S, _NO_NAMES, _NO_INT64S, _NO_INT64S) if in_place is None else (True, *in_place)
    return scan(data, at, phys, sizes, topic, *_NAMES, _CRC_NAME, CRC_TAIL_LEN, MAGIC_CODE,
                SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, body_offsets, bodies, tokens, pairs, *refs)


def message_ids_of(data, uniq_at, uniq_len, hosts, host_at, host_len, phys, offsets, values):
    """`message_ids` with its hex digits."""
    message_ids(data, uniq_at, uniq_len, hosts, host_at, host_len, phys, _HEX_DIGITS, offsets, values)
