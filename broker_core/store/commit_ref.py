"""COMMIT by reference (issue #42): the commit record's slots and the record a slot stands for.

A COMMIT by reference does not copy its halves. It writes, in the COMMIT's group, commit records
in COMMIT_REF_TOPIC whose body is a topic table followed by one fixed 40-byte *slot* per final
message; the user topic's queue entry points at the slot (docs/TRANSACTIONS.md, "COMMIT by
reference"). This module is the one owner of that body's layout and of turning (half bytes,
slot, commit record header) into the record the copy would have written: every reader of a
record at a queue entry goes through `final_record`.

Body layout (big-endian)::

    DROPCOUNT 1, then per name: NAMELEN 1 + a property name the final records drop (UTF-8)
    TOPICCOUNT 2, then per topic: TOPICLEN 1 + the topic (UTF-8)
    slots, back to back, each SLOT_SIZE (52) bytes:
      0  SLOTSIZE   4   SLOT_SIZE, where a record has TOTALSIZE
      4  SLOTMAGIC  4   SLOT_MAGIC, where a record has MAGICCODE (no record or blank has it)
      8  HALFPHYS   8   the half's physical offset
     16  HALFSIZE   4   the half's TOTALSIZE
     20  FINALSIZE  4   the final record's TOTALSIZE (the half's less the dropped properties)
     24  QUEUEID    4
     28  TOPICINDEX 2   into the topic table
     30  FLAGS      2   SLOT_HAS_UNIQ_KEY | SLOT_HAS_KEYS | SLOT_SCHEDULED
     32  BACK       4   bytes from the commit record's start to this slot's start
     36  TAGHASH    8   the queue entry's tag hash, carried here so replay reads no half
     44  QUEUEOFFSET 8  the final message's queue offset, filled under the write lock as a
                        record's QUEUEOFFSET is (a reader by message id or key has no queue entry)

A slot carries the final size as well as the half's (an improvement on the first design, which
put the half's size in the queue entry): the queue entry then holds exactly what the copy's
entry held (size included), so pulls' byte budgets and every reader's `size` are unchanged.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from txmq.broker.errors import StoreError
from txmq.broker.store.checksum import crc32
from txmq.broker.store.message import (
    COMMIT_REF_TOPIC,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_GROUP_BITS,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_MASK,
)
from txmq.broker.store.record import without_property
from txmq.broker.store.record_layout import (
    BLANK_MAGIC_CODE,
    CRC_PREFIX,
    CRC_SUFFIX_LEN,
    HEADERS,
    MAGIC_CODE,
    PREFIX,
    SYSFLAG_AT,
)

SLOT_MAGIC = 0x5C0FFEE5
assert SLOT_MAGIC not in (MAGIC_CODE, BLANK_MAGIC_CODE)

SLOT_HAS_UNIQ_KEY = 0x1  # the half has UNIQ_KEY: replay adds an index entry for it
SLOT_HAS_KEYS = 0x2  # the half has KEYS: replay adds index entries for them
SLOT_SCHEDULED = 0x4  # the half carried a deliverAt: the slot's queue is the timer wheel's

SLOT = struct.Struct(">IIqiiihHIqq")
SLOT_SIZE = SLOT.size
SLOT_DTYPE = np.dtype([
    ("size", ">u4"), ("magic", ">u4"), ("half_phys", ">i8"), ("half_size", ">i4"), ("final_size", ">i4"),
    ("queue_id", ">i4"), ("topic_index", ">i2"), ("flags", ">u2"), ("back", ">u4"), ("tag_hash", ">i8"),
    ("queue_offset", ">i8")])
assert SLOT_DTYPE.itemsize == SLOT_SIZE == 52
QUEUE_OFFSET_IN_SLOT = SLOT_DTYPE.fields["queue_offset"][1]
# Bits a final record never takes from its half (the copy's rule, record_copy._NOT_INHERITED).
_NOT_INHERITED = SYSFLAG_TRANSACTION_MASK | SYSFLAG_GROUP_BITS | SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6


@dataclass(frozen=True)
class Slot:
    """One final message of a COMMIT by reference, as its commit record holds it."""

    half_phys: int
    half_size: int
    final_size: int
    topic: str
    queue_id: int
    flags: int
    tag_hash: int
    queue_offset: int = -1  # -1 until the write assigns it (the COMMIT builds slots outside the write lock)


@dataclass(frozen=True)
class CommitHeader:
    """What a final record takes from its commit record (the copy took it from its own write)."""

    store_timestamp: int
    store_host_raw: bytes
    sys_flag: int  # the commit record's: its transaction type and group bits are the final's


def body_head(topics: Sequence[str], drop_properties: Sequence[str] = ()) -> bytes:
    """The body's head: the properties its final records drop (the commit record says so itself,
    so the store needs no word of the transaction layer's), then the distinct topics its slots name."""
    raws = [t.encode() for t in topics]
    names = [n.encode() for n in drop_properties]
    if len(raws) > 0x7FFF or any(not 0 < len(r) < 256 for r in raws + names) or len(names) > 255:
        raise StoreError(f"a commit record names {len(raws)} topics and drops {len(names)} properties; "
                         "each must be 1-255 bytes")
    return b"".join([len(names).to_bytes(1, "big"), *(len(n).to_bytes(1, "big") + n for n in names),
                     len(raws).to_bytes(2, "big"), *(len(r).to_bytes(1, "big") + r for r in raws)])


