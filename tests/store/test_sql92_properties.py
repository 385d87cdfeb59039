"""Properties of the SQL92 filter that must hold for every expression (hypothesis).

- the batch evaluation (a mask over a pull batch) selects exactly the messages the
  per-message evaluation selects, whatever the expression and the properties;
- parsing is stable: an expression printed back from its tree parses to the same tree;
- the per-message evaluation agrees with an independent reading of RocketMQ's rules
  on single comparisons between a property and a number.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from txmq.broker.errors import IllegalFilterExpression
from txmq.broker.protocol.native_arrow import STRING_MAP
from txmq.broker.store.sql92 import SqlFilter, parse
from txmq.broker.store.sql92.ast import (And, BoolCast, Compare, Const, InList, IsNull, Negate, Not, Or, Prop,
                                         TextMatch)

NAMES = ["a", "b", "TAGS"]
VALUES = ["1", "2", "10", "-3", "2.5", "abc", "true", "TRUE", "", " 7", "1e3", "NaN", "3000000000", "x'y", "0",
          "-0.0", "Infinity", "+5", "007", "12345678901", "-2.50"]

prop = st.sampled_from(NAMES)
int_lit = st.sampled_from(["0", "1", "2", "7", "10", "3000000000", "-3", "9223372036854775807"])
float_lit = st.sampled_from(["2.5", "0.0", "1e3", ".5", "-1.5E1", "3."])
str_lit = st.sampled_from(VALUES).map(lambda v: "'" + v.replace("'", "''") + "'")
number = st.one_of(int_lit, float_lit)
value = st.one_of(prop, number, str_lit, st.sampled_from(["TRUE", "FALSE"]))


def leaf():
    return st.one_of(
        st.tuples(st.one_of(prop, number), st.sampled_from([">", ">=", "<", "<="]), st.one_of(prop, number))
        .map(" ".join),
        st.tuples(value, st.sampled_from(["=", "<>"]), value).map(" ".join),
        st.tuples(prop, st.sampled_from(["BETWEEN", "NOT BETWEEN"]), number, number)
        .map(lambda t: f"{t[0]} {t[1]} {t[2]} AND {t[3]}"),
        st.tuples(prop, st.sampled_from(["IN", "NOT IN"]), st.lists(str_lit, min_size=1, max_size=3))
        .map(lambda t: f"{t[0]} {t[1]} ({', '.join(t[2])})"),
        st.tuples(prop, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join),
        st.tuples(prop, st.sampled_from(["CONTAINS", "NOT STARTSWITH", "ENDSWITH"]), str_lit).map(" ".join),
        st.sampled_from(["TRUE", "FALSE"]),
        prop,
    )


conditions = st.recursive(
    leaf(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
        inner.map(lambda c: f"NOT ({c})"),
    ),
    max_leaves=6,
)

messages = st.lists(st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES)), min_size=1, max_size=12)


def compiled(expression: str) -> SqlFilter:
    try:
        return SqlFilter.compile(expression)
    except IllegalFilterExpression:
        assume(False)


def pull_like_batch(rows: list[dict[str, str]]) -> pa.RecordBatch:
    """The columns a filter reads, laid out as in PULL_SCHEMA."""
    tags = [r.get("TAGS") for r in rows]
    props = [[(k, v) for k, v in r.items() if k != "TAGS"] for r in rows]
    keys = [[] for _ in rows]
    return pa.RecordBatch.from_arrays(
        [pa.array(tags, pa.string()), pa.array(keys, pa.list_(pa.string())), pa.array(props, STRING_MAP)],
        names=["tag", "keys", "properties"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(conditions, messages)
def test_the_batch_mask_selects_what_the_per_message_evaluation_selects(expression, rows):
    f = compiled(expression)
    assert f.mask(pull_like_batch(rows)).tolist() == [f.accepts_properties(r) for r in rows]


def render(node) -> str:
    """An expression text for a tree (fully parenthesised)."""
    if isinstance(node, Const):
        v = node.value
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        return repr(v) if isinstance(v, float) else str(v)
    if isinstance(node, Prop):
        return node.name
    if isinstance(node, BoolCast):
        return node.prop.name
    if isinstance(node, Negate):
        return f"-({render(node.operand)})"
    if isinstance(node, Not):
        return f"NOT ({render(node.operand)})"
    if isinstance(node, (And, Or)):
        return f"({render(node.left)}) {'AND' if isinstance(node, And) else 'OR'} ({render(node.right)})"
    if isinstance(node, Compare):
        return f"({render(node.left)}) {node.op} ({render(node.right)})"
    if isinstance(node, IsNull):
        return f"({render(node.operand)}) IS NULL"
    if isinstance(node, InList):
        items = ", ".join(render(Const(v)) for v in sorted(node.values))
        return f"{node.prop.name} {'NOT ' if node.negated else ''}IN ({items})"
    if isinstance(node, TextMatch):
        return f"({render(node.operand)}) {'NOT ' if node.negated else ''}{node.kind} {render(Const(node.search))}"
    raise TypeError(node)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(conditions)
def test_an_expression_printed_from_its_tree_parses_to_the_same_tree(expression):
    tree = compiled(expression).tree
    assert parse(render(tree)) == tree


def rocketmq_greater_than(prop_value: str, constant: int) -> bool:
    """`prop > constant` for an integer constant, read straight from RocketMQ's rules: the string
    converts with Integer.valueOf (Long.valueOf past 32 bits) or the message is dropped."""
    bits = 31 if -(1 << 31) <= constant < (1 << 31) else 63
    text = prop_value
    if not text or not (text.lstrip("+-").isdigit() and text.lstrip("+-").isascii()) or text[1:].count("+") \
            or text[1:].count("-") or len(text) - len(text.lstrip("+-")) > 1:
        return False
    number = int(text)
    if not -(1 << bits) <= number < (1 << bits):
        return False
    return number > constant


@given(st.one_of(st.integers(-(1 << 40), 1 << 40).map(str), st.text(alphabet="0123456789+-. e", max_size=8)),
       st.integers(-(1 << 40), 1 << 40))
def test_greater_than_an_integer_follows_rocketmqs_conversion(prop_value, constant):
    expression = f"a > {constant}" if constant >= 0 else f"a > -{-constant}"
    assert SqlFilter.compile(expression).accepts_properties({"a": prop_value}) == \
        rocketmq_greater_than(prop_value, constant)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.tuples(st.one_of(prop, str_lit), st.sampled_from(["=", "<>"]), st.one_of(prop, str_lit)).map(" ".join),
       st.sampled_from(["", "NOT "]), messages)
def test_string_tests_on_whole_columns_agree_with_the_per_message_evaluation(comparison, negation, rows):
    f = compiled(f"{negation}({comparison})")
    assert f.mask(pull_like_batch(rows)).tolist() == [f.accepts_properties(r) for r in rows]


numeric_text = st.one_of(
    st.integers(-(1 << 40), 1 << 40).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    st.from_regex(r"\A[+-]?[0-9]{0,12}(\.[0-9]{0,4})?\Z"),
)
numeric_constant = st.one_of(st.integers(-(1 << 40), 1 << 40).map(str),
                             st.floats(-1e6, 1e6, allow_nan=False).map(lambda x: repr(abs(x)) if x >= 0 else
                                                                        f"-{abs(x)!r}"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), numeric_constant, st.booleans(),
       st.lists(st.one_of(st.none(), numeric_text), min_size=1, max_size=30))
def test_numeric_comparisons_on_whole_columns_agree_with_the_per_message_evaluation(op, constant, flipped,
                                                                                   values):
    f = compiled(f"{constant} {op} a" if flipped else f"a {op} {constant}")
    rows = [{} if v is None else {"a": v} for v in values]
    assert f.mask(pull_like_batch(rows)).tolist() == [f.accepts_properties(r) for r in rows]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(conditions, st.data())
def test_a_stray_character_is_reported_at_its_position(expression, data):
    compiled(expression)
    # A place beside a space, outside string literals: between tokens, so no token is cut in two
    # (a cut ".5" would be refused at its ".") and the character is not text inside a string.
    places = [i for i in range(len(expression) + 1) if expression[:i].count("'") % 2 == 0
              and (i in (0, len(expression)) or " " in expression[i - 1:i + 1])]
    at = data.draw(st.sampled_from(places))
    with pytest.raises(IllegalFilterExpression) as info:
        SqlFilter.compile(expression[:at] + "~" + expression[at:])
    assert info.value.position == at
