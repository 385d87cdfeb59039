"""Reserving a data file's disk blocks ahead of its writes (fallocate with KEEP_SIZE).

Appending to a file whose blocks are not allocated yet makes every write pay for
block allocation in the file system (ext4's delayed allocation and its journal),
which costs more than the write itself. RocketMQ avoids it by creating and warming each
CommitLog file ahead of use. txmq reserves blocks a chunk ahead of the write
position instead, with FALLOC_FL_KEEP_SIZE: the file's length stays the number
of bytes written, which is what recovery reads as the end of a segment (a torn
tail is still a short file), and at most one chunk of disk is reserved beyond
the data.

Linux only (glibc's fallocate through ctypes, no compiled code of our own); where
it is not available or the file system refuses, writes simply go unreserved.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys

FALLOC_FL_KEEP_SIZE = 0x01
RESERVE_CHUNK_BYTES = 64 << 20


def _load_fallocate():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


_fallocate = _load_fallocate()


def reserve(fd: int, offset: int, length: int) -> bool:
    """Reserve blocks for bytes [offset, offset+length) of the file without changing its length.

    Returns False when reserving is not possible here (not Linux, a file system
    without fallocate): the caller stops trying for that file. A full disk is
    not an error here either: the write that follows reports it.
    """
    return length > 0 and _allocate(fd, offset, length) == 0


def _allocate(fd: int, offset: int, length: int) -> int:
    """fallocate with KEEP_SIZE, retried on EINTR: 0, or the errno it failed with (ENOSYS where
    there is no fallocate)."""
    if _fallocate is None:
        return errno.ENOSYS
    while _fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length) != 0:
        err = ctypes.get_errno()
        if err != errno.EINTR:
            return err
    return 0


def back_mapped(fd: int, offset: int, length: int) -> bool:
    """Allocate the disk blocks of bytes [offset, offset+length) of a file written through a
    memory map, before the map writes there.

    A store through a map into a page the file system cannot allocate (a full disk) is not an
    error the writer sees: the kernel kills the process with SIGBUS. So map writers allocate
    first: a full disk raises OSError(ENOSPC) here, where it can be handled. Returns False when
    allocating is not possible here (not Linux, a file system without fallocate): the caller
    then writes through the map as before.
    """
    if length <= 0:
        return True
    err = _allocate(fd, offset, length)
    if err in (errno.ENOSPC, errno.EDQUOT):
        raise OSError(err, f"{os.strerror(err)}: cannot allocate {length} bytes of a mapped file")
    return err == 0
