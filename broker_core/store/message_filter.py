"""A read's filter: a tag expression, a SQL92 expression, or both (a message must pass both).

Every read path takes one of these: the object reads (`MessageStore.read_queue`, pop
receives, the RocketMQ protocol's pulls) ask `accepts(message)`; the columnar pulls
ask `mask(batch)` of a decoded batch. `may_match(tag_hash)` is the cheap pre-check on
a ConsumeQueue entry: a SQL filter that requires the tag to be one of a set (`TAGS IN
(...)`, `TAGS = '...'` under AND) skips other tags' entries without reading them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txmq.broker.errors import IllegalFilterExpression
from txmq.broker.store.message import PROP_TAGS, StoredMessage
from txmq.broker.store.property_names import is_user_property
from txmq.broker.store.sql92 import SqlFilter
from txmq.broker.store.sql92.ast import And, Compare, Const, InList, Node, Or, Prop
from txmq.broker.store.tag_filter import TagFilter, tag_hash

SQL_NAMES_FROM_SYSTEM = frozenset({"TAGS", "KEYS"})  # the system properties a SQL filter may read

# Consumers send their expression with every receive and pull: each is compiled once (a compiled
# filter holds no per-read state, so reads share it).
compiled_sql = functools.lru_cache(maxsize=256)(SqlFilter.compile)


@dataclass(frozen=True)
class MessageFilter:
    tags: TagFilter
    sql: SqlFilter | None = None
    _hashes: frozenset[int] | None = None  # the tag hashes a message must have; None: any

    @classmethod
    def parse(cls, tags: str | None = None, sql: str | None = None) -> "MessageFilter":
        """From a tag expression and/or a SQL92 expression ('' or None: none)."""
        tag_filter = TagFilter.parse(tags)
        sql_filter = compiled_sql(sql) if sql and sql.strip() else None
        hashes = None if tag_filter.matches_all else tag_filter.hashes
        if sql_filter is not None:
            required = required_tags(sql_filter.tree)
            if required is not None:
                sql_hashes = frozenset(tag_hash(t) for t in required)
                hashes = sql_hashes if hashes is None else hashes & sql_hashes
        return cls(tag_filter, sql_filter, hashes)

    @classmethod
    def of(cls, expression_type: str, expression: str | None) -> "MessageFilter":
        """RocketMQ's (type, expression) pair: type "TAG" or "SQL92"."""
        if expression_type == "SQL92":
            if not expression or not expression.strip():
                raise IllegalFilterExpression("a SQL92 filter expression is empty")
            return cls.parse(sql=expression)
        return cls.parse(tags=expression)

    @property
    def matches_all(self) -> bool:
        return self.sql is None and self.tags.matches_all

    def may_match(self, hash_value: int) -> bool:
        return self._hashes is None or hash_value in self._hashes

    def accepts(self, message: StoredMessage) -> bool:
        props = message.properties
        if not self.tags.matches(props.get(PROP_TAGS)):
            return False
        if self.sql is None:
            return True
        return self.sql.accepts(lambda name: props.get(name) if visible_to_sql(name) else None)

    def mask(self, batch: pa.RecordBatch) -> np.ndarray:
        """The rows of a PULL_SCHEMA batch that pass."""
        keep = np.ones(batch.num_rows, dtype=bool)
        if not self.tags.matches_all:
            tags = pa.array(sorted(self.tags.tags), pa.string())
            keep &= pc.fill_null(pc.is_in(batch.column("tag"), value_set=tags), False).to_numpy(
                zero_copy_only=False)
        if self.sql is not None:
            keep &= self.sql.mask(batch)
        return keep

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch without the rows that do not pass."""
        if self.matches_all or batch.num_rows == 0:
            return batch
        keep = self.mask(batch)
        return batch if keep.all() else batch.filter(pa.array(keep))


def visible_to_sql(name: str) -> bool:
    """A SQL filter reads user properties, TAGS and KEYS; other system properties read as missing."""
    return name in SQL_NAMES_FROM_SYSTEM or is_user_property(name)


def required_tags(node: Node) -> frozenset[str] | None:
    """Tags one of which a selected message must carry, when the expression says so; else None."""
    if isinstance(node, InList) and node.prop.name == "TAGS" and not node.negated:
        return node.values
    if (isinstance(node, Compare) and node.op == "=" and isinstance(node.left, Prop) and node.left.name == "TAGS"
            and isinstance(node.right, Const) and isinstance(node.right.value, str)):
        return frozenset((node.right.value,))
    if isinstance(node, And):
        left, right = required_tags(node.left), required_tags(node.right)
        if left is None or right is None:
            return left if right is None else right
        return left & right
    if isinstance(node, Or):
        left, right = required_tags(node.left), required_tags(node.right)
        return None if left is None or right is None else left | right
    return None
