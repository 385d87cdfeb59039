"""A compiled SQL92 filter evaluated over a whole pull batch at once.

The pull path decodes a queue range into one Arrow batch (store/pull_decode.py);
this module turns the filter into a boolean mask over that batch without a
Python step per message:

- each property the filter reads is looked up in the batch's `properties` map
  column (`TAGS` is the `tag` column, `KEYS` the `keys` list joined by spaces, as
  RocketMQ stores them);
- tests on strings (`=` a string, IN, IS NULL, CONTAINS/STARTSWITH/ENDSWITH) run
  as Arrow kernels over the whole column;
- any other condition on one property is evaluated once per *distinct value* of
  the dictionary-encoded column, its codes spread to the rows with one numpy take:
  a comparison with a number converts the distinct values that are plain numbers
  with one Arrow cast, and everything else goes through the per-message code
  (evaluate.py), so property values that repeat (regions, amounts, flags) cost
  their number of distinct values, not of messages;
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

from txmq.broker.store.sql92.ast import (And, BoolCast, Compare, Const, InList, IsNull, Node, Not, Or, Prop,
                                         TextMatch, properties_of)
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

    def encoded(self, name: str) -> tuple[np.ndarray, pa.Array]:
        """Per row, the index of its value among the distinct values (-1: missing), and those values."""
        hit = self._encoded.get(name)
        if hit is None:
            enc = self.strings(name).dictionary_encode()
            indices = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            hit = self._encoded[name] = (indices, enc.dictionary)
        return hit

    def values(self, name: str) -> list:
        indices, dictionary = self.encoded(name)
        values = dictionary.to_pylist() + [None]
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
    text_test: Callable[[pa.Array], np.ndarray] | None = None  # codes from the strings, for string tests
    numeric_test: Callable | None = None  # codes of the rows holding plain numbers, and which rows


def _codes_of(present: pa.Array, hit: pa.Array, *, missing: int) -> np.ndarray:
    """TRUE where `hit`, FALSE elsewhere, `missing` where the property is absent."""
    out = np.where(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), TRUE, FALSE).astype(np.int8)
    out[~present.to_numpy(zero_copy_only=False)] = missing
    return out


def _text_test(node: Node) -> Callable[[pa.Array], np.ndarray] | None:
    """Arrow kernels for the tests on one property that compare strings only, whose answer needs
    no conversion (equality with a string, IN, IS NULL, CONTAINS and the like, a bare property):
    they run on the whole column whatever the number of distinct values."""
    if isinstance(node, Compare) and node.op == "=":
        prop, const = (node.left, node.right) if isinstance(node.left, Prop) else (node.right, node.left)
        if isinstance(prop, Prop) and isinstance(const, Const) and isinstance(const.value, str):
            value = pa.scalar(const.value, pa.string())
            # RocketMQ's `=` is NULL for a missing left side but FALSE for a missing right side.
            missing = NULL if prop is node.left else FALSE
            return lambda s: _codes_of(pc.is_valid(s), pc.equal(s, value), missing=missing)
    if isinstance(node, InList):
        values = pa.array(sorted(node.values), pa.string())
        negated = node.negated
        return lambda s: _codes_of(pc.is_valid(s), pc.invert(pc.is_in(s, value_set=values)) if negated
                                   else pc.is_in(s, value_set=values), missing=NULL)
    if isinstance(node, IsNull) and isinstance(node.operand, Prop):
        return lambda s: _codes_of(pc.is_valid(s), pc.is_null(s), missing=TRUE)
    if isinstance(node, TextMatch) and isinstance(node.operand, Prop) and node.search:
        kernel = {"CONTAINS": pc.match_substring, "STARTSWITH": pc.starts_with, "ENDSWITH": pc.ends_with}[node.kind]
        search, negated = node.search, node.negated
        # A missing property is FALSE, under NOT too (RocketMQ's rule for these tests).
        return lambda s: _codes_of(pc.is_valid(s), pc.invert(kernel(s, pattern=search)) if negated
                                   else kernel(s, pattern=search), missing=FALSE)
    if isinstance(node, BoolCast):
        return lambda s: np.where(pc.is_valid(s).to_numpy(zero_copy_only=False), FALSE, NULL).astype(np.int8)
    return None


# Property strings the vectorised numeric comparison converts itself, per the constant's type: short
# enough that the conversion cannot overflow, and (decimals) without the forms whose reading differs
# between Java and Arrow. Any other string takes the per-value path, which knows every rule.
_PLAIN_NUMBER = {"int32": r"^-?[0-9]{1,9}$", "int64": r"^-?[0-9]{1,18}$",
                 "float": r"^-?[0-9]{1,15}(\.[0-9]{1,15})?$"}
_ORDER = {"=": np.equal, "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}
_MIRROR = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _numeric_test(node: Node) -> Callable[[pa.Array], tuple[np.ndarray, np.ndarray]] | None:
    """For `prop <op> number` (either side): over an array of the property's values, the codes of
    those that are plain numbers, and which values those are; the caller evaluates the others."""
    if not isinstance(node, Compare):
        return None
    left, right, op = node.left, node.right, node.op
    if isinstance(right, Prop) and isinstance(left, Const):
        left, right, op = right, left, _MIRROR[op]
    if not (isinstance(left, Prop) and isinstance(right, Const) and type(right.value) in (int, float)):
        return None
    constant = right.value
    kind = "float" if isinstance(constant, float) else (
        "int32" if -(1 << 31) <= constant < (1 << 31) else "int64")
    pattern, compare = _PLAIN_NUMBER[kind], _ORDER[op]
    to = pa.float64() if kind == "float" else pa.int64()
    # `=` with the property on its right side is FALSE, not NULL, for a missing property.
    missing = FALSE if op == "=" and node.right is left else NULL

    def test(s: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        present = pc.is_valid(s).to_numpy(zero_copy_only=False)
        plain = pc.fill_null(pc.match_substring_regex(s, pattern), False)
        numbers = pc.cast(pc.if_else(plain, s, pa.scalar("0", pa.string())), to).to_numpy(zero_copy_only=False)
        plain = plain.to_numpy(zero_copy_only=False)
        if kind == "float":
            plain &= numbers != 0  # -0.0 orders below 0.0 in Java: zeros take the per-value path
        out = np.where(compare(numbers, constant), TRUE, FALSE).astype(np.int8)
        out[~present] = missing
        return out, plain | ~present
    return test


def plan(node: Node):
    """The tree the mask is computed from: logic nodes over compiled leaves."""
    if isinstance(node, (And, Or)):
        return (type(node), plan(node.left), plan(node.right))
    if isinstance(node, Not):
        return (Not, plan(node.operand))
    return _Leaf(compile_condition(node), tuple(sorted(properties_of(node))), _text_test(node), _numeric_test(node))


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
    if leaf.text_test is not None:
        # A string test costs less over the rows than hashing them into distinct values first.
        return leaf.text_test(cols.strings(leaf.names[0]))
    if len(leaf.names) == 1:
        # Other conditions on one property are evaluated once per distinct value (by a kernel over
        # the distinct values where there is one), then spread to the rows; the extra last entry
        # is the missing property (index -1).
        indices, dictionary = cols.encoded(leaf.names[0])
        missing = leaf.condition(lambda name: None)
        if leaf.numeric_test is not None:
            per_value, done = leaf.numeric_test(dictionary)
            if not done.all():
                rest = np.flatnonzero(~done)
                per_value[rest] = _per_value(leaf, dictionary.take(pa.array(rest)).to_pylist())
        else:
            per_value = _per_value(leaf, dictionary.to_pylist())
        return np.append(per_value, np.int8(missing))[indices]
    columns = [cols.values(name) for name in leaf.names]
    names = leaf.names
    out = np.empty(cols.n, dtype=np.int8)
    for i, row in enumerate(zip(*columns)):
        lookup = dict(zip(names, row))
        out[i] = leaf.condition(lookup.get)
    return out


def _per_value(leaf: _Leaf, values: list) -> np.ndarray:
    """The per-message evaluation of the leaf for each of `values` (of its one property)."""
    return np.array([leaf.condition(lambda name, v=v: v) for v in values], dtype=np.int8)


def batch_mask(tree, batch: pa.RecordBatch) -> np.ndarray:
    """True for the rows the filter selects."""
    if batch.num_rows == 0:
        return np.zeros(0, dtype=bool)
    return codes(tree, BatchColumns(batch)) == TRUE
