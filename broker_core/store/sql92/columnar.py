"""A compiled SQL92 filter evaluated over a whole pull batch at once.

The pull path decodes a queue range into one Arrow batch (store/pull_decode.py);
this module turns the filter into a boolean mask over that batch without a
Python step per message:

- each property the filter reads is looked up in the batch's `properties` map
  column (`TAGS` is the `tag` column, `KEYS` the `keys` list joined by spaces, as
  RocketMQ stores them) and dictionary-encoded by Arrow;
- each condition that reads one property is evaluated by the per-message code
  (evaluate.py) once per *distinct value*, and its codes are spread to the rows
  with one numpy take: property values repeat (regions, types, amounts), so the
  Python work follows the number of distinct values, not of messages;
- AND, OR and NOT combine the rows' codes through 4x4 tables, which keep the
  per-message semantics (left side first, ERROR as RocketMQ's exception);
- a condition reading two properties (`a > b`) is evaluated per row, the rare case.

Sharing the per-message code for the leaves is what keeps the two evaluations
identical; tests/store/test_sql92_columnar.py checks them against each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txmq.broker.store.sql92.ast import And, Node, Not, Or, properties_of
from txmq.broker.store.sql92.evaluate import ERROR, FALSE, NULL, TRUE, compile_condition

TAGS, KEYS = "TAGS", "KEYS"


def _table(fn: Callable[[int, int], int]) -> np.ndarray:
    return np.array([[fn(a, b) for b in range(4)] for a in range(4)], dtype=np.int8)


def _and(lc: int, rc: int) -> int:
    if lc in (FALSE, ERROR):
        return lc
    if rc in (FALSE, ERROR):
        return rc
    return NULL if NULL in (lc, rc) else TRUE


def _or(lc: int, rc: int) -> int:
    if lc in (TRUE, ERROR):
        return lc
    if rc in (TRUE, ERROR):
        return rc
    return NULL if NULL in (lc, rc) else FALSE


AND_TABLE, OR_TABLE = _table(_and), _table(_or)
NOT_TABLE = np.array([TRUE, FALSE, NULL, ERROR], dtype=np.int8)


class Columns:
    """The filter's properties of n messages, each as (codes per row, distinct values); -1 = missing."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._encoded: dict[str, tuple[np.ndarray, list]] = {}

    def strings(self, name: str) -> pa.Array:
        """The property's value per row (a string array, null where missing)."""
        raise NotImplementedError

    def encoded(self, name: str) -> tuple[np.ndarray, list]:
        hit = self._encoded.get(name)
        if hit is None:
            enc = self.strings(name).dictionary_encode()
            indices = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            hit = self._encoded[name] = (indices, enc.dictionary.to_pylist())
        return hit

    def values(self, name: str) -> list:
        indices, dictionary = self.encoded(name)
        values = dictionary + [None]
        return [values[i] for i in indices.tolist()]


class BatchColumns(Columns):
    """The properties of a PULL_SCHEMA batch's rows."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        super().__init__(batch.num_rows)
        self.batch = batch

    def strings(self, name: str) -> pa.Array:
        batch = self.batch
        if name == TAGS:
            return batch.column("tag")
        if name == KEYS:
            keys = batch.column("keys")
            joined = pc.binary_join(keys, " ")
            return pc.if_else(pc.greater(pc.list_value_length(keys), 0), joined, pa.scalar(None, pa.string()))
        return pc.map_lookup(batch.column("properties"), pa.scalar(name, pa.string()), "first")


@dataclass(frozen=True)
class _Leaf:
    condition: Callable
    names: tuple[str, ...]


def plan(node: Node):
    """The tree the mask is computed from: logic nodes over compiled leaves."""
    if isinstance(node, (And, Or)):
        return (type(node), plan(node.left), plan(node.right))
    if isinstance(node, Not):
        return (Not, plan(node.operand))
    return _Leaf(compile_condition(node), tuple(sorted(properties_of(node))))


def codes(tree, cols: Columns) -> np.ndarray:
    """The code (FALSE, TRUE, NULL, ERROR) of every row of the batch."""
    if isinstance(tree, tuple):
        kind = tree[0]
        if kind is Not:
            return NOT_TABLE[codes(tree[1], cols)]
        table = AND_TABLE if kind is And else OR_TABLE
        return table[codes(tree[1], cols), codes(tree[2], cols)]
    leaf: _Leaf = tree
    if not leaf.names:
        return np.full(cols.n, leaf.condition(lambda name: None), dtype=np.int8)
    if len(leaf.names) == 1:
        indices, dictionary = cols.encoded(leaf.names[0])
        # One evaluation per distinct value; the extra last entry is the missing property (-1).
        per_value = np.array([leaf.condition(lambda name, v=v: v) for v in dictionary]
                             + [leaf.condition(lambda name: None)], dtype=np.int8)
        return per_value[indices]
    columns = [cols.values(name) for name in leaf.names]
    names = leaf.names
    out = np.empty(cols.n, dtype=np.int8)
    for i, row in enumerate(zip(*columns)):
        lookup = dict(zip(names, row))
        out[i] = leaf.condition(lookup.get)
    return out


def batch_mask(tree, batch: pa.RecordBatch) -> np.ndarray:
    """True for the rows the filter selects."""
    if batch.num_rows == 0:
        return np.zeros(0, dtype=bool)
    return codes(tree, BatchColumns(batch)) == TRUE
