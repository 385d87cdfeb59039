"""The syntax tree a SQL92 filter compiles to.

Values in the tree are typed as RocketMQ types them: a property is a `str` (or None
when the message lacks it), an integer constant an `int` (Java's Integer when it
fits 32 bits, else Long: the width decides how a property string is converted),
a decimal constant a `float`, TRUE/FALSE a `bool`, NULL None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class Const:
    value: object


@dataclass(frozen=True)
class Prop:
    name: str


@dataclass(frozen=True)
class Negate:
    operand: "Node"


@dataclass(frozen=True)
class Not:
    operand: "Node"


@dataclass(frozen=True)
class And:
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Or:
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Compare:
    op: str          # "=", "<", "<=", ">", ">=" (`a <> b` is Not(Compare("=", a, b)))
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class IsNull:
    operand: "Node"


@dataclass(frozen=True)
class InList:
    prop: Prop
    values: frozenset
    negated: bool


@dataclass(frozen=True)
class TextMatch:
    kind: str        # "CONTAINS", "STARTSWITH" or "ENDSWITH"
    operand: "Node"
    search: str
    negated: bool


@dataclass(frozen=True)
class BoolCast:
    """A bare property where a condition is expected: true only if its value is a boolean,
    which a property string never is (RocketMQ's rule), so it is FALSE or, when absent, NULL."""
    prop: Prop


Node = Union[Const, Prop, Negate, Not, And, Or, Compare, IsNull, InList, TextMatch, BoolCast]

# Nodes whose value is a condition (TRUE, FALSE or NULL), as opposed to a value.
CONDITIONS = (Not, And, Or, Compare, IsNull, InList, TextMatch, BoolCast)


def is_condition(node: Node) -> bool:
    return isinstance(node, CONDITIONS) or (isinstance(node, Const) and
                                            (node.value is None or isinstance(node.value, bool)))


def properties_of(node: Node) -> frozenset[str]:
    """The property names `node` reads."""
    if isinstance(node, Prop):
        return frozenset((node.name,))
    if isinstance(node, Const):
        return frozenset()
    if isinstance(node, (And, Or, Compare)):
        return properties_of(node.left) | properties_of(node.right)
    if isinstance(node, InList):
        return frozenset((node.prop.name,))
    if isinstance(node, BoolCast):
        return frozenset((node.prop.name,))
    return properties_of(node.operand)
