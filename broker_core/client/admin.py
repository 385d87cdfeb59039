"""Admin: topics, pending transactions, consumer groups and broker stats."""

from __future__ import annotations

from typing import Any, Sequence

from txmq.broker.client._connection import client_for
from txmq.broker.client.native_client import NativeClient
from txmq.broker.client.types import (ConsumerGroupInfo, EndSummary, GroupLag, ReceivedMessage, TopicInfo,
                                     TransactionInfo)


class Admin:
    """Operations an operator runs (the CLI is built on these)."""

    def __init__(self, broker: NativeClient | str, **client_kwargs: Any) -> None:
        self.client, self._owned = client_for(broker, **client_kwargs)

    # topics
    def create_topic(self, name: str, queue_count: int = 4, message_type: str | None = None) -> TopicInfo:
        return self.client.create_topic(name, queue_count, message_type)

    def list_topics(self, *, include_system: bool = False) -> list[TopicInfo]:
        return self.client.list_topics(include_system=include_system)

    def describe_topic(self, name: str) -> TopicInfo:
        return self.client.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        self.client.delete_topic(name)

    # transactions
    def list_transactions(self, *, state: str = "PENDING", topic: str | None = None,
                          limit: int = 1000) -> list[TransactionInfo]:
        return self.client.list_transactions(state=state, topic=topic, limit=limit)

    def get_transaction(self, transaction_id: str) -> TransactionInfo:
        return self.client.get_transaction(transaction_id)

    def commit_transaction(self, transaction_id: str) -> EndSummary:
        return self.client.end_transaction(transaction_id, "COMMIT", source="admin")

    def rollback_transaction(self, transaction_id: str) -> EndSummary:
        return self.client.end_transaction(transaction_id, "ROLLBACK", source="admin")

    def resume_transaction(self, transaction_id: str) -> None:
        self.client.resume_transaction(transaction_id)

    # messages
    def get_message(self, message_id: str) -> ReceivedMessage:
        return self.client.get_message(message_id)

    def query_messages(self, topic: str, key: str, *, max_count: int = 64) -> list[ReceivedMessage]:
        return self.client.query_messages(topic, key, max_count=max_count)

    # consumer groups and stats
    def group_lag(self, group: str, topics: Sequence[str] = ()) -> dict[str, dict[int, GroupLag]]:
        return self.client.group_lag(group, topics)

    def update_consumer_group(self, name: str, *, fifo: bool | None = None, retry_max_times: int | None = None,
                              must_exist: bool = False) -> ConsumerGroupInfo:
        """A consumer group's settings on this broker (a cluster: ClusterClient.update_consumer_group)."""
        return self.client.update_consumer_group(name, fifo=fifo, retry_max_times=retry_max_times,
                                                 must_exist=must_exist)

    def describe_consumer_group(self, name: str) -> ConsumerGroupInfo:
        return self.client.describe_consumer_group(name)

    def list_consumer_groups(self) -> list[ConsumerGroupInfo]:
        return self.client.list_consumer_groups()

    def delete_consumer_group(self, name: str) -> None:
        self.client.delete_consumer_group(name)

    def stats(self) -> dict:
        return self.client.stats()

    def close(self) -> None:
        if self._owned:
            self.client.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
