"""A run of records encoded column by column into one buffer: how large copies are written.

A COMMIT of a Spark micro-batch copies millions of halves (record_copy). A
RecordBlock holds those records as numpy columns over the bytes they are copied
from (a CommitLog segment's map); two compiled passes (record_block_numba, GIL
released) encode them. `fill_records`, when the layout is built (a split group's
part: on the thread that builds it), writes everything that does not depend on
where the records land (the bodies above all) and takes the CRC of each record's
tail; `finish_records`, under the log's lock, copies in the placed headers
(HEADER_V4_DTYPE rows) and combines each header's CRC with its tail's
(compiled_primitives.crc32_combine), so the writer holding the lock touches a
header and ten digits per record.

The bytes equal CommitLog.write_columns' (the per-record encoder, which tests use
as the oracle) byte for byte. IPv4 hosts only: the header is then fixed-size;
anything else goes through the list columns (`list_columns`). A block that
crosses a segment end is encoded as one buffer and written in one piece per
segment.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa

from txmq.broker.store.record_columns import binary_views, values_and_offsets
from txmq.broker.store.record_layout import (
    BORN_HOST_AT,
    CRC_SUFFIX_LEN,
    HEADER_V4_DTYPE,
    HEADER_V4_SIZE,
    HOST_V4_SIZE,
    MAGIC_CODE,
    STORE_HOST_AT,
)

_HEAD_WIDTH_MIN = 12  # TailHeads rows hold at least the CRC digits' width
MAX_BLOCK_BYTES = 1 << 30  # Arrow binary offsets are int32: a block encodes at most this much


@functools.cache
def _compiled():
    """The compiled encoder's module, imported on first use so processes that never write a block
    never import numba (compiled once, cached on disk)."""
    from txmq.broker.store import record_block_numba

    return record_block_numba


def load_compiled() -> bool:
    """Load the compiled encoder now: numba's import and the cached machine code, which would
    otherwise delay the first block written (a COMMIT's first part). A broker calls it once at
    start, off its serving threads."""
    kernel = _compiled()
    nothing = np.zeros(0, dtype=np.int64)
    out = np.frombuffer(pa.allocate_buffer(0), dtype=np.uint8)  # as _filled allocates it
    crcs = np.zeros(0, dtype=np.uint32)
    kernel.fill_records(out, np.zeros((0, _HEAD_WIDTH_MIN), dtype=np.uint8), nothing, nothing, nothing, nothing,
                        nothing, crcs, crcs.copy(), kernel.CRC32_TABLES, kernel.X2N_TABLE)
    kernel.finish_records(out, np.zeros((0, HEADER_V4_SIZE), dtype=np.uint8), nothing, crcs, crcs,
                          kernel.CRC32_TABLES)
    kernel.crc32_each(np.frombuffer(pa.allocate_buffer(0), dtype=np.uint8), nothing, nothing, crcs,
                      kernel.CRC32_TABLES)  # a read-only body buffer, as Arrow's are
    return True


@dataclass
class RecordBlock:
    """Records to write as numpy columns (one element per record) over byte buffers.

    The body and the property string (through the CRC property's name,
    "...\\x02__CRC32#\\x01") of record i are buffers[body_buf[i]][body_at[i]:][:body_len[i]]
    and buffers[props_buf[i]][props_at[i]:][:props_len[i]]. Topic, queue and
    SYSFLAG are the write's (BatchColumns' lists), not the block's.
    """

    buffers: list[np.ndarray]  # uint8, each under 2 GiB (binary view offsets are int32)
    body_buf: np.ndarray  # int32
    body_at: np.ndarray  # int64
    body_len: np.ndarray  # int64
    props_buf: np.ndarray  # int32
    props_at: np.ndarray  # int64
    props_len: np.ndarray  # int64
    body_crc: np.ndarray  # uint32, BODYCRC as stored
    flag: np.ndarray  # int32
    born_ts: np.ndarray  # int64
    born_host: np.ndarray  # (n, 8) uint8: IPv4 address and port as stored
    reconsume: np.ndarray  # int32
    prepared: np.ndarray  # int64, PREPAREDTRANSACTIONOFFSET
    layout: "BlockLayout | None" = None  # when laid out ahead of the write (BatchColumns.of_block)

    @property
    def count(self) -> int:
        return len(self.body_at)

    @staticmethod
    def of_new_records(bodies: pa.BinaryArray, properties: Sequence[bytes], which: np.ndarray, *, born_ts: int,
                       born_host: bytes) -> "RecordBlock":
        """Records written for the first time (a transaction's halves): record i's body is bodies[i]
        (read in place), its property string (through the CRC property's name) properties[which[i]];
        no flag, born at `born_ts` on `born_host` (encoded IPv4); BODYCRC taken by the compiled loop."""
        n = len(bodies)
        assert len(which) == n and len(born_host) == HOST_V4_SIZE, (len(which), n, born_host)
        values, offsets = values_and_offsets(bodies)
        starts, lengths = offsets[:-1], np.diff(offsets)
        props_len = np.fromiter(map(len, properties), dtype=np.int64, count=len(properties))
        props_at = np.cumsum(props_len) - props_len
        body_crc = np.empty(n, dtype=np.uint32)
        kernel = _compiled()
        kernel.crc32_each(values, starts, lengths, body_crc, kernel.CRC32_TABLES)
        return RecordBlock(
            buffers=[values, np.frombuffer(b"".join(properties), dtype=np.uint8)],
            body_buf=np.zeros(n, dtype=np.int32), body_at=starts, body_len=lengths,
            props_buf=np.ones(n, dtype=np.int32), props_at=props_at[which], props_len=props_len[which],
            body_crc=body_crc, flag=np.zeros(n, dtype=np.int32), born_ts=np.full(n, born_ts, dtype=np.int64),
            born_host=np.tile(np.frombuffer(born_host, dtype=np.uint8), (n, 1)),
            reconsume=np.zeros(n, dtype=np.int32), prepared=np.zeros(n, dtype=np.int64))

    @staticmethod
    def concat(blocks: Sequence["RecordBlock"]) -> "RecordBlock":
        """The records of `blocks`, in order, as one block (their buffers side by side)."""
        if len(blocks) == 1:
            return blocks[0]
        base = np.cumsum([0] + [len(b.buffers) for b in blocks[:-1]])
        return RecordBlock(
            buffers=[buf for b in blocks for buf in b.buffers],
            body_buf=np.concatenate([b.body_buf + k for b, k in zip(blocks, base)]).astype(np.int32),
            props_buf=np.concatenate([b.props_buf + k for b, k in zip(blocks, base)]).astype(np.int32),
            **{name: np.concatenate([getattr(b, name) for b in blocks])
               for name in ("body_at", "body_len", "props_at", "props_len", "body_crc", "flag", "born_ts",
                            "born_host", "reconsume", "prepared")})

    def properties(self) -> pa.BinaryArray:
        """Every record's property string (through the CRC property's name), gathered."""
        return _gather(self.buffers, [_piece_views(self.buffers, self.props_buf, self.props_at, self.props_len)])

    def list_columns(self) -> dict[str, list]:
        """The block as BatchColumns' list columns (what write_columns and write_batch take):
        bodies as memoryviews of the buffers, property strings as bytes."""
        views = [memoryview(b) for b in self.buffers]
        props = self.properties()
        values, offsets = values_and_offsets(props)
        raw = values.tobytes()
        bounds = offsets.tolist()
        hosts = self.born_host.view("V8")[:, 0]
        distinct, which = np.unique(hosts, return_inverse=True)
        return {
            "bodies": list(map(_cut, map(views.__getitem__, self.body_buf.tolist()), self.body_at.tolist(),
                               (self.body_at + self.body_len).tolist())),
            "props_crc": list(map(raw.__getitem__, map(slice, bounds[:-1], bounds[1:]))),
            "flags": self.flag.tolist(), "born_timestamps": self.born_ts.tolist(),
            "born_raws": list(map(list(map(bytes, distinct)).__getitem__, which.reshape(-1).tolist())),
            "reconsume_times": self.reconsume.tolist(), "prepared_offsets": self.prepared.tolist(),
            "body_lens": self.body_len.tolist(), "body_crcs": self.body_crc.tolist()}


def _cut(view: memoryview, start: int, end: int) -> memoryview:
    return view[start:end]


class TailHeads:
    """TOPICLEN, topic and PROPLEN of every record of a block (the bytes before its property
    string), as rows of one byte matrix: row i holds record i's head in its first
    `lengths[i]` bytes."""

    def __init__(self, topics: Sequence[str], props_len: np.ndarray) -> None:
        n = len(topics)
        raws = {t: t.encode() for t in set(topics)}
        width = max(3 + max(map(len, raws.values())), _HEAD_WIDTH_MIN)
        rows = np.zeros((n, width), dtype=np.uint8)
        self.lengths = np.empty(n, dtype=np.int64)
        field_len = props_len + CRC_SUFFIX_LEN  # PROPLEN counts the CRC digits and their separator
        if len(raws) == 1:
            groups = [(next(iter(raws.values())), slice(None))]
        else:
            index = {t: i for i, t in enumerate(raws)}
            codes = np.fromiter(map(index.__getitem__, topics), dtype=np.int64, count=n)
            groups = [(raw, np.flatnonzero(codes == i)) for i, raw in enumerate(raws.values())]
        for raw, which in groups:
            t = len(raw)
            rows[which, 0] = t
            rows[which, 1:1 + t] = np.frombuffer(raw, dtype=np.uint8)
            rows[which, 1 + t] = field_len[which] >> 8
            rows[which, 2 + t] = field_len[which] & 0xFF
            self.lengths[which] = 3 + t
        self.rows = rows


class BlockLayout:
    """Everything encoding a block takes that does not depend on where it is written: record
    sizes, the header fields the records keep, the tail heads and the records filled but for
    their headers and CRC digits. Built ahead of the write (a split group's parts: on the
    thread that builds them), so the writer holding the log's lock only fills in the
    placement (queue offsets, physical offsets, SYSFLAG, store time and host) and the CRCs."""

    def __init__(self, block: RecordBlock, topics: Sequence[str], queue_ids: Sequence[int]) -> None:
        n = block.count
        self.heads = heads = TailHeads(topics, block.props_len)
        self.sizes = HEADER_V4_SIZE + block.body_len + heads.lengths + block.props_len + CRC_SUFFIX_LEN
        h = self.headers = np.empty(n, dtype=HEADER_V4_DTYPE)
        h["size"] = self.sizes
        h["magic"] = MAGIC_CODE
        h["body_crc"] = block.body_crc
        h["queue_id"] = queue_ids
        h["flag"] = block.flag
        h["born_ts"] = block.born_ts
        h["reconsume"] = block.reconsume
        h["prepared"] = block.prepared
        h["body_len"] = block.body_len
        self.header_rows = h.view(np.uint8).reshape(n, HEADER_V4_SIZE)
        self.header_rows[:, BORN_HOST_AT:BORN_HOST_AT + HOST_V4_SIZE] = block.born_host
        self.unborn = np.flatnonzero(block.born_ts == 0)  # the store's time fills these in, as write_columns does
        # the records but their headers and CRC digits, and each record's tail CRC and the shift
        # that combines it with its header's (encode_block)
        self.filled, self.tail_crc, self.tail_shift = _filled(_compiled(), block, self)


def encode_block(block: RecordBlock, layout: BlockLayout, *, sys_flags: Sequence[int], queue_offsets: Sequence[int],
                 phys: Sequence[int], store_timestamp: int, store_host: bytes) -> np.ndarray:
    """The block's records back to back (uint8), as written at physical offsets `phys` (see module doc)."""
    h = layout.headers
    h["queue_offset"] = queue_offsets
    h["phys"] = phys
    h["sys_flag"] = sys_flags
    h["store_ts"] = store_timestamp
    h["born_ts"][layout.unborn] = store_timestamp
    headers = layout.header_rows
    headers[:, STORE_HOST_AT:STORE_HOST_AT + HOST_V4_SIZE] = np.frombuffer(store_host, dtype=np.uint8)
    kernel = _compiled()
    if layout.filled is None:  # a layout is filled once ahead; encoding it again fills it again
        layout.filled, layout.tail_crc, layout.tail_shift = _filled(kernel, block, layout)
    return _encoded_compiled(kernel, block, layout)


def _filled(kernel, block: RecordBlock, layout: BlockLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The block's records with everything but their headers and CRC digits written by the compiled
    loop (record_block_numba.fill_records), into a buffer from Arrow's pool (reused from part to
    part, where fresh memory would cost page faults); each record's tail CRC and shift."""
    total = int(layout.sizes.sum())
    lengths = np.array([len(b) for b in block.buffers], dtype=np.int64)
    addresses = np.array([b.ctypes.data for b in block.buffers], dtype=np.int64)
    body_len = block.body_len.astype(np.int64, copy=False)
    props_len = block.props_len.astype(np.int64, copy=False)
    # the loop copies from raw addresses: every piece must lie inside its buffer
    assert (block.body_at >= 0).all() and (block.body_at + body_len <= lengths[block.body_buf]).all(), \
        "a body outside its buffer"
    assert (block.props_at >= 0).all() and (block.props_at + props_len <= lengths[block.props_buf]).all(), \
        "a property string outside its buffer"
    out = np.frombuffer(pa.allocate_buffer(total), dtype=np.uint8)
    tail_crc = np.empty(block.count, dtype=np.uint32)
    tail_shift = np.empty(block.count, dtype=np.uint32)
    written = kernel.fill_records(out, layout.heads.rows, layout.heads.lengths, addresses[block.body_buf] + block.body_at,
                                  body_len, addresses[block.props_buf] + block.props_at, props_len, tail_crc,
                                  tail_shift, kernel.CRC32_TABLES, kernel.X2N_TABLE)
    assert written == total, "filled records disagree with their sizes"
    return out, tail_crc, tail_shift


def _encoded_compiled(kernel, block: RecordBlock, layout: BlockLayout) -> np.ndarray:
    """encode_block's records finished by the compiled loop: the headers (placed) copied into the
    records the layout filled, and the record CRCs taken."""
    out = layout.filled
    layout.filled = None  # a buffer is finished once: the block is written once
    written = kernel.finish_records(out, layout.header_rows, layout.sizes.astype(np.int64, copy=False),
                                    layout.tail_crc, layout.tail_shift, kernel.CRC32_TABLES)
    assert written == len(out), "encoded records disagree with their sizes"
    return out


def _gather(buffers: list[np.ndarray], pieces: list[np.ndarray]) -> pa.BinaryArray:
    """The pieces of n records back to back: pieces[k] is the binary views (n, 4) of piece k of
    every record, into `buffers`; record i's pieces are consecutive values of the returned
    array (len(pieces) * n of them), copied by one Arrow cast."""
    views = np.stack(pieces, axis=1)
    arr = pa.Array.from_buffers(pa.binary_view(), views.shape[0] * views.shape[1],
                                [None, pa.py_buffer(views), *map(pa.py_buffer, buffers)])
    return arr.cast(pa.binary())


def _piece_views(buffers: list[np.ndarray], which: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Binary views of one piece of every record, record i's in buffers[which[i]]."""
    kinds = np.unique(which)
    if len(kinds) == 1:
        b = int(kinds[0])
        return binary_views(buffers[b], b, starts, lengths)
    views = np.empty((len(starts), 4), dtype="<i4")
    for b in kinds.tolist():
        rows = np.flatnonzero(which == b)
        views[rows] = binary_views(buffers[b], b, starts[rows], lengths[rows])
    return views


__all__ = ["MAX_BLOCK_BYTES", "BlockLayout", "RecordBlock", "encode_block", "load_compiled"]
