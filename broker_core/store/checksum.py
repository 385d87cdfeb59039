"""CRC32 (IEEE, zlib's) for record and body checksums.

Every appended byte is checksummed once, so the CRC is a large part of the
append cost: zlib-ng's SIMD implementation gives the same values as zlib's, faster.
zlib is the fallback when the wheel is
not installed; the on-disk format is identical either way.
"""

from __future__ import annotations

try:
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - zlib-ng is a declared dependency
    from zlib import crc32

__all__ = ["crc32"]
