"""Spark's pushed filters as a SQL92 filter the broker applies (batch reads, `pushFilters=true`).

Spark (4.1+) offers a Python source the conjuncts of a query's WHERE clause it can
express as `pyspark.sql.datasource` filters. Spark builds those on top-level columns
only: predicates on `tag` arrive (=, <=>, IN, IS [NOT] NULL, LIKE 'x%' / '%x' /
'%x%', NOT of these), while a lookup in `properties` or `array_contains(keys, ...)`
arrives as nothing more than IS NOT NULL of the whole column (always true here: the
source never returns a null map or list). A filter is taken only where the broker's
answer equals Spark's, NULL tags included; the rest stay with Spark.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    In,
    IsNotNull,
    IsNull,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

NEVER_NULL = {("keys",), ("properties",)}
_TEXT = {StringStartsWith: "STARTSWITH", StringEndsWith: "ENDSWITH", StringContains: "CONTAINS"}


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def to_sql(f: Filter) -> str | None:
    """The SQL92 condition selecting exactly the rows `f` keeps; "" for a filter that keeps every row;
    None when `f` stays with Spark."""
    attribute = getattr(f, "attribute", None)
    if isinstance(f, IsNotNull) and attribute in NEVER_NULL:
        return ""
    if isinstance(f, Not):
        child = f.child
        inner = to_sql(child) if isinstance(child, (EqualTo, In, IsNull, IsNotNull)) else None
        if type(child) in _TEXT and child.attribute == ("tag",) and isinstance(child.value, str) and child.value:
            # NOT STARTSWITH is FALSE for a missing tag, as Spark's NOT is for a NULL one.
            return f"TAGS NOT {_TEXT[type(child)]} {quote(child.value)}"
        return None if not inner else f"NOT ({inner})"
    if attribute != ("tag",):
        return None
    if isinstance(f, IsNull):
        return "TAGS IS NULL"
    if isinstance(f, IsNotNull):
        return "TAGS IS NOT NULL"
    if isinstance(f, EqualTo) and isinstance(f.value, str):
        return f"TAGS = {quote(f.value)}"
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return "TAGS IS NULL"
        return f"TAGS = {quote(f.value)}" if isinstance(f.value, str) else None
    if isinstance(f, In) and f.value and all(isinstance(v, str) for v in f.value):
        return "TAGS IN (" + ", ".join(quote(v) for v in f.value) + ")"
    if type(f) in _TEXT and isinstance(f.value, str) and f.value:
        return f"TAGS {_TEXT[type(f)]} {quote(f.value)}"
    return None


def push(filters: Iterable[Filter], taken: list[str]) -> Iterator[Filter]:
    """pushFilters' body: append the conditions taken to `taken`; yield the filters left to Spark."""
    for f in filters:
        condition = to_sql(f)
        if condition is None:
            yield f
        elif condition:
            taken.append(condition)


def combine(user_filter: str | None, pushed: list[str]) -> str | None:
    """One SQL92 expression: the option 'filter' AND every pushed condition (a newline ends a
    trailing `--` comment of the user's filter before the parenthesis closes)."""
    parts = ([f"({user_filter}\n)"] if user_filter else []) + [f"({c})" for c in pushed]
    return " AND ".join(parts) if parts else None
