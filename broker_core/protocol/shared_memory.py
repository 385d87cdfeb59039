"""The shared-memory pull convention both sides follow (see server/pull_shm.py for why it exists).

A client offers a probe file named PROBE_PREFIX* in the shared-memory
directory; a broker that accepts the offer writes each payload to a new file
named PAYLOAD_PREFIX* there, which the client maps and unlinks.
"""

from __future__ import annotations

import os
from pathlib import Path

SHM_DIR = Path("/dev/shm")
SHM_DIR_ENV = "TXMQ_PULL_SHM_DIR"  # another directory, or empty to turn shared-memory pulls off
PROBE_PREFIX = "txmq-probe-"
PAYLOAD_PREFIX = "txmq-pull-"
MAX_TOKEN_BYTES = 64


def shm_dir_from_env() -> Path | None:
    """The shared-memory directory: $TXMQ_PULL_SHM_DIR if set (empty: none), else /dev/shm if present."""
    raw = os.environ.get(SHM_DIR_ENV)
    directory = SHM_DIR if raw is None else (Path(raw) if raw else None)
    return directory if directory is not None and directory.is_dir() else None
