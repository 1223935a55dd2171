"""The pnnx expression language: syntax tree, parser and printer.

pnnx fuses chains of arithmetic into one op whose `expr` param is a prefix
expression over the op's inputs (tools/pnnx/src/pass_level3/fuse_expression.cpp
writes it, pass_level5/eval_expression.cpp folds constants, ir.cpp prints it):

    expr    := call | ref | literal | list
    call    := NAME '(' expr (',' expr)* ')'
    ref     := '@' INT                           the op's INT-th input
    literal := INT | FLOAT | True | False | None   FLOAT also 1e-6, inf, nan
    list    := '[' [expr (',' expr)*] ']'        a shape ([size(@0,0),-1]), never a tensor

NAME is an elementwise function (ir/ops/expression.py's FUNCTIONS maps each to
its IR op), a cast (CASTS) or size(@k,dim) / size(@k) (a shape).
Typing and evaluation live with the IR op, in ir/ops/expression.py.

pnnx bug: functions pnnx's own evaluator does not know (log1p, expm1) come out
with scrambled parentheses; torch.log1p(x)*2 is written `mul(log1p,@0),2`. pnnx
reads expressions as a prefix token stream, ignoring parentheses, and in that
reading the string is right, so `parse_expression` falls back to it.
"""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Ref:
    index: int


@dataclass(frozen=True)
class Literal:
    value: int | float | bool | None


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class ListExpr:
    items: tuple[Expr, ...]


Expr = Ref | Literal | Call | ListExpr

_NAMED_LITERALS = {"True": True, "False": False, "None": None}

# -- parsing ---------------------------------------------------------------------------------

_TOKEN = re.compile(r"""\s*(?:
      (?P<ref>@\d+)
    | (?P<complex>[+-]?[\d.]+(?:[eE][+-]?\d+)?[+-][\d.]+(?:[eE][+-]?\d+)?j)
    | (?P<number>[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|(?:inf|nan)(?:\.0)?)(?![\w.]))
    | (?P<name>[A-Za-z_][\w.]*)
    | (?P<punct>[(),\[\]])
)""", re.VERBOSE)


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"cannot read {text[pos:pos + 20]!r}")
        if m.lastgroup == "complex":
            raise ValueError(f"complex literal {m.group('complex')} is not supported")
        tokens.append((m.lastgroup, m.group(m.lastgroup)))
        pos = m.end()
    return tokens


def _number(text: str) -> int | float:
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    return float(text[:-2] if text.endswith(("inf.0", "nan.0")) else text)  # pnnx writes nan as nan.0


def _arities(name: str) -> tuple[int, ...]:
    from ir.op_registry import get_op
    from ir.ops.expression import CASTS, FUNCTIONS  # the function tables belong to the op (a cycle at import)

    if name == "size":
        return 1, 2
    if name in CASTS:
        return (1,)
    if name in FUNCTIONS:
        return (get_op(FUNCTIONS[name]).arity()[0],)
    raise ValueError(f"unknown function {name!r}")


def _call(name: str, args: tuple[Expr, ...]) -> Call:
    arities = _arities(name)
    if len(args) not in arities:
        raise ValueError(f"{name} takes {' or '.join(map(str, arities))} argument(s), got {len(args)}")
    return Call(name, args)


MAX_DEPTH = 200  # pnnx's expressions nest a few levels; the AST's users (hashing, printing) recurse


class ExpressionTooDeepError(ValueError):
    """An expression nests more than MAX_DEPTH calls or lists: a malformed file, not an unsupported op."""


class _Parser:
    """Recursive descent over the grammar above; with `prefix`, pnnx's own reading:
    parentheses and commas ignored, each function taking its arity (size: 2) in order."""

    def __init__(self, tokens: list[tuple[str, str]], prefix: bool):
        self.tokens = [t for t in tokens if t[1] not in {"(", ")", ","}] if prefix else tokens
        self.prefix = prefix
        self.pos = 0
        self.depth = 0

    def parse(self) -> Expr:
        expr = self.expr()
        if self.pos != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.pos][1]!r} after the expression")
        return expr

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.pos == len(self.tokens):
            raise ValueError("unexpected end of expression")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def expr(self) -> Expr:
        self.depth += 1
        try:
            return self._expr()
        finally:
            self.depth -= 1

    def _expr(self) -> Expr:
        if self.depth > MAX_DEPTH:  # a hand-edited file's 5000 nested calls: an error, not Python's stack
            raise ExpressionTooDeepError(f"expression nested deeper than {MAX_DEPTH} calls or lists")
        kind, text = self.take()
        if kind == "ref":
            return Ref(int(text[1:]))
        if kind == "number":
            return Literal(_number(text))
        if text in _NAMED_LITERALS:
            return Literal(_NAMED_LITERALS[text])
        if text == "[":
            return ListExpr(self.items("]"))
        if kind != "name":
            raise ValueError(f"unexpected {text!r}")
        if self.prefix:
            return _call(text, tuple(self.expr() for _ in range(max(_arities(text)))))
        if self.peek() != "(":
            raise ValueError(f"function {text} without an argument list")
        self.take()
        return _call(text, self.items(")"))

    def items(self, close: str) -> tuple[Expr, ...]:
        items: list[Expr] = []
        while self.peek() != close:
            if items and not self.prefix and self.take()[1] != ",":
                raise ValueError(f"expected ',' or {close!r} in argument list")
            items.append(self.expr())
        self.take()
        return tuple(items)


@functools.lru_cache(maxsize=4096)
def parse_expression(text: str) -> Expr:
    """The AST of a pnnx expression string; ValueError naming the problem if it is malformed."""
    tokens = _tokenize(text)
    try:
        return _Parser(tokens, prefix=False).parse()
    except ValueError:
        if _has_bare_function(tokens):
            with contextlib.suppress(ValueError):
                return _Parser(tokens, prefix=True).parse()
        raise


def _has_bare_function(tokens: list[tuple[str, str]]) -> bool:
    """pnnx's scrambled output has a function name not followed by '('."""
    return any(kind == "name" and text not in _NAMED_LITERALS and (i + 1 == len(tokens) or tokens[i + 1][1] != "(")
               for i, (kind, text) in enumerate(tokens))


def format_literal(value: Any) -> str:
    if value is None or isinstance(value, (bool, int)):
        return str(value)
    return repr(float(value))  # '0.5', '1e-06', 'inf', 'nan': all read back exactly


def format_expression(expr: Expr) -> str:
    """The pnnx spelling of `expr` (parse_expression reads it back)."""
    if isinstance(expr, Ref):
        return f"@{expr.index}"
    if isinstance(expr, Literal):
        return format_literal(expr.value)
    if isinstance(expr, ListExpr):
        return "[" + ",".join(map(format_expression, expr.items)) + "]"
    return f"{expr.name}(" + ",".join(map(format_expression, expr.args)) + ")"


def children(expr: Expr) -> tuple[Expr, ...]:
    return expr.args if isinstance(expr, Call) else expr.items if isinstance(expr, ListExpr) else ()


def postorder(expr: Expr) -> list[Expr]:
    """Each distinct subexpression once, operands before their users, leaves left to right."""
    order, stack, seen = [], [(expr, False)], set()
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
        elif node not in seen:
            seen.add(node)
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children(node)))
    return order
