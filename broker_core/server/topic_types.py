"""Topic message types, as RocketMQ 5 has them: NORMAL, FIFO, DELAY, TRANSACTION (and MIXED).

A RocketMQ 5 topic accepts one kind of message (its `message.type` attribute);
routes announce it in each queue's `accept_message_types`, producers refuse to
send another kind, and the proxy refuses what slips through with
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE. txmq keeps a topic's type beside the
store's topic registry, in `topic_types.json` (the store's own metadata file
has no room for it).

A topic created without a type (auto-created ones, and every topic made
before types existed) is MIXED: it accepts every type, as txmq always did and
as RocketMQ's MIXED topics do, so existing applications keep working.
"""

from __future__ import annotations

import enum
import threading
from pathlib import Path

from txmq.broker.errors import BadRequest, PropertyConflictWithType
from txmq.broker.protocol import rocketmq_v2_pb2 as pb
from txmq.broker.store.metadata import read_json, write_json_atomically


class TopicType(enum.Enum):
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"

    @classmethod
    def parse(cls, text: str) -> "TopicType":
        try:
            return cls(text.strip().upper())
        except ValueError:
            names = ", ".join(t.value for t in cls)
            raise BadRequest(f"topic message type {text[:40]!r} is not one of {names}") from None

    @property
    def accepted(self) -> tuple[int, ...]:
        """The wire MessageTypes a route announces for a topic of this type."""
        return _ACCEPTED[self]


_ACCEPTED = {
    TopicType.NORMAL: (pb.NORMAL,),
    TopicType.FIFO: (pb.FIFO,),
    TopicType.DELAY: (pb.DELAY,),
    TopicType.TRANSACTION: (pb.TRANSACTION,),
    TopicType.MIXED: (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION),
}
_NAME_OF_WIRE = {pb.NORMAL: "NORMAL", pb.FIFO: "FIFO", pb.DELAY: "DELAY", pb.TRANSACTION: "TRANSACTION"}


def check_accepts(topic: str, topic_type: TopicType, message_type: int) -> None:
    """Refuse a message whose type the topic does not accept, with the proxy's code."""
    if topic_type is TopicType.MIXED or message_type in topic_type.accepted:
        return
    raise PropertyConflictWithType(
        f"topic {topic!r} accepts {topic_type.value} messages, not "
        f"{_NAME_OF_WIRE.get(message_type, str(message_type))} "
        f"(create it with `txmq topic create {topic} --type ...` to change that)")


class TopicTypes:
    """Each topic's type, persisted as one JSON file rewritten whole (crash-safe, like topics.json)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        raw = read_json(self.path, {})
        self._types: dict[str, TopicType] = {name: TopicType.parse(value) for name, value in raw.items()}

    def get(self, topic: str) -> TopicType:
        return self._types.get(topic, TopicType.MIXED)

    def set(self, topic: str, topic_type: TopicType) -> None:
        with self._lock:
            if self._types.get(topic, TopicType.MIXED) is topic_type:
                return
            if topic_type is TopicType.MIXED:
                del self._types[topic]
            else:
                self._types[topic] = topic_type
            write_json_atomically(self.path, {n: t.value for n, t in self._types.items()})

    def forget(self, topic: str) -> None:
        """A deleted topic's type goes with it: a topic made again under the name starts untyped."""
        self.set(topic, TopicType.MIXED)
