"""Consumer group settings, as RocketMQ's subscription groups hold them: FIFO and retries.

Apache RocketMQ keeps a `SubscriptionGroupConfig` per consumer group on each broker
(`mqadmin updateSubGroup`): `consumeMessageOrderly` makes the group FIFO (the proxy then
answers `Settings.subscription.fifo = true` and pops the group's queues orderly) and
`retryMaxTimes` bounds redeliveries (a message is delivered at most retryMaxTimes + 1
times, then moved to `%DLQ%<group>`). txmq keeps the same two settings per group in
`consumer_groups.json` beside the store's `topics.json`; the file is replicated to a
group's followers with the other metadata files (cluster/replication.py).

A group nobody configured is not FIFO and retries as the broker's
`client_max_delivery_attempts` says (17 deliveries, RocketMQ's 16 retries), so consumers
of unconfigured groups keep working as they always did.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from txmq.broker.errors import BadRequest, ConsumerGroupNotFound
from txmq.broker.server.convert import check_group
from txmq.broker.store.metadata import read_json, write_json_atomically

MAX_RETRY_TIMES = 1000  # a bound that keeps max_attempts in the wire's int32 with room to spare


@dataclass(frozen=True, slots=True)
class GroupSettings:
    name: str
    fifo: bool
    retry_max_times: int  # redeliveries after the first delivery (RocketMQ's retryMaxTimes)

    @property
    def max_delivery_attempts(self) -> int:
        """Deliveries before the message goes to the dead-letter topic (the proxy's retryMaxTimes + 1)."""
        return self.retry_max_times + 1


def check_retry_max_times(value: int) -> int:
    if not 0 <= value <= MAX_RETRY_TIMES:
        raise BadRequest(f"retry_max_times must be within 0..{MAX_RETRY_TIMES}, got {value}")
    return value


class ConsumerGroups:
    """Every configured group's settings, persisted as one JSON file rewritten whole (crash-safe)."""

    def __init__(self, path: Path, *, default_max_attempts: int) -> None:
        assert default_max_attempts >= 1, "a message is delivered at least once"
        self.path = Path(path)
        self.default_retry_max_times = default_max_attempts - 1
        self._lock = threading.Lock()
        raw = read_json(self.path, {})
        self._groups: dict[str, GroupSettings] = {
            name: GroupSettings(name, bool(v.get("fifo", False)),
                                int(v.get("retry_max_times", self.default_retry_max_times)))
            for name, v in raw.items()}

    def get(self, name: str) -> GroupSettings:
        """The group's settings; an unconfigured group's are the broker's defaults."""
        found = self._groups.get(name)
        return found if found is not None else GroupSettings(name, False, self.default_retry_max_times)

    def find(self, name: str) -> GroupSettings | None:
        return self._groups.get(name)

    def describe(self, name: str) -> GroupSettings:
        found = self._groups.get(name)
        if found is None:
            raise ConsumerGroupNotFound(f"consumer group {name!r} has no settings on this broker "
                                        "(create them with `txmq group create`)")
        return found

    def list(self) -> list[GroupSettings]:
        return sorted(self._groups.values(), key=lambda g: g.name)

    def update(self, name: str, *, fifo: bool | None = None, retry_max_times: int | None = None,
               must_exist: bool = False) -> GroupSettings:
        """Create the group's settings or change the given ones (None keeps the current value)."""
        check_group(name)
        if retry_max_times is not None:
            check_retry_max_times(retry_max_times)
        with self._lock:
            current = self._groups.get(name)
            if current is None and must_exist:
                raise ConsumerGroupNotFound(f"consumer group {name!r} does not exist")
            base = current or self.get(name)
            updated = GroupSettings(name, base.fifo if fifo is None else fifo,
                                    base.retry_max_times if retry_max_times is None else retry_max_times)
            if updated != current:
                self._groups[name] = updated
                self._write()
            return updated

    def delete(self, name: str) -> None:
        with self._lock:
            if self._groups.pop(name, None) is None:
                raise ConsumerGroupNotFound(f"consumer group {name!r} does not exist")
            self._write()

    def _write(self) -> None:
        write_json_atomically(self.path, {g.name: {"fifo": g.fifo, "retry_max_times": g.retry_max_times}
                                          for g in self._groups.values()})
