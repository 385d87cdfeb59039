"""txmq's Python client: NativeClient (the RPC wrapper) and the Producer, TransactionProducer,
PullConsumer and Admin built on it. Errors are `txmq.broker.errors` classes."""

from txmq.broker.client.admin import Admin
from txmq.broker.client.batches import to_arrow_table
from txmq.broker.client.checkback import CheckbackSession
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.producer import Producer
from txmq.broker.client.pull_consumer import PullConsumer
from txmq.broker.client.subscription import Subscription
from txmq.broker.client.transaction_producer import TransactionListener, TransactionProducer
from txmq.broker.client.types import (
    CheckRequest,
    ConsumerGroupInfo,
    EndSummary,
    GroupLag,
    LocalTransactionState,
    Message,
    PrepareSummary,
    PullResult,
    PushedBatch,
    QueueRange,
    ReceivedMessage,
    SendSummary,
    TopicInfo,
    TransactionalMessage,
    TransactionInfo,
    TransactionSendResult,
)

__all__ = [
    "Admin", "CheckbackSession", "CheckRequest", "ConsumerGroupInfo", "EndSummary", "GroupLag", "LocalTransactionState", "Message",
    "NativeClient", "PrepareSummary", "Producer", "PullConsumer", "PullResult", "PushedBatch", "QueueRange", "ReceivedMessage",
    "SendSummary", "Subscription", "TopicInfo", "TransactionalMessage", "TransactionInfo", "TransactionListener",
    "TransactionProducer", "TransactionSendResult", "to_arrow_table",
]