def slot_rows(half_phys, half_size, final_size, queue_id, topic_index, flags, tag_hash) -> np.ndarray:
    """Slots as a SLOT_DTYPE array from their columns (any sequences of one length), BACK and the
    queue offset not set yet: a COMMIT of a million halves builds its slots column-wise."""
    rows = np.zeros(len(half_phys), dtype=SLOT_DTYPE)
    rows["size"], rows["magic"], rows["queue_offset"] = SLOT_SIZE, SLOT_MAGIC, -1
    for name, column in (("half_phys", half_phys), ("half_size", half_size), ("final_size", final_size),
                         ("queue_id", queue_id), ("topic_index", topic_index), ("flags", flags),
                         ("tag_hash", tag_hash)):
        rows[name] = column
    return rows


def encode_rows(topics: Sequence[str], rows: np.ndarray, body_at: int, drop_properties: Sequence[str] = ()) -> bytes:
    """A commit record's body: its head (body_head), then `rows` (SLOT_DTYPE) with each BACK set;
    `body_at` is where the body starts in its record (the record's header size), which BACK counts from."""
    head = body_head(topics, drop_properties)
    if len(rows) and int(rows["topic_index"].max()) >= len(topics):
        raise StoreError(f"a slot names topic {int(rows['topic_index'].max())} of a table of {len(topics)}")
    out = rows.copy()
    out["back"] = body_at + len(head) + np.arange(len(rows), dtype=np.int64) * SLOT_SIZE
    return head + out.tobytes()


def encode_body(slots: Sequence[Slot], body_at: int, drop_properties: Sequence[str] = ()) -> bytes:
    """encode_rows for slots given one object each (tests and small COMMITs)."""
    topics = list(dict.fromkeys(s.topic for s in slots))
    index = {t: k for k, t in enumerate(topics)}
    rows = slot_rows([s.half_phys for s in slots], [s.half_size for s in slots], [s.final_size for s in slots],
                     [s.queue_id for s in slots], [index[s.topic] for s in slots], [s.flags for s in slots],
                     [s.tag_hash for s in slots])
    rows["queue_offset"] = [s.queue_offset for s in slots]
    return encode_rows(topics, rows, body_at, drop_properties)


