"""txmq's storage engine: CommitLog, ConsumeQueue, IndexFile, checkpoint, recovery, retention.

The facade is `MessageStore` (see docs/ARCHITECTURE.md for the contract).
"""

from txmq.broker.lazy_names import lazy_names

# the module of each name, imported on first use: a client importing one store module (a message
# constant, the pull decoder) does not load the engine (MessageStore, numba's kernels, pandas)
_HOMES = {
    "StoreConfig": "config", "QueueEntry": "consume_queue", "DispatchEntry": "dispatch",
    "AppendResult": "message", "Message": "message", "StoredMessage": "message",
    "MessageStore": "message_store", "QueueRead": "message_store", "ConsumerOffsets": "metadata",
    "TopicConfig": "metadata", "TopicRegistry": "metadata", "TagFilter": "tag_filter",
}


__getattr__ = lazy_names(__name__, globals(), _HOMES)


__all__ = [
    "AppendResult", "ConsumerOffsets", "DispatchEntry", "Message", "MessageStore", "QueueEntry", "QueueRead",
    "StoreConfig", "StoredMessage", "TagFilter", "TopicConfig", "TopicRegistry",
]
