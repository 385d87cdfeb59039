"""txmq's storage engine: CommitLog, ConsumeQueue, IndexFile, checkpoint, recovery, retention.

The facade is `MessageStore` (see docs/ARCHITECTURE.md for the contract).
"""

from txmq.broker.store.config import StoreConfig
from txmq.broker.store.consume_queue import QueueEntry
from txmq.broker.store.dispatch import DispatchEntry
from txmq.broker.store.message import AppendResult, Message, StoredMessage
from txmq.broker.store.message_store import MessageStore, QueueRead
from txmq.broker.store.metadata import ConsumerOffsets, TopicConfig, TopicRegistry
from txmq.broker.store.tag_filter import TagFilter

__all__ = [
    "AppendResult", "ConsumerOffsets", "DispatchEntry", "Message", "MessageStore", "QueueEntry", "QueueRead",
    "StoreConfig", "StoredMessage", "TagFilter", "TopicConfig", "TopicRegistry",
]
