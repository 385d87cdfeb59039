"""Building blocks for the store's and the protocol's compiled loops (numba, nopython).

Importing this module imports numba: only the `*_numba` modules do, and only when
the work is large enough to pay for it (see record_block and store/pull_decode_kernel).

- `memcpy`: LLVM's memcpy on raw addresses. numba's slice assignment costs several
  times more for kilobyte bodies, and a ctypes call cannot be cached on disk.
- `load_u64`, `trailing_zeros`: word-at-a-time scans (eight bytes per step).
- `crc32_update`: zlib's CRC32 (IEEE), slice-by-8, for the record CRC of records
  encoded in a compiled loop. Its tables are an argument (`CRC32_TABLES`), not a
  global: numba does not cache code that holds global arrays.
- `crc32_combine`, `crc32_shift`: the CRC of two byte strings joined, from theirs (zlib's
  crc32_combine, by multiplication modulo the polynomial; `X2N_TABLE` is an argument too).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.misc.appdirs import AppDirs


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


def _ensure_cache_dir() -> None:
    """numba caches compiled code beside the source, else in the user's cache folder, and a function
    with cache=True fails to import when it can write neither (an installed package run by a service
    user without a home): give it a per-user folder under the temp dir then. NUMBA_CACHE_DIR wins."""
    if numba.config.CACHE_DIR:
        return
    if _writable(Path(__file__).parent / "__pycache__"):
        return
    if _writable(Path(AppDirs(appname="numba", appauthor=False).user_cache_dir)):
        return
    numba.config.CACHE_DIR = str(Path(tempfile.gettempdir()) / f"txmq-numba-{os.getuid()}")


_ensure_cache_dir()  # before any function below is compiled with cache=True


@intrinsic
def memcpy(typingctx, dst, src, count):
    """memcpy(dst, src, count) on raw addresses (intp)."""
    sig = types.void(types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        d, s, n = args
        byte_ptr = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(d, byte_ptr), builder.inttoptr(s, byte_ptr), n, 1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def load_u64(typingctx, address):
    """The 8 bytes at a raw address (intp) as a little-endian uint64, unaligned."""
    sig = types.uint64(types.intp)

    def codegen(context, builder, signature, args):
        word_ptr = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load(word_ptr, align=1)

    return sig, codegen


@intrinsic
def prefetch(typingctx, address):
    """Ask the CPU to start loading the cache line at a raw address (intp) for a read soon."""
    sig = types.void(types.intp)

    def codegen(context, builder, signature, args):
        byte_ptr, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.inttoptr(args[0], byte_ptr), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def trailing_zeros(typingctx, word):
    """The number of trailing zero bits of a non-zero uint64 (LLVM's cttz)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


def _crc32_tables() -> np.ndarray:
    """The eight 256-entry tables of slice-by-8 CRC32 (reflected polynomial 0xEDB88320)."""
    tables = np.zeros((8, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        tables[0, i] = c
    for k in range(1, 8):
        for i in range(256):
            prev = int(tables[k - 1, i])
            tables[k, i] = (prev >> 8) ^ int(tables[0, prev & 0xFF])
    return tables


CRC32_TABLES = _crc32_tables()


@njit(cache=True, nogil=True, inline="always")
def _le32(data, at):
    return (np.uint32(data[at]) | (np.uint32(data[at + 1]) << 8) | (np.uint32(data[at + 2]) << 16)
            | (np.uint32(data[at + 3]) << 24))


@njit(cache=True, nogil=True)
def crc32_update(crc, data, start, end, tables):
    """zlib.crc32(data[start:end], crc): the CRC32 of the bytes, continuing from `crc`."""
    ones = np.uint32(0xFFFFFFFF)
    c = np.uint32(crc) ^ ones
    at = start
    while at + 8 <= end:
        one = c ^ _le32(data, at)
        two = _le32(data, at + 4)
        c = (tables[7, one & 0xFF] ^ tables[6, (one >> 8) & 0xFF] ^ tables[5, (one >> 16) & 0xFF]
             ^ tables[4, one >> 24] ^ tables[3, two & 0xFF] ^ tables[2, (two >> 8) & 0xFF]
             ^ tables[1, (two >> 16) & 0xFF] ^ tables[0, two >> 24])
        at += 8
    while at < end:
        c = tables[0, (c ^ np.uint32(data[at])) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
        at += 1
    return c ^ ones


_CRC_POLY = 0xEDB88320


def _multmodp_py(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial (reflected bit order: bit 31 is x^0)."""
    product = 0
    for bit in range(31, -1, -1):
        if a >> bit & 1:
            product ^= b
        b = (b >> 1) ^ _CRC_POLY if b & 1 else b >> 1
    return product


def _x2n_table() -> np.ndarray:
    """x^(2^n) modulo the CRC polynomial, for n = 0..31: the squarings crc32_shift multiplies."""
    table = np.zeros(32, dtype=np.uint32)
    p = 1 << 30  # x^1
    for n in range(32):
        table[n] = p
        p = _multmodp_py(p, p)
    return table


X2N_TABLE = _x2n_table()


@njit(cache=True, nogil=True, inline="always")
def multmodp(a, b):
    """a * b modulo the CRC polynomial (numba; the operands are CRC-sized polynomials)."""
    a = np.uint32(a)
    b = np.uint32(b)
    product = np.uint32(0)
    poly = np.uint32(_CRC_POLY)
    for bit in range(31, -1, -1):
        if (a >> np.uint32(bit)) & np.uint32(1):
            product ^= b
        b = (b >> np.uint32(1)) ^ poly if b & np.uint32(1) else b >> np.uint32(1)
    return product


@njit(cache=True, nogil=True)
def crc32_shift(length, x2n):
    """x^(8 * length) modulo the CRC polynomial: what crc32_combine multiplies the first CRC by
    (zlib's crc32_combine_gen). `x2n` is X2N_TABLE."""
    p = np.uint32(1 << 31)  # x^0
    n = length
    k = 3  # a byte is 2^3 bits
    while n:
        if n & 1:
            p = multmodp(x2n[k & 31], p)
        n >>= 1
        k += 1
    return p


@njit(cache=True, nogil=True, inline="always")
def crc32_combine(crc_first, crc_second, shift):
    """zlib.crc32(first + second) from the CRCs of the two and crc32_shift(len(second)): the CRC of
    a record whose header changes, from the header's and the unchanged rest's."""
    return multmodp(shift, crc_first) ^ np.uint32(crc_second)


__all__ = ["CRC32_TABLES", "X2N_TABLE", "crc32_combine", "crc32_shift", "crc32_update", "load_u64", "memcpy", "prefetch",
           "trailing_zeros"]
