"""Make `pyspark_txmq` visible to pyspark's data source lookup in any install.

pyspark finds `pyspark_*` modules with `pkgutil.iter_modules()`, which cannot see
packages that an editable install maps through an import hook. `make venv`
adds the module's folder to the venv's path (a .pth file); a venv set up by
hand with `pip install -e .` lacks it, so this puts the folder on PYTHONPATH,
which Spark's Python workers inherit. A regular `pip install` needs neither.
"""

from __future__ import annotations

import os
import pkgutil
from pathlib import Path

AUTOREGISTER_DIR = Path(__file__).resolve().parents[2] / "connector" / "autoregister"


def expose_autoregister_module() -> None:
    if any(m.name == "pyspark_txmq" for m in pkgutil.iter_modules()):
        return
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(AUTOREGISTER_DIR), os.environ.get("PYTHONPATH")) if p)
