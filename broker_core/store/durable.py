"""Crash-safe small files: the one way txmq replaces a file so a crash leaves the old or the new one.

Write a temporary sibling, fsync it, rename it over the target, fsync the
directory (the rename itself is a directory entry and is lost without it).
Metadata, checkpoints and the transaction table's snapshots all go through here.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a created/renamed/deleted directory entry durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: after a crash it holds either the old or the new content, whole."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
