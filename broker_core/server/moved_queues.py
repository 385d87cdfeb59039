"""Committed offsets of a physical queue that a moved queue continues on (docs/cluster.md, "Moving
queues"): the store keeps consumer groups' offsets of a queue in its logical offsets (a move carries
them over as they are, the native client commits them so), while the RocketMQ 5 clients pop and pull
the physical queue in its own offsets. These two functions are the broker's one translation; the
client's is client/segments.py."""

from __future__ import annotations

from txmq.broker.server.core_seam import ServiceCore


def queue_base(core: ServiceCore, topic: str, queue_id: int) -> int:
    """The logical offset of the physical queue's offset 0 (0 outside a cluster or for a queue that
    never moved)."""
    routes = core.routes
    return 0 if routes is None else routes.queue_base(topic, queue_id)


def copied_away(core: ServiceCore, topic: str, queue_id: int) -> bool:
    """Whether the physical queue's history was copied to another group (cluster/copier.py): its
    records are read there, never here as well."""
    routes = core.routes
    return routes is not None and routes.copied_away(topic, queue_id)


def to_stored(base: int, physical: int) -> int:
    """A physical queue's offset as the consumer offsets store keeps it."""
    return physical + base


def to_physical(base: int, stored: int) -> int:
    """A stored (logical) offset as a position in the physical queue starting at `base`: a group
    that had not reached the move yet reads this queue from its start (the rest lies before it)."""
    return max(0, stored - base)
