"""The CommitLog record codec, one record at a time: the per-record Python implementation that
the compiled and column-wise paths are tested against and that names what is wrong with a record.
The byte layout itself is record_layout.py's.
"""

from __future__ import annotations

import re
import socket
import struct
from itertools import chain, repeat
from typing import Sequence

import numpy as np

from txmq.broker.errors import StoreError
from txmq.broker.store.checksum import crc32
from txmq.broker.store.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, Message, StoredMessage
from txmq.broker.store.record_layout import (
    BLANK_MAGIC_CODE,
    BLANK_MIN_BYTES,
    CRC_PREFIX,
    CRC_SUFFIX_LEN,
    CRC_TAIL_LEN,
    HEADER_V4,
    HEADER_V4_DTYPE,
    HEADER_V4_SIZE,
    HEADERS,
    HOST_V6_BITS,
    HOST_V6_EXTRA,
    MAGIC_CODE,
    MIN_RECORD_SIZE,
    PREFIX,
    PROP_NAME_SEP,
    PROP_SEP,
    STORE_TS_AT,
    SYSFLAG_AT,
)


class RecordCorrupted(StoreError):
    """Bytes at a CommitLog position are not a valid record (torn, damaged or not a record start)."""


_host_cache: dict[tuple[str, int], tuple[bytes, bool]] = {}
_host_str_cache: dict[bytes, tuple[str, int]] = {}


def encode_host(host: tuple[str, int]) -> tuple[bytes, bool]:
    """(address bytes + port, is_ipv6). Cached: a broker sees few distinct hosts."""
    hit = _host_cache.get(host)
    if hit is not None:
        return hit
    ip, port = host
    ip = ip.strip("[]")
    try:
        raw, v6 = socket.inet_pton(socket.AF_INET, ip), False
    except OSError:
        try:
            raw, v6 = socket.inet_pton(socket.AF_INET6, ip), True
        except OSError:
            raw, v6 = b"\0\0\0\0", False  # a name, not an address: stored as 0.0.0.0
    hit = (raw + int(port & 0xFFFFFFFF).to_bytes(4, "big"), v6)
    if len(_host_cache) > 4096:
        _host_cache.clear()
    _host_cache[host] = hit
    return hit


def decode_host(raw: bytes) -> tuple[str, int]:
    hit = _host_str_cache.get(raw)
    if hit is None:
        family = socket.AF_INET6 if len(raw) == 20 else socket.AF_INET
        hit = (socket.inet_ntop(family, raw[:-4]), int.from_bytes(raw[-4:], "big"))
        if len(_host_str_cache) > 4096:
            _host_str_cache.clear()
        _host_str_cache[raw] = hit
    return hit


def encode_properties(properties: dict[str, str]) -> bytes:
    """RocketMQ's property string (name \\x01 value \\x02 ...), without the CRC property."""
    if not properties:
        return b""
    return "".join([f"{k}\x01{v}\x02" for k, v in properties.items()]).encode()


def without_property(props: bytes, name: bytes) -> bytes:
    """`props` (name \\x01 value \\x02 ...) without the first property called `name`: what a COMMIT's
    final records drop from their halves (the compiled scans cut the same first occurrence)."""
    head = name + b"\x01"
    at = props.find(head)
    while at > 0 and props[at - 1] != 2:  # inside a longer name or a value: look further
        at = props.find(head, at + 1)
    if at < 0:
        return props
    end = props.find(b"\x02", at)
    if end < 0:
        raise ValueError(f"property {name!r} is not terminated")
    return props[:at] + props[end + 1:]


def message_id(store_host_raw: bytes, physical_offset: int) -> str:
    """RocketMQ's offset message id: store IP + port + physical offset, uppercase hex."""
    return store_host_raw.hex().upper() + "%016X" % physical_offset


_id_runs: dict[int, struct.Struct] = {}
_ID_CHUNKS = re.compile(r"[0-9A-F]{32}")


