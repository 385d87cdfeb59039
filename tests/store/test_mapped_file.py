"""A data file's appends: the bytes land in order, in write calls of bounded size.

Writes are capped at WRITE_STEP_BYTES per call so that the page cache asks for
small folios, which the kernel can serve from pages freed a moment ago (see
mapped_file.py); the cap must never change what lands in the file.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.broker.store import mapped_file
from txmq.broker.store.mapped_file import WRITE_STEP_BYTES, MappedFile


@pytest.fixture
def write_sizes(monkeypatch) -> list[int]:
    """The byte count of every pwrite and pwritev call the file makes (the calls still happen)."""
    sizes: list[int] = []
    real_pwrite, real_pwritev = os.pwrite, os.pwritev

    def pwrite(fd, data, pos):
        sizes.append(memoryview(data).nbytes)
        return real_pwrite(fd, data, pos)

    def pwritev(fd, buffers, pos):
        sizes.append(sum(memoryview(b).nbytes for b in buffers))
        return real_pwritev(fd, buffers, pos)

    monkeypatch.setattr(mapped_file.os, "pwrite", pwrite)
    monkeypatch.setattr(mapped_file.os, "pwritev", pwritev)
    return sizes


@pytest.fixture
def data_file(tmp_path):
    f = MappedFile(tmp_path / "00000000000000000000", 0, 64 << 20)
    yield f
    f.close()


def file_bytes(f: MappedFile) -> bytes:
    return f.read(0, f.size)


def test_a_large_buffer_is_written_in_steps(data_file, write_sizes):
    data = os.urandom(3 * WRITE_STEP_BYTES + 123)
    data_file.append(data)
    assert write_sizes == [WRITE_STEP_BYTES] * 3 + [123]
    assert file_bytes(data_file) == data


def test_many_small_pieces_go_out_in_calls_of_about_a_step(data_file, write_sizes):
    pieces = [os.urandom(1200) for _ in range(2000)]  # 2.3 MB in 2,000 pieces: past the join limit
    data_file.append_parts(pieces)
    assert file_bytes(data_file) == b"".join(pieces)
    assert max(write_sizes) <= 2 * WRITE_STEP_BYTES  # about a step: never twice as much
    assert len(write_sizes) <= 2 * (2000 * 1200 // WRITE_STEP_BYTES + 1)  # steps, not a call per record


def test_a_large_piece_among_small_ones_is_written_in_steps(data_file, write_sizes):
    big = os.urandom(2 * WRITE_STEP_BYTES + 7)
    pieces = [os.urandom(50) for _ in range(1500)] + [big] + [os.urandom(50) for _ in range(1500)]
    data_file.append_parts(pieces)
    assert file_bytes(data_file) == b"".join(pieces)
    assert max(write_sizes) <= 2 * WRITE_STEP_BYTES


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 600), min_size=1025, max_size=1300),
       st.lists(st.tuples(st.integers(0, 1300), st.integers(WRITE_STEP_BYTES // 4, 3 * WRITE_STEP_BYTES)), max_size=4))
def test_pieces_of_any_sizes_land_back_to_back(tmp_path_factory, small, large):
    """Whatever the pieces' sizes (empty ones, and a few larger than a step among them), the file
    holds their concatenation."""
    sizes = list(small)
    for at, size in large:
        sizes.insert(at, size)
    f = MappedFile(tmp_path_factory.mktemp("f") / "00000000000000000000", 0, 1 << 30)
    try:
        pieces = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
        f.append_parts(pieces)
        assert f.size == sum(sizes)
        assert file_bytes(f) == b"".join(pieces)
    finally:
        f.close()
