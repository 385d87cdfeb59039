"""The SQL92 filter language: what an expression selects, as RocketMQ defines it.

Each test states one rule of the language on a message's properties (strings, as
RocketMQ stores them). `selects(expr, **props)` evaluates the compiled filter on
one message.
"""

from __future__ import annotations

import pytest

from txmq.broker.errors import IllegalFilterExpression
from txmq.broker.store.sql92 import SqlFilter


def selects(expression: str, **props: str) -> bool:
    return SqlFilter.compile(expression).accepts_properties(props)


# --- comparisons --------------------------------------------------------------------


def test_a_numeric_comparison_converts_the_property_string_to_a_number():
    assert selects("a > 5", a="10")
    assert not selects("a > 5", a="1")


def test_rocketmqs_documented_example_selects_a_10_and_b_abc():
    assert selects("a > 5 AND b = 'abc'", a="10", b="abc")
    assert not selects("a > 5 AND b = 'abc'", a="1", b="abc")


@pytest.mark.parametrize("op, expected", [(">", False), (">=", True), ("<", False), ("<=", True), ("=", True),
                                          ("<>", False)])
def test_every_comparison_operator_on_an_equal_number(op, expected):
    assert selects(f"a {op} 7", a="7") is expected


def test_an_integer_constant_reads_the_property_as_an_integer_so_a_decimal_string_does_not_match():
    assert not selects("a > 3", a="3.5")
    assert not selects("NOT (a > 3)", a="3.5")


def test_a_decimal_constant_reads_the_property_as_a_double():
    assert selects("a > 3.0", a="3.5")
    assert selects("a = 5.0", a="5")


def test_an_integer_constant_of_32_bits_does_not_read_a_property_beyond_32_bits():
    assert not selects("a > 5", a="3000000000")
    assert selects("a > 5000000000", a="6000000000")


def test_a_property_that_is_not_a_number_matches_no_numeric_comparison():
    assert not selects("a > 5", a="abc")
    assert not selects("a <> 5", a="abc")


def test_a_constant_on_the_left_compares_like_one_on_the_right():
    assert selects("5 < a", a="10")
    assert not selects("5 < a", a="2")


def test_two_properties_are_ordered_as_doubles():
    assert selects("a > b", a="10", b="9.5")
    assert not selects("a > b", a="10", b="x")


def test_string_equality_is_exact():
    assert selects("b = 'abc'", b="abc")
    assert not selects("b = 'abc'", b="ABC")
    assert not selects("b = 'abc'", b="abc ")


def test_two_quotes_in_a_string_literal_are_one_quote():
    assert selects("b = 'it''s'", b="it's")


def test_a_boolean_constant_compares_with_a_property_read_as_true_in_any_case():
    assert selects("c = TRUE", c="True")
    assert selects("c = FALSE", c="yes")
    assert not selects("c = TRUE", c="1")


def test_unequal_is_the_negation_of_equal():
    assert selects("b <> 'x'", b="y")
    assert not selects("b <> 'x'", b="x")


# --- missing properties (NULL) ------------------------------------------------------


def test_a_missing_property_matches_no_comparison_nor_its_negation():
    for expr in ("a > 5", "NOT (a > 5)", "a = 'x'", "a <> 'x'", "a BETWEEN 1 AND 2", "a IN ('x')",
                 "a NOT IN ('x')"):
        assert not selects(expr), expr


def test_is_null_selects_a_missing_property():
    assert selects("a IS NULL")
    assert not selects("a IS NULL", a="")


def test_is_not_null_selects_a_present_property_even_if_empty():
    assert selects("a IS NOT NULL", a="")
    assert not selects("a IS NOT NULL")


def test_or_with_one_side_true_is_true_even_if_the_other_is_unknown():
    assert selects("a > 5 OR b = 'x'", b="x")


def test_and_with_one_side_false_is_false_even_if_the_other_is_unknown():
    assert selects("NOT (a > 5 AND b = 'x')", b="y")


def test_a_missing_property_on_the_right_of_equals_is_false_not_unknown():
    assert selects("NOT ('x' = a)")
    assert not selects("NOT (a = 'x')")


def test_two_missing_properties_are_equal():
    assert selects("a = b")


# --- BETWEEN, IN, text matching -----------------------------------------------------