def message_ids(store_host_raw: bytes, physical_offsets: Sequence[int]) -> list[str]:
    """message_id() for many records of one IPv4 store host: one struct pack and one hex
    conversion for the whole batch, then cut into 32-character ids."""
    n = len(physical_offsets)
    if n < 8 or len(store_host_raw) != 8:
        prefix = store_host_raw.hex().upper()
        return [prefix + "%016X" % p for p in physical_offsets]
    run = _id_runs.get(n)
    if run is None:
        if len(_id_runs) > 1024:
            _id_runs.clear()
        run = _id_runs[n] = struct.Struct(">" + "8sQ" * n)
    return _ID_CHUNKS.findall(run.pack(*chain.from_iterable(zip(repeat(store_host_raw), physical_offsets))).hex().upper())


def parse_message_id(msg_id: str) -> tuple[bytes, int] | None:
    """(store host bytes, physical offset) of an offset message id, or None if it is not one."""
    if len(msg_id) not in (32, 56):
        return None
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        return None
    return raw[:-8], int.from_bytes(raw[-8:], "big")


def record_size(body_len: int, topic_len: int, props_len: int, born_v6: bool = False, store_v6: bool = False) -> int:
    """TOTALSIZE of a record; props_len excludes the CRC property."""
    header = HEADER_V4_SIZE + (HOST_V6_EXTRA if born_v6 else 0) + (HOST_V6_EXTRA if store_v6 else 0)
    return header + body_len + 3 + topic_len + props_len + CRC_TAIL_LEN


def encode_record(out: list, msg: Message, topic_raw: bytes, props_raw: bytes, size: int, sys_flag: int,
                  queue_offset: int, physical_offset: int, store_timestamp: int,
                  store_host: tuple[bytes, bool]) -> None:
    """Append the parts of one record to `out` (joined later into one write buffer)."""
    body = msg.body
    born_raw, born_v6 = encode_host(msg.born_host)
    store_raw, store_v6 = store_host
    if born_v6:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if store_v6:
        sys_flag |= SYSFLAG_STOREHOST_V6
    header = HEADERS[(born_v6, store_v6)].pack(
        size, MAGIC_CODE, crc32(body), msg.queue_id, msg.flag, queue_offset, physical_offset, sys_flag,
        msg.born_timestamp or store_timestamp, born_raw, store_timestamp, store_raw, msg.reconsume_times,
        msg.prepared_transaction_offset, len(body))
    tail = b"".join((len(topic_raw).to_bytes(1, "big"), topic_raw,
                     (len(props_raw) + CRC_TAIL_LEN).to_bytes(2, "big"), props_raw, CRC_PREFIX))
    crc = crc32(tail, crc32(header))
    out += (header, body, tail, b"%010d\x02" % crc)


def encode_blank(size: int) -> bytes:
    """An end-of-segment filler of exactly `size` bytes."""
    return PREFIX.pack(size, BLANK_MAGIC_CODE) + bytes(size - BLANK_MIN_BYTES)


def is_blank(buf: bytes | memoryview, off: int) -> int:
    """Size of the blank record at `off`, or 0 if there is none."""
    if len(buf) - off < BLANK_MIN_BYTES:
        return 0
    size, magic = PREFIX.unpack_from(buf, off)
    return size if magic == BLANK_MAGIC_CODE and size >= BLANK_MIN_BYTES else 0