def decode_body(body: bytes | memoryview) -> tuple[list[str], np.ndarray]:
    """(topics, slots as a SLOT_DTYPE array) of a commit record's body: replay's column-wise view."""
    head = _body_head(body, 0)
    if head is None:
        raise StoreError(f"commit record body of {len(body)} bytes ends inside its head")
    _, topics, at = head
    if (len(body) - at) % SLOT_SIZE:
        raise StoreError(f"commit record body of {len(body)} bytes does not end on a slot")
    slots = np.frombuffer(body, dtype=SLOT_DTYPE, offset=at)
    if len(slots) and not (bool((slots["magic"] == SLOT_MAGIC).all()) and bool((slots["size"] == SLOT_SIZE).all())):
        raise StoreError("commit record body holds a slot without the slot magic")
    return topics, slots


@dataclass(frozen=True)
class SlotEntries:
    """The queue entries a commit record dispatches, one row per slot, in slot order: what replay
    (recovery, a follower) and the write's own dispatch derive from the record's bytes alone."""

    topics: list[str]  # the record's topic table
    topic_index: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    address: np.ndarray  # each slot's physical offset: its queue entry's and its message id's
    size: np.ndarray  # the final record's size: the queue entry's, as the copy's was
    tag_hash: np.ndarray
    flags: np.ndarray
    half_phys: np.ndarray


def slot_entries(body: bytes | memoryview, body_address: int) -> SlotEntries:
    """The queue entries of a commit record whose body `body` starts at physical offset `body_address`."""
    topics, rows = decode_body(body)
    first = body_address + len(body) - len(rows) * SLOT_SIZE
    return SlotEntries(topics, rows["topic_index"].astype(np.int64), rows["queue_id"].astype(np.int64),
                       rows["queue_offset"].astype(np.int64), first + np.arange(len(rows), dtype=np.int64) * SLOT_SIZE,
                       rows["final_size"].astype(np.int64), rows["tag_hash"].astype(np.int64),
                       rows["flags"].astype(np.int64), rows["half_phys"].astype(np.int64))


def slots_of(body: bytes | memoryview) -> list[Slot]:
    """The slots of a commit record's body, one object each (the record-by-record readers' view)."""
    topics, rows = decode_body(body)
    return [Slot(int(r["half_phys"]), int(r["half_size"]), int(r["final_size"]), topics[int(r["topic_index"])],
                 int(r["queue_id"]), int(r["flags"]), int(r["tag_hash"]), int(r["queue_offset"])) for r in rows]


def is_slot(buf: bytes | memoryview, off: int = 0) -> bool:
    """Whether the bytes at `off` are a slot (a reader at a queue entry's offset asks first)."""
    if len(buf) - off < PREFIX.size:
        return False
    size, magic = PREFIX.unpack_from(buf, off)
    return magic == SLOT_MAGIC and size == SLOT_SIZE


def read_slot(buf: bytes | memoryview, off: int = 0) -> tuple[int, int, int, int, int, int, int, int]:
    """(half physical offset, half size, final size, queue id, topic index, queue offset, flags, BACK)
    of the slot at `off`."""
    size, magic, half_phys, half_size, final_size, queue_id, topic_index, flags, back, _, queue_offset = \
        SLOT.unpack_from(buf, off)
    if magic != SLOT_MAGIC or size != SLOT_SIZE:
        raise StoreError(f"no slot at {off}: magic {magic:#x}")
    return half_phys, half_size, final_size, queue_id, topic_index, queue_offset, flags, back


