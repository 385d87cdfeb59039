"""Topic and consumer-group-offset metadata, persisted crash-safely.

Each registry is one JSON file rewritten as a whole: write a temp file, fsync,
rename over the old one, fsync the directory. A crash leaves either the old or
the new file, never a torn one. System topics (the transaction engine's) exist
implicitly with one queue and cannot be created, changed or deleted.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from txmq.broker.errors import IllegalQueue, IllegalTopic, OffsetNotFound, TopicNotFound
from txmq.broker.store.durable import write_bytes_atomically
from txmq.broker.store.message import SYSTEM_TOPICS
from txmq.broker.store.validation import check_topic_name

PERM_READ = 4
PERM_WRITE = 2
PERM_READ_WRITE = PERM_READ | PERM_WRITE
MAX_QUEUE_COUNT = 1024


def write_json_atomically(path: Path, data: object) -> None:
    write_bytes_atomically(path, json.dumps(data, sort_keys=True).encode("utf-8"))


def read_json(path: Path, default: object) -> object:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default


@dataclass(frozen=True)
class TopicConfig:
    name: str
    queue_count: int = 4
    permission: int = PERM_READ_WRITE

    @property
    def readable(self) -> bool:
        return bool(self.permission & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.permission & PERM_WRITE)


class ReplicatedFile:
    """A metadata file a replicated group's leader sends its followers whole when it changes
    (it lives beside the CommitLog, not in it)."""

    path: Path

    def _load(self, raw: dict) -> None:
        raise NotImplementedError

    def replace(self, raw: bytes) -> None:
        """A follower takes its leader's copy: on disk, then in memory."""
        data = json.loads(raw)
        write_json_atomically(self.path, data)
        self._load(data)


class TopicRegistry(ReplicatedFile):
    """Topics: name, queue count, permission. Persisted in topics.json."""

    def __init__(self, path: Path, on_delete: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._on_delete = on_delete
        self._load(read_json(self.path, {}))

    def _load(self, raw: dict) -> None:
        self._topics: dict[str, TopicConfig] = {
            name: TopicConfig(name, int(v["queue_count"]), int(v["permission"])) for name, v in raw.items()}

    def _save(self) -> None:
        write_json_atomically(self.path, {n: {"queue_count": t.queue_count, "permission": t.permission}
                                          for n, t in self._topics.items()})

    def create(self, name: str, queue_count: int = 4, permission: int = PERM_READ_WRITE) -> TopicConfig:
        """Create or update a topic (idempotent: same arguments, same result)."""
        check_topic_name(name)
        if not 1 <= queue_count <= MAX_QUEUE_COUNT:
            raise IllegalQueue(f"queue count {queue_count} is out of range 1..{MAX_QUEUE_COUNT}")
        if permission & ~PERM_READ_WRITE:
            raise IllegalTopic(f"permission {permission} is not a combination of READ(4) and WRITE(2)")
        topic = TopicConfig(name, queue_count, permission)
        with self._lock:
            if self._topics.get(name) != topic:
                self._topics[name] = topic
                self._save()
        return topic

    def get(self, name: str) -> TopicConfig:
        if name in SYSTEM_TOPICS:
            return TopicConfig(name, 1, PERM_READ_WRITE)
        try:
            return self._topics[name]
        except KeyError:
            raise TopicNotFound(f"topic {name!r} does not exist") from None

    def exists(self, name: str) -> bool:
        return name in SYSTEM_TOPICS or name in self._topics

    def list(self, *, include_system: bool = False) -> list[TopicConfig]:
        topics = sorted(self._topics.values(), key=lambda t: t.name)
        if include_system:
            topics += [TopicConfig(n, 1, PERM_READ_WRITE) for n in sorted(SYSTEM_TOPICS)]
        return topics

    def delete(self, name: str) -> None:
        if name in SYSTEM_TOPICS:
            raise IllegalTopic(f"system topic {name!r} cannot be deleted")
        with self._lock:
            if name not in self._topics:
                raise TopicNotFound(f"topic {name!r} does not exist")
            del self._topics[name]
            self._save()
        if self._on_delete is not None:
            self._on_delete(name)


class ConsumerOffsets(ReplicatedFile):
    """Committed consumer-group offsets per (topic, queue id). Persisted in offsets.json on each commit."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._load(read_json(self.path, {}))

    def _load(self, raw: dict) -> None:
        self._offsets: dict[str, dict[tuple[str, int], int]] = {
            group: {(t, int(q)): int(o) for t, queues in topics.items() for q, o in queues.items()}
            for group, topics in raw.items()}

    def _save(self) -> None:
        data: dict = {}
        for group, entries in self._offsets.items():
            g = data.setdefault(group, {})
            for (topic, qid), off in entries.items():
                g.setdefault(topic, {})[str(qid)] = off
        write_json_atomically(self.path, data)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit_many(group, {(topic, queue_id): offset})

    def commit_many(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Durably record several offsets in one write."""
        if not group:
            raise IllegalTopic("consumer group name is empty")
        for (_, _), off in offsets.items():
            if off < 0:
                raise IllegalQueue(f"offset {off} is negative")
        with self._lock:
            self._offsets.setdefault(group, {}).update(offsets)
            self._save()

    def get(self, group: str, topic: str, queue_id: int) -> int:
        try:
            return self._offsets[group][(topic, queue_id)]
        except KeyError:
            raise OffsetNotFound(f"group {group!r} has no committed offset for {topic}:{queue_id}") from None

    def group(self, group: str) -> dict[tuple[str, int], int]:
        return dict(self._offsets.get(group, {}))

    def groups(self) -> list[str]:
        return sorted(self._offsets)

    def delete_group(self, group: str) -> None:
        with self._lock:
            if self._offsets.pop(group, None) is not None:
                self._save()

    def drop_topic(self, topic: str) -> None:
        with self._lock:
            changed = False
            for entries in self._offsets.values():
                for key in [k for k in entries if k[0] == topic]:
                    del entries[key]
                    changed = True
            if changed:
                self._save()


__all__ = ["TopicConfig", "TopicRegistry", "ConsumerOffsets", "PERM_READ", "PERM_WRITE", "PERM_READ_WRITE"]
