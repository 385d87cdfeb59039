"""txmq's PySpark connector: the data source "txmq" (stream and batch reader, exactly-once
stream and batch writer) and the foreachBatch transactional helper.

    from txmq.spark import TxmqDataSource, TransactionalBatch

Installing txmq makes `format("txmq")` work without registration (see
`pyspark_txmq`); `spark.dataSource.register(TxmqDataSource)` does the same by hand.
"""

from .foreach_batch import TransactionalBatch
from .schema import SOURCE_SCHEMA
from .sink import SinkCheckback
from .source import TxmqDataSource

__all__ = ["TxmqDataSource", "TransactionalBatch", "SinkCheckback", "SOURCE_SCHEMA"]