def final_record(half: bytes | memoryview, *, topic: str, queue_id: int, queue_offset: int, physical_offset: int,
                 commit: CommitHeader, drop_properties: Sequence[str]) -> bytes:
    """The record the copy would have written for `half` (one whole half record): the half's
    body, flag, born fields, reconsume times and properties less `drop_properties`; the topic,
    queue id and queue offset of its queue entry; the slot's address as its physical offset; the
    commit record's store time, store host, transaction type and group bits;
    PREPAREDTRANSACTIONOFFSET the half's own physical offset; its record CRC taken again."""
    half = bytes(half)
    sys_flag = int.from_bytes(half[SYSFLAG_AT:SYSFLAG_AT + 4], "big", signed=True)
    hdr = HEADERS[(bool(sys_flag & SYSFLAG_BORNHOST_V6), bool(sys_flag & SYSFLAG_STOREHOST_V6))]
    (size, magic, body_crc, _, flag, _, half_phys, _, born_ts, born_raw, _, _, reconsume, _,
     body_len) = hdr.unpack_from(half, 0)
    if magic != MAGIC_CODE or size != len(half):
        raise StoreError(f"the half a slot names at {half_phys} is not a whole record")
    body_at = hdr.size
    tail_at = body_at + body_len
    props_at = tail_at + 3 + half[tail_at]
    props = half[props_at:size - len(CRC_PREFIX) - CRC_SUFFIX_LEN]
    for name in drop_properties:
        props = without_property(props, name.encode())
    store_raw = commit.store_host_raw
    store_v6 = len(store_raw) > 8
    born_v6 = bool(sys_flag & SYSFLAG_BORNHOST_V6)
    final_flag = (sys_flag & ~_NOT_INHERITED) | (commit.sys_flag & (SYSFLAG_TRANSACTION_MASK | SYSFLAG_GROUP_BITS))
    final_flag |= (SYSFLAG_BORNHOST_V6 if born_v6 else 0) | (SYSFLAG_STOREHOST_V6 if store_v6 else 0)
    topic_raw = topic.encode()
    out_hdr = HEADERS[(born_v6, store_v6)]
    total = out_hdr.size + body_len + 3 + len(topic_raw) + len(props) + len(CRC_PREFIX) + CRC_SUFFIX_LEN
    header = out_hdr.pack(total, MAGIC_CODE, body_crc, queue_id, flag, queue_offset, physical_offset, final_flag,
                          born_ts, born_raw, commit.store_timestamp, store_raw, reconsume, half_phys, body_len)
    tail = b"".join((len(topic_raw).to_bytes(1, "big"), topic_raw,
                     (len(props) + len(CRC_PREFIX) + CRC_SUFFIX_LEN).to_bytes(2, "big"), props, CRC_PREFIX))
    crc = crc32(tail, crc32(header))
    return b"".join((header, half[body_at:tail_at], tail, b"%010d\x02" % crc))


def resolve(read: Callable[[int, int], bytes], slot_address: int) -> bytes:
    """The record a slot stands for, from the log (`read(offset, size)` gives its bytes): the slot,
    then its commit record's header and body head (found by the slot's BACK distance), then the
    half. The one way every reader turns a queue entry, message id or index hit at a slot into
    the record today's copy would have been (resolve_many for many)."""
    half_phys, half_size, _, queue_id, topic_index, queue_offset, _, back = read_slot(read(slot_address, SLOT_SIZE))
    commit, drop, topics = _commit_header(read, slot_address, slot_address - back, back)
    if topic_index >= len(topics):
        raise StoreError(f"the slot at {slot_address} names topic {topic_index} its commit record lacks")
    return final_record(read(half_phys, half_size), topic=topics[topic_index], queue_id=queue_id,
                        queue_offset=queue_offset, physical_offset=slot_address, commit=commit, drop_properties=drop)


_HEAD_READ = 4096  # bytes of a commit record's body read for its head at first (most heads: one topic)
_LONGEST_HEADER = max(h.size for h in HEADERS.values())
_SPAN = 1 << 20  # resolve_many reads the log in spans of this many bytes


