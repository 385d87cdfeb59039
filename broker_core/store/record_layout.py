"""The CommitLog record layout: RocketMQ's v1 message layout plus a whole-record CRC.

The one owner of the byte layout: Python code, numpy and numba kernels all read
these names (numba freezes module-level ints as constants). Big-endian; offsets
are for IPv4 hosts, and each IPv6 host before a field moves it by HOST_V6_EXTRA::

    0  TOTALSIZE        4   whole record, these 4 bytes included
    4  MAGICCODE        4   MAGIC_CODE
    8  BODYCRC          4   CRC32 of the body
   12  QUEUEID          4
   16  FLAG             4
   20  QUEUEOFFSET      8
   28  PHYSICALOFFSET   8
   36  SYSFLAG          4
   40  BORNTIMESTAMP    8
   48  BORNHOST         4+4  (16+4 when SYSFLAG_BORNHOST_V6)
   56  STORETIMESTAMP   8
   64  STOREHOST        4+4  (16+4 when SYSFLAG_STOREHOST_V6)
   72  RECONSUMETIMES   4
   76  PREPAREDTRANSACTIONOFFSET 8
   84  BODYLEN          4, then the body
       TOPICLEN         1, then the topic (UTF-8)
       PROPLEN          2, then the properties: name \\x01 value \\x02 ...

txmq addition: the last property is always ``__CRC32#`` (PROP_CRC32) whose value
is the record CRC as exactly 10 decimal digits, so a record always ends with
``__CRC32#\\x01DDDDDDDDDD\\x02``. The record CRC is CRC32 over every byte of the
record except the body and the last 11 bytes (the 10 digits and the final
``\\x02``): the header from TOTALSIZE through BODYLEN, then TOPICLEN through the
``__CRC32#\\x01`` prefix. The body is covered through BODYCRC, which is inside
the covered header, so a flipped bit anywhere in a record is detected while the
body is only checksummed once on the hot path.

A *blank* record (RocketMQ's end-of-segment filler) is TOTALSIZE + BLANK_MAGIC_CODE
and pads a segment to its end when the next record does not fit.
"""

from __future__ import annotations

import struct

import numpy as np

from txmq.broker.store.message import PROP_CRC32, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6

MAGIC_CODE = 0xDAA320A7
BLANK_MAGIC_CODE = 0xCBD43194
BLANK_MIN_BYTES = 8  # a segment always keeps room for a blank record's TOTALSIZE + MAGIC

TOTALSIZE_AT = 0
MAGIC_AT = 4
BODY_CRC_AT = 8
QUEUE_ID_AT = 12
FLAG_AT = 16
QUEUE_OFFSET_AT = 20
PHYS_AT = 28
SYSFLAG_AT = 36
BORN_TS_AT = 40
BORN_HOST_AT = 48
STORE_TS_AT = 56  # + HOST_V6_EXTRA with an IPv6 born host
STORE_HOST_AT = 64  # + HOST_V6_EXTRA with an IPv6 born host
RECONSUME_AT = 72  # + HOST_V6_EXTRA per IPv6 host
PREPARED_AT = 76  # + HOST_V6_EXTRA per IPv6 host
BODY_LEN_AT = 84  # + HOST_V6_EXTRA per IPv6 host
HEADER_V4_SIZE = 88
HOST_V4_SIZE = 8  # 4 address bytes and a 4-byte port
HOST_V6_SIZE = 20
HOST_V6_EXTRA = HOST_V6_SIZE - HOST_V4_SIZE
HEADER_MAX_SIZE = HEADER_V4_SIZE + 2 * HOST_V6_EXTRA
HOST_V6_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6

PROP_NAME_SEP = "\x01"
PROP_SEP = "\x02"
CRC_PREFIX = (PROP_CRC32 + PROP_NAME_SEP).encode()
CRC_SUFFIX_LEN = 11  # 10 digits + "\x02"
CRC_TAIL_LEN = len(CRC_PREFIX) + CRC_SUFFIX_LEN  # "__CRC32#\x01" + 10 digits + "\x02"
MIN_RECORD_SIZE = HEADER_V4_SIZE + 3 + CRC_TAIL_LEN  # TOPICLEN and PROPLEN, empty body and topic


def _header_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    born = f"{HOST_V6_SIZE if born_v6 else HOST_V4_SIZE}s"
    store = f"{HOST_V6_SIZE if store_v6 else HOST_V4_SIZE}s"
    # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QOFF POFF SYSFLAG BORNTS BORNHOST STORETS STOREHOST
    # RECONSUME PREPARED BODYLEN
    return struct.Struct(f">IIIiiqqiq{born}q{store}iqi")


HEADERS = {(b, s): _header_struct(b, s) for b in (False, True) for s in (False, True)}
HEADER_V4 = HEADERS[(False, False)]
PREFIX = struct.Struct(">II")  # TOTALSIZE, MAGIC (also a blank record's head)

# HEADER_V4 as a numpy record: column-wise code decodes or encodes the headers of many records at once
HEADER_V4_DTYPE = np.dtype([
    ("size", ">u4"), ("magic", ">u4"), ("body_crc", ">u4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("phys", ">i8"), ("sys_flag", ">i4"), ("born_ts", ">i8"), ("born_ip", ">u4"),
    ("born_port", ">u4"), ("store_ts", ">i8"), ("store_ip", ">u4"), ("store_port", ">u4"),
    ("reconsume", ">i4"), ("prepared", ">i8"), ("body_len", ">i4")])
# The fields before BORNHOST, at fixed offsets whatever the host families are
FIXED_HEAD_DTYPE = np.dtype(HEADER_V4_DTYPE.descr[:9])
FIXED_HEAD = struct.Struct(">IIIiiqqiq")
REST = struct.Struct(">iqi")  # RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLEN, after STOREHOST

assert HEADER_V4.size == HEADER_V4_SIZE == HEADER_V4_DTYPE.itemsize
assert FIXED_HEAD.size == FIXED_HEAD_DTYPE.itemsize == BORN_HOST_AT and REST.size == HEADER_V4_SIZE - RECONSUME_AT
assert [HEADER_V4_DTYPE.fields[name][1] for name in ("body_crc", "flag", "phys", "sys_flag", "born_ts", "store_ts",
                                                     "reconsume", "body_len")] == [
    BODY_CRC_AT, FLAG_AT, PHYS_AT, SYSFLAG_AT, BORN_TS_AT, STORE_TS_AT, RECONSUME_AT, BODY_LEN_AT]


def header_size(sys_flag: int) -> int:
    """TOTALSIZE through BODYLEN for a record with these SYSFLAG host bits."""
    return (HEADER_V4_SIZE + (HOST_V6_EXTRA if sys_flag & SYSFLAG_BORNHOST_V6 else 0)
            + (HOST_V6_EXTRA if sys_flag & SYSFLAG_STOREHOST_V6 else 0))
