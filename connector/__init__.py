"""txmq's PySpark connector: the data source "txmq" (stream and batch reader, exactly-once
stream and batch writer) and the foreachBatch transactional helper.

    from txmq.spark import TxmqDataSource, TransactionalBatch

Installing txmq makes `format("txmq")` work without registration (see
`pyspark_txmq`); `spark.dataSource.register(TxmqDataSource)` does the same by hand.
"""

from ._requires import require_pyspark

require_pyspark()  # before the modules that import it: a missing or old pyspark is one clear line

from .foreach_batch import TransactionalBatch  # noqa: E402
from .schema import SOURCE_SCHEMA  # noqa: E402
from .sink import SinkCheckback  # noqa: E402
from .source import TxmqDataSource  # noqa: E402

__all__ = ["TxmqDataSource", "TransactionalBatch", "SinkCheckback", "SOURCE_SCHEMA"]