def test_between_includes_both_bounds():
    assert [selects("a BETWEEN 2 AND 4", a=v) for v in "12345"] == [False, True, True, True, False]


def test_not_between_selects_outside_the_bounds():
    assert [selects("a NOT BETWEEN 2 AND 4", a=v) for v in "12345"] == [True, False, False, False, True]


def test_in_selects_a_listed_string():
    assert selects("b IN ('x', 'y')", b="y")
    assert not selects("b IN ('x', 'y')", b="z")


def test_not_in_selects_an_unlisted_string():
    assert selects("b NOT IN ('x', 'y')", b="z")
    assert not selects("b NOT IN ('x', 'y')", b="x")


def test_contains_startswith_and_endswith_match_substrings():
    assert selects("b CONTAINS 'ell'", b="hello")
    assert selects("b STARTSWITH 'he'", b="hello")
    assert selects("b ENDSWITH 'lo'", b="hello")
    assert selects("b NOT CONTAINS 'z'", b="hello")


def test_not_contains_is_false_for_a_missing_property():
    assert not selects("b NOT CONTAINS 'z'")


# --- logic, constants, names --------------------------------------------------------


def test_and_binds_tighter_than_or():
    assert selects("a = 1 OR a = 2 AND b = 'x'", a="1", b="y")
    assert not selects("(a = 1 OR a = 2) AND b = 'x'", a="1", b="y")


def test_true_and_false_are_constant_conditions():
    assert selects("TRUE")
    assert not selects("FALSE")
    assert selects("NOT FALSE")


def test_keywords_are_case_insensitive_and_property_names_are_not():
    assert selects("a between 1 and 3 and B is null", a="2")
    assert not selects("A = '2'", a="2")


def test_a_bare_property_is_never_true():
    assert not selects("c", c="true")


def test_tags_names_the_message_tag_and_keys_its_keys():
    assert selects("TAGS = 'paid'", TAGS="paid")
    assert selects("KEYS CONTAINS 'k2'", KEYS="k1 k2")


def test_negative_numbers_and_exponents_are_numbers():
    assert selects("a < -1.5e1", a="-20")
    assert selects("a = -3", a="-3")
    assert selects("a = 7L", a="7")


def test_comments_are_ignored():
    assert selects("a = 1 -- the one\n AND /* always */ TRUE", a="1")


# --- refusals name the position -----------------------------------------------------


@pytest.mark.parametrize("expression, position, words", [
    ("a >", 4, "expected a property name"),
    ("a = 'x", 5, "unterminated string"),
    ("a > 5 AND", 10, "found the end"),
    ("a IN (1)", 7, "quoted string"),
    ("a > 'x'", 5, "cannot be ordered"),
    ("a = NULL", 5, "IS NULL"),
    ("a BETWEEN 5 AND 2", 11, "out of order"),
    ("5", 1, "not a condition"),
    ("a = 1 ~ 2", 7, "unexpected character"),
    ("(a > 1", 7, "expected ')'"),
    ("a > 1)", 6, "expected AND, OR"),
    ("TRUE = 5", 8, "boolean"),
    ("1 IN ('a')", 1, "IN applies to a property"),
    ("a > 99999999999999999999", 5, "out of range"),
])
def test_a_bad_expression_is_refused_naming_the_position(expression, position, words):
    with pytest.raises(IllegalFilterExpression) as info:
        SqlFilter.compile(expression)
    message = str(info.value)
    assert f"at position {position}" in message and words in message
    assert info.value.position == position - 1


def test_a_problem_on_a_later_line_is_named_by_line_and_column():
    with pytest.raises(IllegalFilterExpression, match="line 2, column 3"):
        SqlFilter.compile("a > 1 AND\n  AND")


def test_an_empty_expression_is_refused():
    with pytest.raises(IllegalFilterExpression):
        SqlFilter.compile("  ")


def test_a_very_long_chain_of_conditions_is_refused_not_a_crash():
    with pytest.raises(IllegalFilterExpression, match="more than 257 conditions"):
        SqlFilter.compile(" AND ".join(["a = 1"] * 3000))


def test_deep_nesting_is_refused_not_a_crash():
    with pytest.raises(IllegalFilterExpression, match="nested"):
        SqlFilter.compile("(" * 500 + "TRUE" + ")" * 500)