def verify_record(buf: bytes | memoryview, off: int, end: int | None = None) -> tuple[int, int, int]:
    """Check the record at `off` completely (structure, body CRC, record CRC).

    Returns (size, sys_flag, physical_offset field). Raises RecordCorrupted.
    """
    end = len(buf) if end is None else end
    if end - off < HEADER_V4_SIZE:
        raise RecordCorrupted("truncated record header")
    size, magic = PREFIX.unpack_from(buf, off)
    if magic != MAGIC_CODE:
        raise RecordCorrupted(f"bad magic code 0x{magic:08X}")
    if size < MIN_RECORD_SIZE or off + size > end:
        raise RecordCorrupted(f"record size {size} out of range")
    sys_flag = int.from_bytes(buf[off + SYSFLAG_AT:off + SYSFLAG_AT + 4], "big", signed=True)
    hdr = HEADERS[(bool(sys_flag & SYSFLAG_BORNHOST_V6), bool(sys_flag & SYSFLAG_STOREHOST_V6))]
    if size < hdr.size + 3 + CRC_TAIL_LEN:
        raise RecordCorrupted(f"record size {size} out of range")
    fields = hdr.unpack_from(buf, off)
    body_crc, phys, body_len = fields[2], fields[6], fields[14]
    body_at = off + hdr.size
    tail_at = body_at + body_len
    if body_len < 0 or tail_at + 3 > off + size:
        raise RecordCorrupted(f"body length {body_len} does not fit the record size {size}")
    topic_len = buf[tail_at]
    props_at = tail_at + 1 + topic_len + 2
    if props_at > off + size:
        raise RecordCorrupted("topic does not fit the record")
    props_len = int.from_bytes(buf[props_at - 2:props_at], "big")
    if props_at + props_len != off + size or props_len < CRC_TAIL_LEN:
        raise RecordCorrupted("properties length disagrees with the record size")
    crc_at = off + size - CRC_SUFFIX_LEN
    if bytes(buf[crc_at - len(CRC_PREFIX):crc_at]) != CRC_PREFIX or buf[off + size - 1] != 2:
        raise RecordCorrupted("record does not end with its CRC property")
    digits = bytes(buf[crc_at:crc_at + 10])
    if not digits.isdigit():
        raise RecordCorrupted("record CRC is not decimal")
    want = crc32(buf[tail_at:crc_at], crc32(buf[off:body_at]))
    if int(digits) != want:
        raise RecordCorrupted("record CRC mismatch")
    if crc32(buf[body_at:tail_at]) != body_crc:
        raise RecordCorrupted("body CRC mismatch")
    return size, sys_flag, phys


_id_prefixes: dict[bytes, str] = {}


def decode_record(buf: bytes | memoryview, off: int = 0, *, verify: bool = False) -> StoredMessage:
    """Decode the record at `off` into a StoredMessage (structure checked; CRCs when verify=True).

    The read hot path: one struct unpack, slices of `buf`, and the property string
    parsed without its trailing CRC property.
    """
    if verify:
        verify_record(buf, off)
    if type(buf) is not bytes:
        buf = bytes(buf)
    if len(buf) - off < HEADER_V4_SIZE:
        raise RecordCorrupted("truncated record header")
    hdr = HEADER_V4
    fields = hdr.unpack_from(buf, off)
    if fields[7] & HOST_V6_BITS:
        hdr = HEADERS[(bool(fields[7] & SYSFLAG_BORNHOST_V6), bool(fields[7] & SYSFLAG_STOREHOST_V6))]
        fields = hdr.unpack_from(buf, off)
    (size, magic, body_crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_raw, store_ts,
     store_raw, reconsume, prepared, body_len) = fields
    if magic != MAGIC_CODE:
        raise RecordCorrupted(f"bad magic code 0x{magic:08X}")
    end = off + size
    body_at = off + hdr.size
    tail_at = body_at + body_len
    if body_len < 0 or tail_at + 3 > end or end > len(buf):
        raise RecordCorrupted(f"body length {body_len} does not fit the record size {size}")
    topic_len = buf[tail_at]
    props_at = tail_at + 3 + topic_len
    if props_at > end or int.from_bytes(buf[props_at - 2:props_at], "big") != end - props_at:
        raise RecordCorrupted("properties length disagrees with the record size")
    if buf[end - CRC_TAIL_LEN:end - CRC_SUFFIX_LEN] != CRC_PREFIX:
        raise RecordCorrupted("record does not end with its CRC property")
    properties: dict[str, str] = {}
    if props_at < end - CRC_TAIL_LEN:
        try:
            for item in buf[props_at:end - CRC_TAIL_LEN - 1].decode().split(PROP_SEP):
                name, value = item.split(PROP_NAME_SEP, 1)
                properties[name] = value
        except (ValueError, UnicodeDecodeError) as exc:
            raise RecordCorrupted(f"malformed properties: {exc}") from None
    hosts = _host_str_cache
    born = hosts.get(born_raw) or decode_host(born_raw)
    store = hosts.get(store_raw) or decode_host(store_raw)
    prefix = _id_prefixes.get(store_raw)
    if prefix is None:
        prefix = _id_prefixes[store_raw] = store_raw.hex().upper()
    return StoredMessage(buf[tail_at + 1:tail_at + 1 + topic_len].decode(), buf[body_at:tail_at], queue_id,
                         properties, flag, sys_flag, born_ts, born, reconsume, prepared, queue_offset, phys,
                         store_ts, store, body_crc, size, prefix + "%016X" % phys)


