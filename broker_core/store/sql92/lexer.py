"""Tokens of RocketMQ's SQL92 filter language.

The token rules are RocketMQ's (its filter module's grammar): keywords and
identifiers are case-insensitive words, identifiers start with a letter, `_` or
`$`; integers have no leading zero and may end in `L`; floats need a `.` or an
exponent; strings are single-quoted with `''` for a quote; `--` line comments and
`/* */` block comments are skipped. Every token keeps its offset so that an error
can name the position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from txmq.broker.errors import IllegalFilterExpression

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
                      "CONTAINS", "STARTSWITH", "ENDSWITH"})

# One alternation tried at each position; the order settles overlaps (a float before an integer,
# two-character operators before one-character ones).
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\n\r\f]+)
  | (?P<line_comment>--[^\n\r]*(?:\r\n|\n|\r|$))
  | (?P<block_comment>/\*.*?\*/)
  | (?P<float>(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+))
  | (?P<int>(?:0|[1-9][0-9]*)[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|<=|>=|[=<>(),+-])
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class Token:
    kind: str      # "int", "float", "string", "ident", "keyword", "op" or "end"
    text: str      # the source text (a keyword upper-cased, a string's value unquoted)
    pos: int       # offset of the token's first character in the expression


def syntax_error(expression: str, pos: int, problem: str) -> IllegalFilterExpression:
    """An error naming the 1-based line and column of `pos` and showing the place."""
    line = expression.count("\n", 0, pos) + 1
    line_start = expression.rfind("\n", 0, pos) + 1
    line_end = expression.find("\n", pos)
    text = expression[line_start:line_end if line_end >= 0 else len(expression)]
    column = pos - line_start + 1
    where = f"position {pos + 1}" if line == 1 else f"line {line}, column {column}"
    return IllegalFilterExpression(f"SQL92 filter: {problem} at {where}:\n  {text}\n  {' ' * (column - 1)}^",
                                   position=pos)


def tokenize(expression: str) -> list[Token]:
    tokens: list[Token] = []
    pos, n = 0, len(expression)
    while pos < n:
        m = _TOKEN.match(expression, pos)
        if m is None:
            ch = expression[pos]
            if ch == "'":
                raise syntax_error(expression, pos, "unterminated string literal")
            if expression.startswith("/*", pos):
                raise syntax_error(expression, pos, "unterminated comment")
            raise syntax_error(expression, pos, f"unexpected character {ch!r}")
        kind, text = m.lastgroup, m.group()
        if kind == "word":
            upper = text.upper()
            if upper in KEYWORDS:
                tokens.append(Token("keyword", upper, pos))
            else:
                tokens.append(Token("ident", text, pos))
        elif kind == "string":
            tokens.append(Token("string", text[1:-1].replace("''", "'"), pos))
        elif kind in ("int", "float", "op"):
            tokens.append(Token(kind, text, pos))
        pos = m.end()
    tokens.append(Token("end", "", n))
    return tokens
