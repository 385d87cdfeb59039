"""The compiled loops' building blocks (store/compiled_primitives.py) and the compiled record
encoder's loading (record_block.load_compiled)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.store import Message, MessageStore, record_block, record_copy
from txmq.broker.store.message import SYSFLAG_TRANSACTION_COMMIT
from txmq.broker.store.record_copy import RecordCopies

from ._helpers import small_config

pytestmark = pytest.mark.skipif(record_block._compiled() is None, reason="numba is not installed")


@settings(deadline=None)  # the first example loads the compiled code
@given(st.binary(max_size=200), st.integers(0, 2**32 - 1), st.integers(0, 16))
def test_the_compiled_crc32_is_zlibs_for_any_bytes_and_starting_value(data, start, skip):
    from txmq.broker.store.compiled_primitives import CRC32_TABLES, crc32_update

    buf = np.frombuffer(bytes(skip) + data + b"tail", dtype=np.uint8)
    assert int(crc32_update(np.uint32(start), buf, skip, skip + len(data), CRC32_TABLES)) == zlib.crc32(data, start)


def test_a_crc_taken_in_two_pieces_equals_the_crc_of_both():
    from txmq.broker.store.compiled_primitives import CRC32_TABLES, crc32_update

    buf = np.frombuffer(bytes(range(256)) * 3, dtype=np.uint8)
    first = crc32_update(np.uint32(0), buf, 0, 100, CRC32_TABLES)
    assert int(crc32_update(first, buf, 300, 701, CRC32_TABLES)) == zlib.crc32(buf[300:701].tobytes(),
                                                                                zlib.crc32(buf[:100].tobytes()))


def test_memcpy_copies_between_addresses():
    from numba import njit

    from txmq.broker.store.compiled_primitives import memcpy

    @njit
    def copy(dst, src, at, n):
        memcpy(dst.ctypes.data, src.ctypes.data + at, n)

    src = np.arange(100, dtype=np.uint8)
    dst = np.zeros(10, dtype=np.uint8)
    copy(dst, src, 40, 10)
    assert dst.tolist() == list(range(40, 50))


def test_loading_the_encoder_ahead_compiles_the_signature_that_blocks_use(tmp_path, monkeypatch):
    """A broker loads the encoder at start: the first COMMIT must find its code ready, not
    compile another variant (numba compiles one per argument types)."""
    monkeypatch.setattr(record_copy, "COLUMNAR_MIN_COPIES", 0)
    monkeypatch.setattr(record_copy, "COLUMNAR_MIN_SLOTS", 0)
    assert record_block.load_compiled()
    store = MessageStore(small_config(tmp_path / "s", commitlog_segment_bytes=4 << 20))
    try:
        placed = store.append([Message("SOURCE", b"m%d" % i, 0, {"UNIQ_KEY": "u%d" % i}) for i in range(8)])
        store.append_group_copies(RecordCopies([r.physical_offset for r in placed], [r.size for r in placed],
                                               ["FINAL"] * 8, [0] * 8, SYSFLAG_TRANSACTION_COMMIT,
                                               source_topic="SOURCE"))
        assert [m.body for m in store.read_queue("FINAL", 0, 0, 10).messages] == [b"m%d" % i for i in range(8)]
    finally:
        store.close()
    kernel = record_block._compiled()
    assert len(kernel.fill_records.signatures) == len(kernel.finish_records.signatures) == 1


def test_loading_the_source_scan_ahead_compiles_the_signature_that_copies_use(tmp_path, monkeypatch):
    """The same for the scan of a large COMMIT's sources (record_copy_numba), whether the sources
    are read from a segment's map or gathered into a buffer of their own."""
    monkeypatch.setattr(record_copy, "COLUMNAR_MIN_COPIES", 0)
    monkeypatch.setattr(record_copy, "COLUMNAR_MIN_SLOTS", 0)
    assert record_copy.load_compiled_scan()
    store = MessageStore(small_config(tmp_path / "s", commitlog_segment_bytes=64 << 10))
    try:
        placed = store.append([Message("SOURCE", b"m" * 1000, 0, {"UNIQ_KEY": "u%d" % i}) for i in range(100)])
        assert len({store.commitlog.segment_for(r.physical_offset).start for r in placed}) > 1
        store.append_group_copies(RecordCopies([r.physical_offset for r in placed], [r.size for r in placed],
                                               ["FINAL"] * 100, [0] * 100, SYSFLAG_TRANSACTION_COMMIT,
                                               source_topic="SOURCE"))
        assert len(store.read_queue("FINAL", 0, 0, 200).messages) == 100
    finally:
        store.close()
    assert len(record_copy._compiled_scan().scan_sources.signatures) == 1


@settings(max_examples=200, deadline=None)
@given(first=st.binary(max_size=300), second=st.binary(max_size=300))
def test_two_crcs_combine_into_the_crc_of_the_bytes_joined(first, second):
    """What lets a record's tail CRC be taken before its header is placed (record_block_numba)."""
    from txmq.broker.store.compiled_primitives import X2N_TABLE, crc32_combine, crc32_shift

    shift = crc32_shift(len(second), X2N_TABLE)
    assert int(crc32_combine(zlib.crc32(first), zlib.crc32(second), shift)) == zlib.crc32(first + second)
