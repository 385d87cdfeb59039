"""RocketMQ's type rules and the per-message evaluation of a compiled SQL92 filter.

A condition evaluates to one of four codes: FALSE, TRUE, NULL (unknown: a property
is missing) or ERROR (a property string could not be converted to the type of what
it is compared with). RocketMQ raises on a failed conversion and drops the message,
so ERROR travels up like its exception would: AND and OR look at their left side
first and stop there when it settles the answer (FALSE for AND, TRUE for OR);
otherwise an ERROR on either side is the result. Only TRUE selects a message.

Type rules (RocketMQ's comparison with string conversion on):
- a property is a string; a number constant is an Integer when it fits 32 bits,
  else a Long; a decimal constant a Double; TRUE/FALSE booleans;
- comparing a string with a number converts the string to that number's type
  (Integer.valueOf, Long.valueOf, Double.valueOf: `'3.5' > 3` is an ERROR, `'3.5' > 3.0` TRUE);
- comparing a string with a boolean reads the string as `true` (any case) or false;
- `<`, `<=`, `>`, `>=` between two strings (two properties) compare them as Doubles;
- `=` between two strings is string equality; two missing properties are equal;
- `=` between values of types that do not convert (a boolean and a number) is FALSE.
Deliberate differences from RocketMQ, for a rule users can state: `NaN` does not
convert (RocketMQ orders it above every number), and a boolean on the left of `=`
converts a string on the right as it does on the other side (RocketMQ fails there).
"""

from __future__ import annotations

import math
import re
from typing import Callable

from txmq.broker.store.sql92.ast import (And, BoolCast, Compare, Const, InList, IsNull, Negate, Node, Not, Or,
                                         Prop, TextMatch)

