"""Plain result and message types of the Python client (no protobuf leaks past the client)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pyarrow as pa


class LocalTransactionState(str, enum.Enum):
    """What a producer's local transaction decided (RocketMQ's LocalTransactionState), and txmq's
    IN_PROGRESS: a check-back answer meaning "still running, ask later" that, unlike UNKNOWN, does
    not count towards the broker's --max-checks while the transaction is younger than its
    --in-progress-max-age (a Spark sink's micro-batch that has not finished)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"
    IN_PROGRESS = "IN_PROGRESS"

    @classmethod
    def parse(cls, value: "LocalTransactionState | str | None") -> "LocalTransactionState":
        """Accept the enum, its name in any case, or RocketMQ's long names; None means UNKNOWN."""
        if value is None:
            return cls.UNKNOWN
        if isinstance(value, cls):
            return value
        text = str(value.name if isinstance(value, enum.Enum) else value).upper()
        aliases = {"COMMIT_MESSAGE": "COMMIT", "ROLLBACK_MESSAGE": "ROLLBACK", "UNKNOW": "UNKNOWN"}
        text = aliases.get(text, text)
        try:
            return cls(text)
        except ValueError:
            raise ValueError(f"not a transaction state: {value!r} (use COMMIT, ROLLBACK, UNKNOWN or "
                             "IN_PROGRESS)") from None


@dataclass
class Message:
    """A message to send. `sharding_key` keeps messages with the same key in one queue, in order."""

    topic: str | None
    body: bytes
    tag: str | None = None
    keys: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    sharding_key: str | None = None
    message_id: str | None = None
    deliver_at_ms: int | None = None  # a timer message: delivered to its topic at this time (epoch ms)


def send_properties(m: "Message | Mapping") -> dict[str, str]:
    """The properties a send carries for `m`: its own, plus its delivery time as RocketMQ's
    TIMER_DELIVER_MS (the broker schedules a message that has one)."""
    if isinstance(m, Mapping):
        props, at = dict(m.get("properties") or {}), m.get("deliverAt", m.get("deliver_at_ms"))
    else:
        props, at = dict(m.properties or {}), m.deliver_at_ms
    if at is not None:
        props["TIMER_DELIVER_MS"] = str(int(at))
    return props


@dataclass
class TransactionalMessage(Message):
    """A message as its local transaction sees it: already stored as a half of `transaction_id`."""

    transaction_id: str = ""


@dataclass(frozen=True)
class ReceivedMessage:
    """A stored message as the broker reports it (get/query/check-back)."""

    topic: str
    queue_id: int
    queue_offset: int
    message_id: str
    offset_msg_id: str
    tag: str | None
    keys: tuple[str, ...]
    body: bytes
    properties: dict[str, str]
    born_timestamp_ms: int
    store_timestamp_ms: int
    transaction_id: str | None


@dataclass(frozen=True)
class QueueRange:
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class TopicInfo:
    name: str
    queue_count: int
    permission: int
    queues: dict[int, QueueRange]
    message_type: str = "MIXED"  # RocketMQ 5 topic type: NORMAL, FIFO, DELAY, TRANSACTION or MIXED


@dataclass(frozen=True)
class ConsumerGroupInfo:
    """A consumer group's settings on a broker (RocketMQ's subscription group)."""

    name: str
    fifo: bool  # consumeMessageOrderly: a queue's next messages wait while one is in flight
    retry_max_times: int  # redeliveries before the dead-letter topic
    max_delivery_attempts: int  # retry_max_times + 1


@dataclass(frozen=True)
class QueueSlice:
    topic: str
    queue_id: int
    first_offset: int
    count: int


@dataclass(frozen=True)
class SendSummary:
    count: int
    slices: list[QueueSlice]
    message_ids: list[str]
    group: str = ""  # the group that stored them (ClusterClient sends)


@dataclass(frozen=True)
class PrepareSummary:
    transaction_id: str
    count: int
    message_ids: list[str]


@dataclass(frozen=True)
class EndSummary:
    state: str
    newly_ended: bool
    committed_count: int = 0


@dataclass(frozen=True)
class TransactionInfo:
    transaction_id: str
    state: str
    topics: tuple[str, ...]
    half_count: int
    age_ms: int
    check_times: int
    producer_group: str
    senders: tuple[str, ...]
    created_ms: int
    next_check_ms: int = 0  # when the broker checks it back next (0: none scheduled)
    coordinator: str = ""  # a cross-group transaction's coordinator group
    participants: tuple[str, ...] = ()


@dataclass(frozen=True)
class PullResult:
    batch: pa.RecordBatch
    next_offset: int
    min_offset: int = 0
    max_offset: int = 0


@dataclass(frozen=True)
class PushedBatch:
    """A subscription's batch: messages of one queue, and the offset its next batch starts at
    (a filtered batch may have no rows while next_offset moves on)."""

    topic: str
    queue_id: int
    batch: pa.RecordBatch
    next_offset: int


@dataclass(frozen=True)
class CheckRequest:
    """A broker's question "did this transaction's local work commit?"."""

    transaction_id: str
    producer_group: str
    message: ReceivedMessage | None
    check_times: int


@dataclass(frozen=True)
class GroupLag:
    committed: int  # -1: nothing committed
    max_offset: int
    lag: int


@dataclass(frozen=True)
class TransactionSendResult:
    """The outcome of TransactionProducer.send_in_transaction."""

    transaction_id: str
    local_state: LocalTransactionState
    state: str  # the broker's state after the end (PENDING when left to check-back)
    count: int


@dataclass(frozen=True)
class QueueSegment:
    """Where part of a moved queue lies: a physical queue of `group` holding its offsets from `base` on."""

    group: str
    queue_id: int
    base: int


@dataclass(frozen=True)
class QueueRef:
    """A queue of a cluster topic: RocketMQ's (topic, broker name, queue id), a group standing
    for the broker. Outside a cluster the group is "". A queue keeps its name when it moves to
    another group (docs/cluster.md, "Moving queues"): `moves` says where its later offsets lie."""

    topic: str
    group: str
    queue_id: int
    moves: tuple[QueueSegment, ...] = ()
    sealing: str = ""  # a move to this group is under way: the queue takes no writes meanwhile

    @property
    def key(self) -> tuple[str, int]:
        return (self.group, self.queue_id)

    @property
    def segments(self) -> tuple[QueueSegment, ...]:
        return (QueueSegment(self.group, self.queue_id, 0),) + self.moves

    @property
    def current(self) -> QueueSegment:
        """The segment new writes go to."""
        return self.moves[-1] if self.moves else QueueSegment(self.group, self.queue_id, 0)


@dataclass(frozen=True)
class Routes:
    """Where a cluster's queues live (the native Routes call)."""

    cluster: bool
    groups: dict[str, tuple[str, ...]]  # group -> live replica endpoints, the leader first
    leaders: dict[str, str | None]  # group -> its leader's endpoint, None while it elects
    topics: dict[str, tuple[QueueRef, ...]]  # topic -> its queues in their global order
    message_types: dict[str, str] = field(default_factory=dict)
    retired: frozenset[str] = frozenset()  # groups drained for good: no transaction hashes to them

    def queues(self, topic: str) -> tuple[QueueRef, ...]:
        try:
            return self.topics[topic]
        except KeyError:
            raise KeyError(f"no route for topic {topic!r}") from None


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica of a broker group, as etcd records it (the native ClusterStatus call)."""

    endpoint: str
    role: str  # leader, follower or down
    in_sync: bool
    alive: bool
    log_end: int | None  # None: unknown (the replica is down)
    lag_bytes: int | None
    lag_seconds: float | None
    replica_id: str = ""
    may_not_lead: str = ""


@dataclass(frozen=True)
class GroupStatus:
    """A broker group: its leader (None while it elects), epoch and replicas; a lone broker is group ""."""

    name: str
    leader: str | None
    epoch: int
    members: tuple[ReplicaStatus, ...]
    elections: tuple["Election", ...] = ()  # newest first (etcd's record of who won when)


@dataclass(frozen=True)
class Election:
    """One election of a broker group: the epoch it began, its winner, when (the winner's clock)."""

    epoch: int
    leader: str
    at_ms: int


@dataclass(frozen=True)
class PendingGroup:
    """PENDING transactions of one producer group on one topic (the native TransactionSummary call)."""

    producer_group: str
    topic: str
    transactions: int
    oldest_age_ms: int
    max_check_times: int


@dataclass(frozen=True)
class ScheduledMessage:
    """A timer message waiting for its delivery time, with the handle that recalls it."""

    deliver_ms: int
    topic: str
    message_id: str
    recall_handle: str


@dataclass(frozen=True)
class ScheduledSummary:
    """A group's scheduled messages not yet delivered (the native ListScheduled call)."""

    pending: int
    bucket_ms: int
    buckets: list[tuple[int, int]]  # (bucket start ms, messages due in it), by time
    soonest: list[ScheduledMessage]


@dataclass(frozen=True)
class GroupMember:
    """A live member of a consumer group as its last heartbeat told the brokers (ListGroupMembers)."""

    client_id: str
    address: str               # host:port the heartbeat came from
    client: str                # kind, language and version, e.g. "txmq-python 0.1.0 PullConsumer"
    last_heartbeat_ms: int     # wall clock of the broker that took it
    pop: bool                  # a pop consumer: takes messages from any queue, holds none
    queues: tuple[tuple[str, str, int], ...]  # (topic, broker group, queue id) it holds
