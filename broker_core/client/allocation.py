"""How a consumer group divides queues among its members (RocketMQ's AllocateMessageQueueStrategy).

Every member computes the allocation itself from the same sorted queues and members, so all
agree without talking to each other; each queue goes to exactly one member.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Callable, Hashable, Sequence, TypeVar

Q = TypeVar("Q", bound=Hashable)

VIRTUAL_NODES = 10  # RocketMQ's default for consistent hashing


def average(queues: Sequence[Q], members: Sequence[str], me: str) -> list[Q]:
    """Contiguous runs of queues, the first `len(queues) % len(members)` members taking one more."""
    if me not in members:
        return []
    n, k = len(queues), len(members)
    index = sorted(members).index(me)
    base, extra = divmod(n, k)
    size = base + (1 if index < extra else 0)
    start = index * base + min(index, extra)
    return list(queues[start:start + size])


def _point(text: str) -> int:
    return int.from_bytes(hashlib.md5(text.encode()).digest()[:8], "big")


def consistent_hash(queues: Sequence[Q], members: Sequence[str], me: str, *,
                    virtual_nodes: int = VIRTUAL_NODES, key: Callable[[Q], str] = str) -> list[Q]:
    """Each queue to the member whose ring point follows the queue's hash: a member joining or
    leaving moves only about 1/len(members) of the queues."""
    if me not in members:
        return []
    ring = sorted((_point(f"{m}#{v}"), m) for m in members for v in range(virtual_nodes))
    points = [p for p, _ in ring]
    out = []
    for q in queues:
        at = bisect.bisect(points, _point(key(q))) % len(ring)
        if ring[at][1] == me:
            out.append(q)
    return out


STRATEGIES: dict[str, Callable[..., list]] = {"average": average, "consistent_hash": consistent_hash}


def allocate(strategy: str, queues: Sequence[Q], members: Sequence[str], me: str) -> list[Q]:
    try:
        fn = STRATEGIES[strategy]
    except KeyError:
        raise ValueError(f"unknown allocation {strategy!r} (use {', '.join(STRATEGIES)})") from None
    return fn(queues, members, me)