def resolve_many(read: Callable[[int, int], bytes], slot_addresses: Sequence[int]) -> list[bytes]:
    """resolve for many slots (a pull's), in order: the log is read in spans (a queue's slots lie
    close together in their commit records, a prepare call's halves back to back) and each commit
    record's header is read once."""
    # a span pays off across many slots; a tailing reader's one or two read just their bytes
    span = _SPAN if len(slot_addresses) > 2 else 0
    slots, halves = _SpanReader(read, span), _SpanReader(read, span)
    headers: dict[int, tuple[CommitHeader, list[str], list[str]]] = {}
    out = []
    for address in slot_addresses:
        half_phys, half_size, _, queue_id, topic_index, queue_offset, _, back = read_slot(slots(address, SLOT_SIZE))
        record_at = address - back
        got = headers.get(record_at)
        if got is None:
            got = headers[record_at] = _commit_header(read, address, record_at, back)
        commit, drop, topics = got
        if topic_index >= len(topics):
            raise StoreError(f"the slot at {address} names topic {topic_index} its commit record lacks")
        out.append(final_record(halves(half_phys, half_size), topic=topics[topic_index], queue_id=queue_id,
                                queue_offset=queue_offset, physical_offset=address, commit=commit,
                                drop_properties=drop))
    return out


@functools.cache
def _compiled():
    """The compiled loop's module (commit_ref_numba), imported on the first read of slots so
    processes that never read one never load it (compiled once, cached on disk)."""
    from txmq.broker.store import commit_ref_numba

    return commit_ref_numba


def load_compiled_finals() -> bool:
    """Load final_records' compiled loop now (numba's import and its cached machine code), off the
    first pull of messages committed by reference; a broker calls it once at start."""
    k = _compiled()
    i64, u8 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    k.slot_columns(u8, i64, np.zeros((7, 0), dtype=np.int64))
    k.write_finals(u8, i64, i64, i64, u8, i64, i64, i64, i64, i64, u8, i64, i64, i64, np.zeros((0, 8), np.uint8),
                   i64, i64, i64, np.frombuffer(CRC_PREFIX, dtype=np.uint8), np.zeros((0, 1), np.uint8), i64,
                   np.int64(0), np.int64(0), k.CRC32_TABLES)
    return True


@dataclass
class SlotView:
    """A pull's slots with what their records take from elsewhere, column-wise: the halves' bytes
    (slot i's half at halves[half_at[i]:]) and the columns that override a half's fields in the
    record slot i stands for. A pull decodes the halves in place with these (no final record is
    written: pull_decode_kernel), everything else writes the records (`final_records`)."""

    halves: np.ndarray  # uint8
    half_at: np.ndarray  # int64, slot i's half in `halves`
    half_phys: np.ndarray
    half_size: np.ndarray
    final_size: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    address: np.ndarray  # each slot's physical offset: its record's and its offset message id's
    topic_id: np.ndarray  # into `topics`
    topics: list[bytes]  # the topics the slots name, as every commit record's table lists them
    commit_of: np.ndarray  # slot i's commit record, into the per-commit columns below
    store_ts: np.ndarray  # per commit record: the finals' store time
    store_hosts: list[bytes]  # per commit record: the finals' store host (raw, 8 or 20 bytes)
    sys_flags: np.ndarray  # per commit record: its flag, whose transaction and group bits the finals take
    drop_names: list[str]  # every property name a commit record of the view drops
    drop_mask: np.ndarray  # per commit record: bit k set when its finals drop drop_names[k]
    finals: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None  # the records themselves, when a
    # reader of the view cannot use it (set by the store's read: columnar_read)


