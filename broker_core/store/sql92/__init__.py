"""RocketMQ's SQL92 message filter: parse once, evaluate per message or per pull batch.

    f = SqlFilter.compile("region = 'eu' AND amount BETWEEN 10 AND 20")
    f.accepts_properties({"region": "eu", "amount": "12"})   # one message
    f.mask(batch)                                            # a PULL_SCHEMA batch

The language (RocketMQ's subset): comparisons `=`, `<>`, `<`, `<=`, `>`, `>=`;
[NOT] BETWEEN; [NOT] IN ('a', ...); IS [NOT] NULL; [NOT] CONTAINS / STARTSWITH /
ENDSWITH 'text'; AND, OR, NOT and parentheses; constants 'text', integers,
decimals, TRUE, FALSE, NULL. Names are user properties, `TAGS` (the tag) and
`KEYS` (the keys, space-separated). Type rules: evaluate.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import pyarrow as pa

from txmq.broker.store.sql92.ast import Node, properties_of
from txmq.broker.store.sql92.columnar import Columns, batch_mask, codes, plan
from txmq.broker.store.sql92.evaluate import TRUE, compile_condition
from txmq.broker.store.sql92.parser import parse

__all__ = ["Columns", "SqlFilter", "parse"]


@dataclass(frozen=True, eq=False)
class SqlFilter:
    """A compiled SQL92 filter expression."""

    expression: str
    tree: Node
    _condition: object = field(repr=False)
    _plan: object = field(repr=False)

    @classmethod
    def compile(cls, expression: str) -> "SqlFilter":
        """Parse and compile; raises IllegalFilterExpression naming the position of a problem."""
        tree = parse(expression)
        return cls(expression, tree, compile_condition(tree), plan(tree))

    @property
    def names(self) -> frozenset[str]:
        """The property names the filter reads (TAGS and KEYS included)."""
        return properties_of(self.tree)

    def accepts_properties(self, properties: Mapping[str, str]) -> bool:
        """Whether a message with these properties (user ones, TAGS, KEYS) is selected."""
        return self._condition(properties.get) == TRUE

    def accepts(self, get: Callable[[str], "str | None"]) -> bool:
        """Whether the message whose property values `get` returns (None: missing) is selected."""
        return self._condition(get) == TRUE

    def mask(self, batch: pa.RecordBatch) -> np.ndarray:
        """The rows of a PULL_SCHEMA batch the filter selects."""
        return batch_mask(self._plan, batch)

    def mask_columns(self, columns: Columns) -> np.ndarray:
        """The rows selected, from the filter's properties laid out as columns (columnar.Columns)."""
        if columns.n == 0:
            return np.zeros(0, dtype=bool)
        return codes(self._plan, columns) == TRUE
