"""A recursive-descent parser for RocketMQ's SQL92 filter grammar.

Precedence, loosest first: OR; AND; `=`, `<>`, IS [NOT] NULL; `>`, `>=`, `<`, `<=`,
[NOT] BETWEEN, [NOT] IN, [NOT] CONTAINS/STARTSWITH/ENDSWITH; unary `+`, `-`, NOT;
literals, properties and parentheses. The checks RocketMQ makes while building its
tree are made here too, so a bad filter is refused when it is registered rather than
silently matching nothing: only numbers are ordered, NULL is not compared with `=`,
BETWEEN's bounds are in order, IN applies to a property, and the whole expression
is a condition.
"""

from __future__ import annotations

from txmq.broker.store.sql92.ast import (And, BoolCast, Compare, Const, InList, Negate, Node, Not, Or, Prop,
                                         IsNull, TextMatch, is_condition)
from txmq.broker.store.sql92.lexer import Token, syntax_error, tokenize

INT64_MAX = (1 << 63) - 1
MAX_EXPRESSION_CHARS = 64 * 1024
MAX_DEPTH = 200  # nested parentheses / NOTs: deeper expressions are refused, not a RecursionError
# Conditions joined by AND / OR in one expression: a chain nests as deep as it is long, and the
# compiled filter recurses through it on every message.
MAX_LOGIC_OPERATORS = 256