_HEADER_COLUMNS = np.arange(HEADER_V4_SIZE)
_CRC_PREFIX_ARRAY = np.frombuffer(CRC_PREFIX, dtype=np.uint8)
_CRC_PREFIX_COLUMNS = np.arange(len(CRC_PREFIX))
_hosts_by_int: dict[int, tuple[str, int]] = {}
_topics_by_raw: dict[bytes, str] = {}


def _host_of(key: int) -> tuple[str, int]:
    """An IPv4 host from (address << 32 | port), cached like decode_host."""
    host = _hosts_by_int.get(key)
    if host is None:
        if len(_hosts_by_int) > 4096:
            _hosts_by_int.clear()
        host = _hosts_by_int[key] = decode_host(key.to_bytes(8, "big"))
    return host


def _decode_one_by_one(buf: bytes, offsets: Sequence[int]) -> list[StoredMessage]:
    """decode_records for few records or IPv6 hosts (no columnar header decode)."""
    return [decode_record(buf, off) for off in offsets]


def decode_records(buf: bytes, offsets: Sequence[int]) -> list[StoredMessage]:
    """decode_record() for records at `offsets` of `buf` (a read span), checked the same way.

    The read hot path: the fixed headers of all records are gathered into one numpy
    array and checked column-wise (magic, lengths, property length, CRC property
    position); per record there remain the slices, the property parse and the
    StoredMessage itself. Spans with IPv6 hosts are decoded record by record.
    """
    k = len(offsets)
    if k < 4:
        return _decode_one_by_one(buf, offsets)
    raw = np.frombuffer(buf, dtype=np.uint8)
    at = np.array(offsets, dtype=np.int64)
    if int(at.max()) + HEADER_V4_SIZE > len(buf) or int(at.min()) < 0:
        raise RecordCorrupted("truncated record header")
    h = raw[at[:, None] + _HEADER_COLUMNS].view(HEADER_V4_DTYPE)[:, 0]
    sys_flag = h["sys_flag"]
    if (sys_flag & HOST_V6_BITS).any():
        return _decode_one_by_one(buf, offsets)
    if (h["magic"] != MAGIC_CODE).any():
        raise RecordCorrupted("bad magic code")
    size = h["size"].astype(np.int64)
    body_len = h["body_len"].astype(np.int64)
    end = at + size
    body_at = at + HEADER_V4_SIZE
    tail_at = body_at + body_len
    if (body_len < 0).any() or (tail_at + 3 > end).any() or int(end.max()) > len(buf):
        raise RecordCorrupted("body length does not fit the record size")
    topic_len = raw[tail_at].astype(np.int64)
    props_at = tail_at + 3 + topic_len
    if (props_at > end).any():
        raise RecordCorrupted("topic does not fit the record")
    props_len = raw[props_at - 2].astype(np.int64) * 256 + raw[props_at - 1]
    crc_name_at = end - CRC_TAIL_LEN
    if ((props_len != end - props_at).any() or (crc_name_at < props_at).any()
            or (raw[crc_name_at[:, None] + _CRC_PREFIX_COLUMNS] != _CRC_PREFIX_ARRAY).any()):
        raise RecordCorrupted("properties length or CRC property position disagree with the record size")
    topic_at = (tail_at + 1).tolist()
    topic_end = (tail_at + 1 + topic_len).tolist()
    topics = _topics_by_raw
    topic_raws = [buf[a:b] for a, b in zip(topic_at, topic_end)]
    missing = set(topic_raws).difference(topics)
    if missing:
        if len(topics) > 4096:
            topics.clear()
        for t in missing:
            topics[t] = t.decode()
    bodies = [buf[a:b] for a, b in zip(body_at.tolist(), tail_at.tolist())]
    props_end = (crc_name_at - 1).tolist()
    properties: list[dict[str, str]] = []
    try:
        for a, b in zip(props_at.tolist(), props_end):
            props: dict[str, str] = {}
            if a < b:
                for item in buf[a:b].decode().split(PROP_SEP):
                    name, value = item.split(PROP_NAME_SEP, 1)
                    props[name] = value
            properties.append(props)
    except ValueError as exc:  # an item without a name separator, or not UTF-8
        raise RecordCorrupted(f"malformed properties: {exc}") from None
    born = (h["born_ip"].astype(np.int64) << 32 | h["born_port"]).tolist()
    store = (h["store_ip"].astype(np.int64) << 32 | h["store_port"]).tolist()
    store_keys = set(store)
    phys = h["phys"].tolist()
    if len(store_keys) == 1:
        ids = message_ids(next(iter(store_keys)).to_bytes(8, "big"), phys)
    else:
        ids = [s.to_bytes(8, "big").hex().upper() + "%016X" % p for s, p in zip(store, phys)]
    return list(map(StoredMessage, map(topics.__getitem__, topic_raws), bodies, h["queue_id"].tolist(), properties,
                    h["flag"].tolist(), sys_flag.tolist(), h["born_ts"].tolist(), map(_host_of, born),
                    h["reconsume"].tolist(), h["prepared"].tolist(), h["queue_offset"].tolist(), phys,
                    h["store_ts"].tolist(), map(_host_of, store), h["body_crc"].tolist(), size.tolist(), ids))