def slot_view(slot_data: np.ndarray, slot_at: np.ndarray, addresses: np.ndarray, sizes: np.ndarray,
              read: Callable[[int, int], bytes],
              halves_of: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None]) -> SlotView | None:
    """The view of a pull's slots (slot i at physical offset addresses[i], its bytes at
    slot_data[slot_at[i]:], its queue entry's size sizes[i]): the slots' columns by one compiled
    pass, each commit record's header read once with `read`, the halves with `halves_of(physical
    offsets, sizes)` -> (bytes, each half's position in them) or None. None when the compiled
    readers leave the slots to resolve_many (a slot or commit record that does not match, more
    than 62 dropped names: resolve_many names the problem)."""
    n = len(addresses)
    k = _compiled()
    columns = np.empty((7, n), dtype=np.int64)
    if not k.slot_columns(slot_data, slot_at.astype(np.int64, copy=False), columns):
        return None
    half_phys, half_size, final_size, queue_id, topic_index, back, queue_offset = columns
    if not bool((final_size == sizes).all()):
        return None
    starts, first, commit_of = np.unique(addresses - back, return_index=True, return_inverse=True)
    names: dict[str, int] = {}
    table, topic_base, topic_count, stamps, hosts, flags, masks = [], [], [], [], [], [], []
    for start, i in zip(starts.tolist(), first.tolist()):
        commit, drop, topics = _commit_header(read, int(addresses[i]), start, int(back[i]))
        topic_base.append(len(table))
        topic_count.append(len(topics))
        table.extend(t.encode() for t in topics)
        stamps.append(commit.store_timestamp)
        hosts.append(commit.store_host_raw)
        flags.append(commit.sys_flag)
        masks.append(sum(1 << names.setdefault(d, len(names)) for d in drop))
    if len(names) > 62:
        return None
    commit_of = commit_of.astype(np.int64).reshape(-1)
    if not bool((topic_index < np.asarray(topic_count, dtype=np.int64)[commit_of]).all()):
        return None
    halves = halves_of(half_phys, half_size)
    if halves is None:
        return None
    return SlotView(halves[0], halves[1].astype(np.int64, copy=False), half_phys, half_size, final_size, queue_id,
                    queue_offset, addresses.astype(np.int64, copy=False),
                    np.asarray(topic_base, dtype=np.int64)[commit_of] + topic_index, table, commit_of,
                    np.asarray(stamps, dtype=np.int64), hosts, np.asarray(flags, dtype=np.int64), list(names),
                    np.asarray(masks, dtype=np.int64))


