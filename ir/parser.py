"""Parse IR text written by `ir.printer.print_graph` back into a Graph.

Large constants are referenced by name only; their arrays come from `weights`.
Errors are IRParseError naming the line.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from ir.errors import IRParseError
from ir.graph import Graph, Node, Value
from ir.op_registry import get_op
from ir.types import DTYPES, TensorType

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<ref>[%@](?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_.+]+))
    | (?P<num>-?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|inf\b|nan\b))
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<punct>[()\[\]{},:=])
    )""",
    re.VERBOSE,
)


class TokenLine:
    """A cursor over the tokens of one line of IR text (also used for fused programs)."""

    def __init__(self, text: str, lineno: int):
        self.lineno = lineno
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            if text[pos:].lstrip().startswith("#"):  # a comment ends the line (print_graph's notes)
                break
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise IRParseError(f"line {lineno}: cannot read {text[pos:].strip()[:30]!r}")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def error(self, what: str) -> IRParseError:
        got = self.tokens[self.i][1] if self.i < len(self.tokens) else "end of line"
        return IRParseError(f"line {self.lineno}: expected {what}, got {got!r}")

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self, kind: str | None = None, text: str | None = None) -> str:
        if self.i >= len(self.tokens):
            raise self.error(text or kind or "a token")
        k, t = self.tokens[self.i]
        if (kind and k != kind) or (text and t != text):
            raise self.error(repr(text) if text else kind)
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        if self.peek() == text and self.tokens[self.i][0] != "str":
            self.i += 1
            return True
        return False

    def done(self) -> None:
        if self.i != len(self.tokens):
            raise self.error("end of line")

    def name(self, sigil: str) -> str:
        tok = self.take("ref")
        if tok[0] != sigil:
            raise IRParseError(f"line {self.lineno}: expected a {sigil}name, got {tok!r}")
        body = tok[1:]
        return json.loads(body) if body.startswith('"') else body

    def type(self) -> TensorType:
        short = self.take("ident")
        if short not in DTYPES:
            raise IRParseError(f"line {self.lineno}: unknown dtype {short!r}")
        self.take(text="[")
        dims = []
        while not self.accept("]"):
            dims.append(int(self.take("num")))
            if self.peek() != "]":
                self.take(text=",")
        return TensorType(tuple(dims), DTYPES[short])

    def scalar(self) -> Any:
        kind, tok = self.tokens[self.i] if self.i < len(self.tokens) else (None, None)
        if kind == "num":
            self.i += 1
            return float(tok) if any(c in tok for c in ".eEin") else int(tok)
        if kind == "str":
            self.i += 1
            return json.loads(tok)
        if kind == "ident" and tok in ("true", "false", "none"):
            self.i += 1
            return {"true": True, "false": False, "none": None}[tok]
        raise self.error("a value")

    def attr_value(self) -> Any:
        if self.accept("["):
            items = []
            while not self.accept("]"):
                items.append(self.scalar())
                if self.peek() != "]":
                    self.take(text=",")
            return tuple(items)
        return self.scalar()


def parse_graph(text: str, weights: dict[str, np.ndarray] | None = None, zero_weights: bool = False) -> Graph:
    """Parse IR text; `weights` supplies the data of constants not printed inline (zero_weights: zeros for
    those it does not have, for a graph whose code matters, not its values: compiler/warmup.py)."""
    weights = weights or {}
    lines = [(i + 1, s) for i, s in enumerate(text.splitlines()) if s.strip() and not s.strip().startswith("#")]
    if not lines:
        raise IRParseError("empty IR text")
    values: dict[str, Value] = {}

    def define(v: Value, line: TokenLine) -> Value:
        if v.name in values:
            raise IRParseError(f"line {line.lineno}: value %{v.name} is defined twice")
        values[v.name] = v
        return v

    def use(name: str, line: TokenLine) -> Value:
        if name not in values:
            raise IRParseError(f"line {line.lineno}: value %{name} is used before it is defined")
        return values[name]

    head = TokenLine(lines[0][1], lines[0][0])
    head.take("ident", "graph")
    graph_name = head.take("str") if head.peek() and head.peek().startswith('"') else head.take("ident")
    graph_name = json.loads(graph_name) if graph_name.startswith('"') else graph_name
    head.take(text="(")
    inputs = []
    while not head.accept(")"):
        name = head.name("%")
        head.take(text=":")
        inputs.append(define(Value(name, head.type()), head))
        if head.peek() != ")":
            head.take(text=",")
    head.take(text="{")
    head.done()

    constants: list[Value] = []
    nodes: list[Node] = []
    outputs: list[Value] | None = None
    for lineno, body in lines[1:]:
        line = TokenLine(body, lineno)
        first = line.peek()
        if outputs is not None:
            if first != "}":
                raise IRParseError(f"line {lineno}: nothing may follow 'return' but '}}'")
            line.take(text="}")
            line.done()
            return Graph(graph_name, inputs, outputs, nodes, constants)
        if first == "const":
            constants.append(define(_parse_constant(line, weights, zero_weights), line))
        elif first == "return":
            line.take("ident", "return")
            outputs = [use(line.name("%"), line)]
            while line.accept(","):
                outputs.append(use(line.name("%"), line))
            line.done()
        else:
            nodes.append(_parse_node(line, use, define))
    raise IRParseError("IR text ends without 'return' and '}'")


def _parse_constant(line: TokenLine, weights: dict[str, np.ndarray], zero_weights: bool) -> Value:
    line.take("ident", "const")
    name = line.name("%")
    line.take(text=":")
    type_ = line.type()
    if line.accept("="):
        data = np.array(line.attr_value(), dtype=type_.dtype).reshape(type_.shape)
    elif name in weights:
        data = weights[name]
    elif zero_weights:
        data = np.zeros(type_.shape, type_.dtype)
    else:
        raise IRParseError(f"line {line.lineno}: no data for constant %{name} (not inline, not in weights)")
    line.done()
    if tuple(data.shape) != type_.shape or data.dtype.name != type_.dtype:
        raise IRParseError(
            f"line {line.lineno}: constant %{name} is declared {type_} but its data is "
            f"{TensorType.of(data)}"
        )
    return Value(name, type_, data)


def _parse_node(line: TokenLine, use, define) -> Node:
    outs = []
    while True:
        name = line.name("%")
        line.take(text=":")
        outs.append(Value(name, line.type()))
        if not line.accept(","):
            break
    line.take(text="=")
    op = line.take("ident")
    try:
        get_op(op)
    except KeyError:
        raise IRParseError(f"line {line.lineno}: unknown op {op!r}") from None
    line.take(text="(")
    ins = []
    while not line.accept(")"):
        ins.append(use(line.name("%"), line))
        if line.peek() != ")":
            line.take(text=",")
    attrs = {}
    if line.accept("{"):
        while not line.accept("}"):
            key = line.take("ident")
            line.take(text="=")
            attrs[key] = line.attr_value()
            if line.peek() != "}":
                line.take(text=",")
    node_name = line.name("@")
    line.done()
    try:
        node = Node(op, node_name, ins, outs, attrs)
    except ValueError as exc:
        raise IRParseError(f"line {line.lineno}: {exc}") from None
    for v in outs:
        define(v, line)
    return node