def store_timestamp_of(buf: bytes | memoryview, off: int = 0) -> int:
    """STORETIMESTAMP of the record at `off` without decoding the rest."""
    sys_flag = int.from_bytes(buf[off + SYSFLAG_AT:off + SYSFLAG_AT + 4], "big", signed=True)
    at = STORE_TS_AT + (HOST_V6_EXTRA if sys_flag & SYSFLAG_BORNHOST_V6 else 0)
    return int.from_bytes(buf[off + at:off + at + 8], "big", signed=True)


def encode_messages_standalone(messages: Sequence[Message], first_offset: int = 0,
                               store_host: tuple[str, int] = ("127.0.0.1", 10911),
                               store_timestamp: int = 0) -> bytes:
    """Encode records back to back without a store (tests and the raw-write benchmark peer)."""
    out: list = []
    host = encode_host(store_host)
    pos = first_offset
    for i, m in enumerate(messages):
        topic_raw = m.topic.encode()
        props_raw = encode_properties(m.properties)
        born_v6 = encode_host(m.born_host)[1]
        size = record_size(len(m.body), len(topic_raw), len(props_raw), born_v6, host[1])
        encode_record(out, m, topic_raw, props_raw, size, m.sys_flag, i, pos, store_timestamp, host)
        pos += size
    return b"".join(out)
