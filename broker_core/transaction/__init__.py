"""The transaction engine: half/op messages, EndTransaction, check-back, consistent cut."""

from txmq.broker.lazy_names import lazy_names

# the module of each name, imported on first use: a client importing one transaction module (the
# cross-group records it reads) does not load the engine and the store behind it
_HOMES = {
    "CheckbackListener": "checkback", "CheckbackService": "checkback", "CheckRound": "checkback",
    "TransactionConfig": "config", "TransactionEngine": "engine", "TransactionMetrics": "metrics",
    "EndResult": "state", "PrepareResult": "state", "Resolution": "state", "TransactionInfo": "state",
    "TxState": "state",
}


__getattr__ = lazy_names(__name__, globals(), _HOMES)


__all__ = [
    "CheckbackListener", "CheckbackService", "CheckRound", "TransactionConfig", "TransactionEngine",
    "TransactionMetrics", "EndResult", "PrepareResult", "Resolution", "TransactionInfo", "TxState",
]