def parse(expression: str) -> Node:
    """The tree of `expression`; raises IllegalFilterExpression naming the position of the problem."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise syntax_error(expression[:80], 0, f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    return _Parser(expression).parse()


class _Parser:
    def __init__(self, expression: str) -> None:
        self.text = expression
        self.tokens = tokenize(expression)
        self.i = 0
        self.depth = 0
        self.logic_operators = 0

    # --- token helpers ---------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def _peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def _is(self, kind: str, text: str | None = None, tok: Token | None = None) -> bool:
        t = tok or self.tok
        return t.kind == kind and (text is None or t.text == text)

    def _take(self) -> Token:
        t = self.tok
        self.i += 1
        return t

    def _expect(self, kind: str, text: str | None = None, what: str | None = None) -> Token:
        if not self._is(kind, text):
            self._fail(f"expected {what or text or kind}")
        return self._take()

    def _fail(self, problem: str, tok: Token | None = None):
        t = tok or self.tok
        if t.kind == "end":
            found = "the end of the expression"
        else:
            nxt = self.tokens[self.tokens.index(t) + 1] if t is not self.tokens[-1] else t
            found = repr(self.text[t.pos:max(nxt.pos, t.pos + 1)].strip()[:30])
        raise syntax_error(self.text, t.pos, f"{problem}, found {found}")

    def _error(self, problem: str, tok: Token):
        raise syntax_error(self.text, tok.pos, problem)

    # --- grammar ---------------------------------------------------------------------

    def parse(self) -> Node:
        if self._is("end"):
            self._fail("expected a condition")
        start = self.tok
        node = self._or()
        if not self._is("end"):
            self._fail("expected AND, OR or the end of the expression")
        return self._condition(node, start)

    def _condition(self, node: Node, tok: Token) -> Node:
        if isinstance(node, Prop):
            return BoolCast(node)
        if not is_condition(node):
            self._error("this is a value, not a condition (compare it with something)", tok)
        return node

    def _or(self) -> Node:
        start = self.tok
        left = self._and()
        while self._is("keyword", "OR"):
            self._count_logic_operator()
            right_tok = self.tok
            right = self._and()
            left = Or(self._condition(left, start), self._condition(right, right_tok))
        return left

    def _and(self) -> Node:
        start = self.tok
        left = self._equality()
        while self._is("keyword", "AND"):
            self._count_logic_operator()
            right_tok = self.tok
            right = self._equality()
            left = And(self._condition(left, start), self._condition(right, right_tok))
        return left

    def _equality(self) -> Node:
        start = self.tok
        left = self._comparison()
        while True:
            if self._is("op", "=") or self._is("op", "<>"):
                op = self._take()
                right_tok = self.tok
                right = self._comparison()
                self._check_equal_operand(left, start)
                self._check_equal_operand(right, right_tok)
                if (isinstance(left, Const) and isinstance(right, Const) and is_condition(left)
                        and not is_condition(right)):
                    self._error("a boolean cannot be compared with a value of another type", right_tok)
                eq = Compare("=", left, right)
                left = eq if op.text == "=" else Not(eq)
            elif self._is("keyword", "IS"):
                self._take()
                negated = self._is("keyword", "NOT")
                if negated:
                    self._take()
                self._expect("keyword", "NULL", "NULL")
                left = Not(IsNull(left)) if negated else IsNull(left)
            else:
                return left

    def _comparison(self) -> Node:
        start = self.tok
        left = self._unary()
        while True:
            t = self.tok
            if t.kind == "op" and t.text in ("<", "<=", ">", ">="):
                self._take()
                right_tok = self.tok
                right = self._unary()
                self._check_ordered_operand(left, start)
                self._check_ordered_operand(right, right_tok)
                left = Compare(t.text, left, right)
                continue
            negated = False
            if self._is("keyword", "NOT") and self._peek().kind == "keyword" and self._peek().text in (
                    "BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH"):
                self._take()
                negated = True
            t = self.tok
            if self._is("keyword", "BETWEEN"):
                self._take()
                low_tok = self.tok
                low = self._unary()
                self._expect("keyword", "AND", "AND between the bounds of BETWEEN")
                high_tok = self.tok
                high = self._unary()
                for node, tok in ((left, start), (low, low_tok), (high, high_tok)):
                    self._check_ordered_operand(node, tok)
                if isinstance(low, Const) and isinstance(high, Const) and high.value < low.value:
                    self._error(f"BETWEEN's bounds are out of order ({low.value} is greater than {high.value})",
                                low_tok)
                left = (Or(Compare("<", left, low), Compare(">", left, high)) if negated
                        else And(Compare(">=", left, low), Compare("<=", left, high)))
            elif self._is("keyword", "IN"):
                self._take()
                if not isinstance(left, Prop):
                    self._error("IN applies to a property name", start)
                self._expect("op", "(", "'(' after IN")
                values = [self._expect("string", what="a quoted string").text]
                while self._is("op", ","):
                    self._take()
                    values.append(self._expect("string", what="a quoted string").text)
                self._expect("op", ")", "')' or ','")
                left = InList(left, frozenset(values), negated)
            elif t.kind == "keyword" and t.text in ("CONTAINS", "STARTSWITH", "ENDSWITH"):
                self._take()
                search = self._expect("string", what="a quoted string").text
                left = TextMatch(t.text, left, search, negated)
            elif negated:
                self._fail("expected BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT")
            else:
                return left

    def _unary(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self._error(f"expression is nested more than {MAX_DEPTH} levels deep", self.tok)
        try:
            if self._is("op", "+"):
                self._take()
                return self._unary()
            if self._is("op", "-"):
                self._take()
                operand = self._unary()
                # A negated number is folded into a constant so that it types like one.
                if isinstance(operand, Const) and type(operand.value) in (int, float):
                    return Const(-operand.value)
                return Negate(operand)
            if self._is("keyword", "NOT"):
                self._take()
                tok = self.tok
                return Not(self._condition(self._unary(), tok))
            return self._primary()
        finally:
            self.depth -= 1

    def _primary(self) -> Node:
        t = self.tok
        if t.kind == "string":
            self._take()
            return Const(t.text)
        if t.kind == "int":
            self._take()
            digits = t.text.rstrip("lL")
            value = int(digits)
            if value > INT64_MAX:
                self._error(f"integer {digits} is out of range (a 64-bit integer)", t)
            return Const(value)
        if t.kind == "float":
            self._take()
            value = float(t.text)
            if value == float("inf"):
                self._error(f"number {t.text} is out of range (a 64-bit float)", t)
            return Const(value)
        if t.kind == "keyword" and t.text in ("TRUE", "FALSE", "NULL"):
            self._take()
            return Const({"TRUE": True, "FALSE": False, "NULL": None}[t.text])
        if t.kind == "ident":
            self._take()
            return Prop(t.text)
        if self._is("op", "("):
            self._take()
            self.depth += 1
            if self.depth > MAX_DEPTH:
                self._error(f"expression is nested more than {MAX_DEPTH} levels deep", t)
            try:
                node = self._or()
            finally:
                self.depth -= 1
            self._expect("op", ")", "')'")
            return node
        self._fail("expected a property name, a literal, NOT or '('")

    def _count_logic_operator(self) -> None:
        self.logic_operators += 1
        if self.logic_operators > MAX_LOGIC_OPERATORS:
            self._error(f"expression joins more than {MAX_LOGIC_OPERATORS + 1} conditions with AND / OR", self.tok)
        self._take()

    # --- RocketMQ's operand checks ---------------------------------------------------

    def _check_ordered_operand(self, node: Node, tok: Token) -> None:
        if isinstance(node, Const):
            if type(node.value) in (int, float):
                return
            self._error(f"{_show(node.value)} cannot be ordered: <, <=, >, >= and BETWEEN compare numbers", tok)
        if is_condition(node):
            self._error("a condition cannot be ordered: <, <=, >, >= and BETWEEN compare numbers", tok)

    def _check_equal_operand(self, node: Node, tok: Token) -> None:
        if isinstance(node, Const) and node.value is None:
            self._error("NULL cannot be compared with = or <> (use IS NULL / IS NOT NULL)", tok)


def _show(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)
