"""Tag filter expressions (`*`, `A || B`) and the tag hash stored in ConsumeQueue entries.

A ConsumeQueue entry carries a 64-bit hash of the message's tag so that a
filtered read can skip non-matching messages without reading the CommitLog; a
hash match is then confirmed on the real tag (hashes collide).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from txmq.broker.errors import IllegalFilterExpression


def tag_hash(tag: str | None) -> int:
    """The hash stored in a queue entry; 0 for an untagged message."""
    if not tag:
        return 0
    return zlib.crc32(tag.encode()) + 1  # +1: a tag never hashes to the "no tag" value


@dataclass(frozen=True)
class TagFilter:
    """A parsed tag expression. `tags` is None for `*` (everything matches)."""

    expression: str
    tags: frozenset[str] | None
    hashes: frozenset[int]

    @classmethod
    def parse(cls, expression: str | None) -> "TagFilter":
        expr = (expression or "").strip()
        if expr in ("", "*"):
            return cls(expr or "*", None, frozenset())
        # empty tags between separators are skipped, as RocketMQ's FilterAPI skips them ('A||||B')
        parts = [p for p in (p.strip() for p in expr.split("||")) if p]
        if not parts:
            raise IllegalFilterExpression(f"tag expression {expression!r} names no tag")
        if any(p == "*" for p in parts):
            return cls(expr, None, frozenset())
        tags = frozenset(parts)
        return cls(expr, tags, frozenset(tag_hash(t) for t in tags))

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def may_match(self, hash_value: int) -> bool:
        """Cheap pre-check on a queue entry's tag hash."""
        return self.tags is None or hash_value in self.hashes

    def matches(self, tag: str | None) -> bool:
        """The confirmation on the real tag."""
        return self.tags is None or (tag is not None and tag in self.tags)

    def accepts(self, message) -> bool:
        """The confirmation on a decoded message (the read filter protocol of store/message_filter.py)."""
        return self.matches(message.tags)