def final_records(view: SlotView, out: np.ndarray, out_at: np.ndarray) -> bool:
    """resolve_many for a pull's slots, column-wise: the record slot i of `view` stands for is
    written at out[out_at[i]:] by one compiled pass over the halves (commit_ref_numba). False when
    the pass leaves the read to resolve_many (an IPv6 store host, a half that does not match its
    slot: resolve_many names it), and then `out` holds nothing meant."""
    if len(view.address) == 0:
        return True
    if any(len(h) != 8 for h in view.store_hosts):
        return False
    k = _compiled()
    lens = np.fromiter((len(r) for r in view.topics), dtype=np.int64, count=len(view.topics))
    table_at = np.zeros(len(view.topics), dtype=np.int64)
    np.cumsum(lens[:-1], out=table_at[1:])
    name_raws = [d.encode() for d in view.drop_names]
    name_table = np.zeros((len(name_raws), max([1, *map(len, name_raws)])), dtype=np.uint8)
    for j, raw in enumerate(name_raws):
        name_table[j, :len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    status, _ = k.write_finals(
        view.halves, view.half_at, view.half_phys, view.half_size, out, out_at.astype(np.int64, copy=False),
        view.final_size, view.queue_id, view.queue_offset, view.address,
        np.frombuffer(b"".join(view.topics) or b"\0", dtype=np.uint8), table_at[view.topic_id], lens[view.topic_id],
        view.store_ts, np.frombuffer(b"".join(view.store_hosts), dtype=np.uint8).reshape(-1, 8), view.sys_flags,
        view.drop_mask, view.commit_of, np.frombuffer(CRC_PREFIX, dtype=np.uint8),
        name_table, np.fromiter(map(len, name_raws), dtype=np.int64, count=len(name_raws)),
        np.int64(~_NOT_INHERITED), np.int64(SYSFLAG_TRANSACTION_MASK | SYSFLAG_GROUP_BITS), k.CRC32_TABLES)
    return status == k.OK


class _SpanReader:
    """`read(offset, size)` answered from the last span read (`span` bytes at least) when it holds
    those bytes."""

    def __init__(self, read: Callable[[int, int], bytes], span: int) -> None:
        self._read = read
        self._span = span
        self._at = 0
        self._buf = b""

    def __call__(self, offset: int, size: int) -> bytes:
        at = offset - self._at
        if not (0 <= at and at + size <= len(self._buf)):
            self._buf, self._at, at = self._read(offset, max(size, self._span)), offset, 0
        return self._buf[at:at + size]


def _commit_header(read: Callable[[int, int], bytes], slot_address: int, record_at: int, back: int
                   ) -> tuple[CommitHeader, list[str], list[str]]:
    """(what the finals take from it, the properties they drop, the topic table) of the commit record at
    `record_at`, which holds the slot at `slot_address`, `back` bytes in."""
    head = read(record_at, min(back, _LONGEST_HEADER + _HEAD_READ))  # one read, whichever header it has
    sys_flag = int.from_bytes(head[SYSFLAG_AT:SYSFLAG_AT + 4], "big", signed=True)
    hdr = HEADERS[(bool(sys_flag & SYSFLAG_BORNHOST_V6), bool(sys_flag & SYSFLAG_STOREHOST_V6))]
    if len(head) < hdr.size:
        raise StoreError(f"the slot at {slot_address} lies {back} bytes into a record, inside its header")
    fields = hdr.unpack_from(head, 0)
    if fields[1] != MAGIC_CODE or back >= fields[0]:
        raise StoreError(f"the slot at {slot_address} does not lie in a commit record")
    parsed = _body_head(head, hdr.size)
    if parsed is None:  # a long head (many topics): everything before the slot holds it
        parsed = _body_head(read(record_at, back), hdr.size)
    if parsed is None:
        raise StoreError(f"the slot at {slot_address} lies in a commit record whose head is cut short")
    drop, topics, _ = parsed
    return CommitHeader(store_timestamp=fields[10], store_host_raw=fields[11], sys_flag=sys_flag), drop, topics


def _body_head(buf: bytes | memoryview, at: int) -> tuple[list[str], list[str], int] | None:
    """(dropped property names, topics, where the slots start) of the body head at `at`; None when
    `buf` ends inside it."""
    names: list[list[str]] = []
    for count_len in (1, 2):
        if at + count_len > len(buf):
            return None
        count = int.from_bytes(buf[at:at + count_len], "big")
        at += count_len
        items = []
        for _ in range(count):
            if at >= len(buf) or at + 1 + buf[at] > len(buf):
                return None
            n = buf[at]
            items.append(bytes(buf[at + 1:at + 1 + n]).decode())
            at += 1 + n
        names.append(items)
    return names[0], names[1], at


def final_size(half_size: int, half_props: bytes, half_topic: str, topic: str, drop_properties: Sequence[str]) -> int:
    """The final record's TOTALSIZE for a half of `half_size` in `half_topic` with this property
    string, once its topic is `topic` and `drop_properties` are cut out."""
    kept = half_props
    for name in drop_properties:
        kept = without_property(kept, name.encode())
    return half_size - (len(half_props) - len(kept)) - len(half_topic.encode()) + len(topic.encode())


__all__ = ["COMMIT_REF_TOPIC", "CommitHeader", "SLOT_DTYPE", "SLOT_HAS_KEYS", "SLOT_HAS_UNIQ_KEY", "SLOT_MAGIC",
           "SLOT_SCHEDULED", "SLOT_SIZE", "Slot", "SlotEntries", "SlotView", "body_head", "decode_body", "encode_body",
           "encode_rows", "final_record", "final_records", "final_size", "is_slot", "load_compiled_finals", "read_slot", "resolve", "resolve_many",
           "slot_entries", "slot_rows", "slot_view", "slots_of"]
