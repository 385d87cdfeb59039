"""The core as the services see it (`BrokerCore` implements it; tests pass stand-ins of parts).

The services adapt protobuf to these calls and nothing else, so a fake core needs only this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

from txmq.broker.server.auth import Authenticator
from txmq.broker.server.checkback_router import CheckbackRouter
from txmq.broker.server.config import BrokerConfig
from txmq.broker.server.consumer_groups import ConsumerGroups
from txmq.broker.server.membership import Membership
from txmq.broker.server.metrics import ServerMetrics
from txmq.broker.server.rpc_metrics import RpcMetrics
from txmq.broker.server.topic_types import TopicTypes
from txmq.broker.store.batch import BatchColumns
from txmq.broker.store.dispatch import DispatchListener
from txmq.broker.store.message import AppendResult, Message, StoredMessage
from txmq.broker.store.message_store import QueueRead
from txmq.broker.store.metadata import ConsumerOffsets, TopicRegistry
from txmq.broker.store.message_filter import MessageFilter
from txmq.broker.store.tag_filter import TagFilter
from txmq.broker.transaction.engine import TransactionEngine

if TYPE_CHECKING:  # pop.py takes a ServiceCore itself; routes are the cluster's, which imports the server
    from txmq.broker.cluster.moves import QueueMover
    from txmq.broker.timer.service import TimerService
    from txmq.broker.cluster.routes import GroupRoute, TopicLayout
    from txmq.broker.server.pop import PopService


class ClusterRoutes(Protocol):
    """The route registry as a group's leader serves it (cluster/routes.py `RouteView`)."""

    group: str  # this broker's group

    def topic(self, name: str) -> "TopicLayout | None": ...

    def groups(self) -> "dict[str, GroupRoute]": ...

    def topics(self) -> "dict[str, TopicLayout]": ...

    def create_topic(self, name: str, queue_count: int, message_type: str) -> "TopicLayout": ...

    def refresh(self) -> None: ...

    def sealed(self) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]: ...

    def queue_base(self, topic: str, queue_id: int) -> int: ...

    def copied_away(self, topic: str, queue_id: int) -> bool: ...
    def moved_to(self, topic: str, queue_id: int, *, sealed: bool = False) -> str: ...


class ServiceStore(Protocol):
    """What the services call on the store (MessageStore)."""

    topics: TopicRegistry
    offsets: ConsumerOffsets

    def append(self, messages: Sequence[Message], *, allow_system: bool = False,
               wait_reserved: bool = True) -> Sequence[AppendResult]: ...

    def append_columns(self, batch: BatchColumns) -> Sequence[AppendResult]: ...

    def queue_reserved(self, topic: str, queue_id: int) -> bool: ...

    def queue_sealed(self, topic: str, queue_id: int) -> bool: ...

    def sealed_queue_ids(self, topic: str) -> frozenset[int]: ...

    def sealed_queues(self) -> frozenset[tuple[str, int]]: ...

    def seal_queues(self, moved: Iterable[tuple[str, int]], sealing: Iterable[tuple[str, int]]) -> None: ...

    def hold_seal(self, topic: str, queue_id: int, held: bool = True) -> None: ...

    def read_queue(self, topic: str, queue_id: int, offset: int, max_count: int, *,
                   tag_filter: TagFilter | MessageFilter | str | None = None,
                   max_bytes: int | None = None) -> QueueRead: ...

    def read_at(self, physical_offset: int, size: int | None = None) -> StoredMessage: ...

    def min_offset(self, topic: str, queue_id: int) -> int: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    def queue_ids(self, topic: str) -> list[int]: ...

    def queue_ids_by_topic(self) -> dict[str, list[int]]: ...

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...

    def cut_before(self, topic: str, queue_id: int, offset: int,
                   topics: Iterable[str]) -> dict[tuple[str, int], int] | None: ...

    def wait_visible(self, timeout_s: float) -> bool: ...

    def get_by_message_id(self, msg_id: str) -> StoredMessage: ...

    def query_by_key(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int | None = None,
                     max_count: int = 64) -> list[StoredMessage]: ...

    def add_dispatch_listener(self, fn: DispatchListener) -> None: ...

    def stats(self) -> dict: ...


class ServiceCore(Protocol):
    """What a service reads from the core: its parts, and the one rule of topics it owns."""

    store: ServiceStore
    engine: TransactionEngine
    router: CheckbackRouter
    config: BrokerConfig
    auth: Authenticator
    metrics: ServerMetrics
    rpc_metrics: RpcMetrics  # shared by every service, so one place counts each call
    advertised: tuple[str, int] | None  # (host, port) clients are told, set once the broker listens
    pop: PopService
    topic_types: TopicTypes  # each topic's RocketMQ 5 message type (routes announce it, sends obey it)
    consumer_groups: ConsumerGroups  # each consumer group's settings (FIFO, retries), as RocketMQ's subscription groups
    # a replicated group's leader: its replication figures (cluster/node.py); None for a single broker
    replication_status: Callable[[], dict] | None
    # a group's leader in a cluster: where every group's queues are; None outside a cluster
    routes: ClusterRoutes | None
    moves: "QueueMover | None"  # moves queues between groups (cluster/moves.py); None outside a cluster
    membership: Membership  # consumer groups' live members (in etcd in a cluster)
    timer: "TimerService"  # scheduled messages: delivery, recall and the console's view

    def topic_queue_count(self, topic: str, *, create: bool | None = None) -> int: ...