FALSE, TRUE, NULL, ERROR = 0, 1, 2, 3
Getter = Callable[[str], "str | None"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
# Java's Double.valueOf without hexadecimal floats and NaN; surrounding control characters and
# spaces are ignored as Java's trim() does.
_DOUBLE = re.compile(r"[\x00-\x20]*([+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?))"
                     r"[fFdD]?[\x00-\x20]*\Z")


class ConversionError(Exception):
    """A property string does not read as the type it is compared with."""


def to_integer(text: str, lo: int, hi: int) -> int:
    if _INTEGER.match(text):
        value = int(text)
        if lo <= value <= hi:
            return value
    raise ConversionError(text)


def to_double(text: str) -> float:
    m = _DOUBLE.match(text)
    if m is None:
        raise ConversionError(text)
    return float(m.group(1).replace("Infinity", "inf"))


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int32" if INT32_MIN <= value <= INT32_MAX else "int64"
    if isinstance(value, float):
        return "float"
    return "str"


def _convert_string(text: str, kind: str) -> object:
    if kind == "bool":
        return text.lower() == "true"
    if kind == "int32":
        return to_integer(text, INT32_MIN, INT32_MAX)
    if kind == "int64":
        return to_integer(text, INT64_MIN, INT64_MAX)
    return to_double(text)


def _cmp(a, b) -> int:
    if a == b:
        if isinstance(a, float) and a == 0.0:  # Double.compareTo orders -0.0 below 0.0
            return (math.copysign(1, a) > math.copysign(1, b)) - (math.copysign(1, a) < math.copysign(1, b))
        return 0
    return -1 if a < b else 1


def compare_values(lv, rv) -> int:
    """Java's compareTo after RocketMQ's conversions: negative, 0 or positive."""
    lk, rk = _kind(lv), _kind(rv)
    if lk == rk or (lk in ("int32", "int64") and rk in ("int32", "int64")):
        return _cmp(lv, rv)
    if lk == "str":
        return _cmp(_convert_string(lv, rk), rv)
    if rk == "str":
        return _cmp(lv, _convert_string(rv, lk))
    if lk == "bool" or rk == "bool":
        return -1  # RocketMQ answers -1 for types it cannot bring together
    return _cmp(float(lv), float(rv))  # a number and a float: both as Doubles


# --- compilation to closures ---------------------------------------------------------


def compile_condition(node: Node) -> Callable[[Getter], int]:
    """A function from a property getter to the condition's code (FALSE, TRUE, NULL, ERROR)."""
    if isinstance(node, And):
        left, right = compile_condition(node.left), compile_condition(node.right)

        def and_(get):
            lc = left(get)
            if lc == FALSE or lc == ERROR:
                return lc
            rc = right(get)
            if rc == FALSE or rc == ERROR:
                return rc
            return NULL if NULL in (lc, rc) else TRUE
        return and_
    if isinstance(node, Or):
        left, right = compile_condition(node.left), compile_condition(node.right)

        def or_(get):
            lc = left(get)
            if lc == TRUE or lc == ERROR:
                return lc
            rc = right(get)
            if rc == TRUE or rc == ERROR:
                return rc
            return NULL if NULL in (lc, rc) else FALSE
        return or_
    if isinstance(node, Not):
        inner = compile_condition(node.operand)
        flip = (TRUE, FALSE, NULL, ERROR)
        return lambda get: flip[inner(get)]
    if isinstance(node, Const):
        code = NULL if node.value is None else (TRUE if node.value else FALSE)
        return lambda get: code
    if isinstance(node, BoolCast):
        name = node.prop.name
        return lambda get: NULL if get(name) is None else FALSE
    if isinstance(node, InList):
        name, values, negated = node.prop.name, node.values, node.negated

        def in_(get):
            v = get(name)
            if v is None:
                return NULL
            return TRUE if (v in values) != negated else FALSE
        return in_
    return _guarded(_compile_boolean_value(node))


def _guarded(fn: Callable[[Getter], object]) -> Callable[[Getter], int]:
    def code(get):
        try:
            v = fn(get)
        except ConversionError:
            return ERROR
        return NULL if v is None else (TRUE if v else FALSE)
    return code


def _compile_boolean_value(node: Node) -> Callable[[Getter], "bool | None"]:
    """Conditions whose operands are values (Compare, IsNull, TextMatch)."""
    if isinstance(node, IsNull):
        operand = compile_value(node.operand)
        return lambda get: operand(get) is None
    if isinstance(node, TextMatch):
        operand = compile_value(node.operand)
        search, negated = node.search, node.negated
        test = {"CONTAINS": str.__contains__, "STARTSWITH": str.startswith, "ENDSWITH": str.endswith}[node.kind]

        def text_match(get):
            if not search:
                return False
            v = operand(get)
            if not isinstance(v, str):
                return False  # missing or not a string: FALSE, also under NOT (RocketMQ's rule)
            return test(v, search) != negated
        return text_match
    if isinstance(node, Compare):
        left, right, op = compile_value(node.left), compile_value(node.right), node.op
        if op == "=":
            def equal(get):
                lv, rv = left(get), right(get)
                if lv is None or rv is None:
                    return None if lv is None and rv is not None else lv is None
                if type(lv) is type(rv) and lv == rv:
                    return True
                return compare_values(lv, rv) == 0
            return equal
        test = {"<": lambda c: c < 0, "<=": lambda c: c <= 0, ">": lambda c: c > 0, ">=": lambda c: c >= 0}[op]

        def ordered(get):
            lv = left(get)
            if lv is None:
                return None
            rv = right(get)
            if rv is None:
                return None
            if isinstance(lv, str) and isinstance(rv, str):
                return test(_cmp(to_double(lv), to_double(rv)))
            return test(compare_values(lv, rv))
        return ordered
    raise TypeError(f"not a condition: {node!r}")


def compile_value(node: Node) -> Callable[[Getter], object]:
    """A function from a property getter to the node's value (raises ConversionError)."""
    if isinstance(node, Const):
        value = node.value
        return lambda get: value
    if isinstance(node, Prop):
        name = node.name
        return lambda get: get(name)
    if isinstance(node, Negate):
        operand = compile_value(node.operand)

        def negate(get):
            v = operand(get)
            return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        return negate
    condition = compile_condition(node)

    def as_value(get):
        code = condition(get)
        if code == ERROR:
            raise ConversionError("condition")
        return None if code == NULL else code == TRUE
    return as_value
