"""The transaction engine: half/op messages, EndTransaction, check-back, consistent cut."""

from .checkback import CheckbackListener, CheckbackService, CheckRound
from .config import TransactionConfig
from .engine import TransactionEngine
from .metrics import TransactionMetrics
from .state import EndResult, PrepareResult, Resolution, TransactionInfo, TxState

__all__ = [
    "CheckbackListener", "CheckbackService", "CheckRound", "TransactionConfig", "TransactionEngine",
    "TransactionMetrics", "EndResult", "PrepareResult", "Resolution", "TransactionInfo", "TxState",
]
