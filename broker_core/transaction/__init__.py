"""The transaction engine: half/op messages, EndTransaction, check-back, consistent cut."""

import importlib

# the module of each name, imported on first use: a client importing one transaction module (the
# cross-group records it reads) does not load the engine and the store behind it
_HOMES = {
    "CheckbackListener": "checkback", "CheckbackService": "checkback", "CheckRound": "checkback",
    "TransactionConfig": "config", "TransactionEngine": "engine", "TransactionMetrics": "metrics",
    "EndResult": "state", "PrepareResult": "state", "Resolution": "state", "TransactionInfo": "state",
    "TxState": "state",
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "CheckbackListener", "CheckbackService", "CheckRound", "TransactionConfig", "TransactionEngine",
    "TransactionMetrics", "EndResult", "PrepareResult", "Resolution", "TransactionInfo", "TxState",
]
