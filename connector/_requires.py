"""The connector's one optional dependency, pyspark (the `spark` extra), checked where it is first needed."""

from __future__ import annotations

# Python data sources with streaming readers and writers, and filter pushdown, arrived in Spark 4.x;
# pyproject's `spark` extra asks for the same version.
MIN_PYSPARK = (4, 2)
INSTALL_HINT = "pip install 'txmq[spark]'"


class PysparkMissing(ModuleNotFoundError):
    """pyspark is absent or too old for the connector; the message says how to install it."""


def require_pyspark() -> None:
    try:
        import pyspark
    except ModuleNotFoundError:
        raise PysparkMissing(f"the txmq Spark connector needs pyspark >= {_dotted(MIN_PYSPARK)}, "
                             f"which is not installed: {INSTALL_HINT}", name="pyspark") from None
    found = tuple(int(p) for p in pyspark.__version__.split(".")[:2] if p.isdigit())
    if found < MIN_PYSPARK:
        raise PysparkMissing(f"the txmq Spark connector needs pyspark >= {_dotted(MIN_PYSPARK)}, found "
                             f"{pyspark.__version__}: {INSTALL_HINT}", name="pyspark")


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))
