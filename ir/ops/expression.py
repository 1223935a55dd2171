"""pnnx.Expression: parse pnnx's expression strings, type them as torch would, evaluate them.

pnnx fuses chains of arithmetic into one op whose `expr` param is a prefix
expression over the op's inputs (tools/pnnx/src/pass_level3/fuse_expression.cpp
writes it, pass_level5/eval_expression.cpp folds constants, ir.cpp prints it):

    expr    := call | ref | literal | list
    call    := NAME '(' expr (',' expr)* ')'
    ref     := '@' INT                           the op's INT-th input
    literal := INT | FLOAT | True | False | None   FLOAT also 1e-6, inf, nan
    list    := '[' [expr (',' expr)*] ']'        a shape ([size(@0,0),-1]), never a tensor

NAME is an elementwise function (FUNCTIONS maps each to its IR op in
ir/ops/elementwise.py), a cast (CASTS) or size(@k,dim) / size(@k) (a shape).

Types follow torch: a literal or a size is a Python number and a 0-d input a
0-d tensor, and neither promotes a dimensioned tensor within its category
(f32 tensor * 2.5 is f32, i64 tensor * 2.5 is f32, f32 tensor * f64[] is f32).
Subtrees of literals and sizes are folded while typing: our shapes are static.

pnnx bug: functions pnnx's own evaluator does not know (log1p, expm1) come out
with scrambled parentheses; torch.log1p(x)*2 is written `mul(log1p,@0),2`. pnnx
reads expressions as a prefix token stream, ignoring parentheses, and in that
reading the string is right, so `parse_expression` falls back to it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ir.ops.common import broadcast_shapes
from ir.ops.elementwise import KINDS, SCALAR, TENSOR, ZERO_DIM, Kind, kind_dtypes, result_type
from ir.registry import STR, Trait, get_op, register
from ir.types import TensorType


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

#: Expression function -> the elementwise IR op that computes it: pnnx's names,
#: plus the torch names our lowering of comparison and logic ops writes.
FUNCTIONS: dict[str, str] = {
    **{name: name for name in KINDS}, "where": "where",
    "max": "maximum", "min": "minimum", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
}
#: pnnx's casts of scalars (aten::Int, and Tensor.to on a scalar) -> numpy dtype.
CASTS: dict[str, str] = {
    "int": "int64", "torch.long": "int64", "torch.int": "int32", "torch.bool": "bool",
    "torch.float": "float32", "torch.double": "float64", "torch.half": "float16",
}
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


class _Parser:
    """Recursive descent over the grammar above; with `prefix`, pnnx's own reading:
    parentheses and commas ignored, each function taking its arity (size: 2) in order."""

    def __init__(self, tokens: list[tuple[str, str]], prefix: bool):
        self.tokens = [t for t in tokens if t[1] not in {"(", ")", ","}] if prefix else tokens
        self.prefix = prefix
        self.pos = 0

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
    except ValueError as exc:
        if not _has_bare_function(tokens):
            raise ValueError(f"cannot parse expression {text!r}: {exc}") from None
    return _Parser(tokens, prefix=True).parse()


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


def _children(expr: Expr) -> tuple[Expr, ...]:
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
            stack.extend((child, False) for child in reversed(_children(node)))
    return order


# -- typing ----------------------------------------------------------------------------------

_DYNAMIC = object()


@dataclass(frozen=True)
class Typed:
    """What typing knows of one subexpression.

    value: the Python number, shape tuple or None it always equals, or _DYNAMIC.
    operand_dtypes: for a call, the dtype each operand is cast to before the IR op runs.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    tier: int
    value: Any = _DYNAMIC
    is_list: bool = False
    operand_dtypes: tuple[np.dtype, ...] = ()

    @property
    def static(self) -> bool:
        return self.value is not _DYNAMIC


def _static(value: Any) -> Typed:
    if isinstance(value, tuple):
        return Typed((len(value),), np.dtype(np.int64), SCALAR, value, is_list=True)
    dtype = np.bool_ if isinstance(value, bool) else np.int64 if isinstance(value, int) else np.float32
    return Typed((), np.dtype(dtype), SCALAR, value)


def _fold(ir_op: str, values: list) -> Any:
    """A call on Python numbers, computed as Python would (float64, ints exact)."""
    as_float = KINDS.get(ir_op) is Kind.FLOAT
    arrays = [np.asarray(v, dtype=np.float64 if as_float or isinstance(v, float) else None) for v in values]
    return get_op(ir_op).compute(*arrays).item()


def _type_size(call: Call, operands: list[Typed], types: Sequence[TensorType]) -> Typed:
    if not isinstance(call.args[0], Ref):
        raise ValueError("size() needs an input reference (@k) as its first argument")
    shape = types[call.args[0].index].shape
    if len(operands) == 1:
        return _static(tuple(shape))
    dim = operands[1].value
    if not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
        raise ValueError(f"size() of a rank-{len(shape)} input at dim {dim}")
    return _static(shape[dim])


def _type_call(call: Call, operands: list[Typed], types: Sequence[TensorType]) -> Typed:
    if call.name == "size":
        return _type_size(call, operands, types)
    if any(t.is_list or t.value is None for t in operands):
        raise ValueError(f"{call.name}() takes numbers or tensors, not a list or None")
    if call.name in CASTS:
        (operand,) = operands
        dtype = np.dtype(CASTS[call.name])
        value = operand.value if not operand.static else np.asarray(operand.value).astype(dtype).item()
        return Typed(operand.shape, dtype, SCALAR if call.name == "int" else operand.tier, value)
    ir_op = FUNCTIONS[call.name]
    if all(t.static for t in operands):
        return _static(_fold(ir_op, [t.value for t in operands]))
    shape = broadcast_shapes(*[t.shape for t in operands])
    tier = max(t.tier for t in operands)
    if ir_op == "where":
        dtype = result_type([(t.dtype, t.tier) for t in operands[1:]])
        return Typed(shape, dtype, tier, operand_dtypes=(np.dtype(np.bool_), dtype, dtype))
    compute, result = kind_dtypes(KINDS[ir_op], result_type([(t.dtype, t.tier) for t in operands]))
    return Typed(shape, result, tier, operand_dtypes=(compute,) * len(operands))


def _type_node(node: Expr, operands: list[Typed], types: Sequence[TensorType]) -> Typed:
    if isinstance(node, Ref):
        if not 0 <= node.index < len(types):
            raise ValueError(f"@{node.index} refers to input {node.index}, but there are {len(types)} inputs")
        t = types[node.index]
        return Typed(t.shape, np.dtype(t.dtype), TENSOR if t.rank else ZERO_DIM)
    if isinstance(node, Literal):
        return _static(node.value)
    if isinstance(node, ListExpr):
        static = all(t.static for t in operands)
        return Typed((len(operands),), np.dtype(np.int64), SCALAR,
                     tuple(t.value for t in operands) if static else _DYNAMIC, is_list=True)
    try:
        return _type_call(node, operands, types)
    except ValueError as exc:
        raise ValueError(f"{format_expression(node)}: {exc}") from None


def type_expression(expr: Expr, types: Sequence[TensorType]) -> dict[Expr, Typed]:
    """The type of every subexpression of `expr` whose inputs have `types`; ValueError if ill-typed."""
    table: dict[Expr, Typed] = {}
    for node in postorder(expr):
        table[node] = _type_node(node, [table[c] for c in _children(node)], types)
    return table


@functools.lru_cache(maxsize=4096)
def _typed(text: str, types: tuple[TensorType, ...]) -> tuple[Expr, dict[Expr, Typed]]:
    expr = parse_expression(text)
    return expr, type_expression(expr, types)


def fold_expression(expr: Expr, table: dict[Expr, Typed]) -> tuple[Expr, list[int]]:
    """`expr` with every static subtree replaced by its literal and its inputs renumbered
    @0, @1, ... in order of appearance; also the original index of each new input."""
    folded = _rebuild(expr, lambda n: Literal(table[n].value) if isinstance(table[n].value, (int, float)) else None)
    used = list(dict.fromkeys(n.index for n in postorder(folded) if isinstance(n, Ref)))
    return _rebuild(folded, lambda n: Ref(used.index(n.index)) if isinstance(n, Ref) else None), used


def _rebuild(expr: Expr, replace) -> Expr:
    """`expr` with each node for which replace(node) is not None replaced by that."""
    new: dict[Expr, Expr] = {}
    for node in postorder(expr):
        if (replaced := replace(node)) is not None:
            new[node] = replaced
        elif isinstance(node, Call):
            new[node] = Call(node.name, tuple(new[a] for a in node.args))
        else:
            new[node] = ListExpr(tuple(new[a] for a in node.items)) if isinstance(node, ListExpr) else node
    return new[expr]


# -- the IR op -------------------------------------------------------------------------------

def _expression_type(types: list[TensorType], attrs: dict) -> TensorType:
    text = attrs["expr"]
    expr, table = _typed(text, tuple(types))
    root = table[expr]
    if root.is_list:
        raise ValueError(f"expression {text!r} is a list (a shape operand), not a tensor")
    if root.value is None:
        raise ValueError(f"expression {text!r} is None, not a tensor")
    return TensorType(root.shape, root.dtype)


def evaluate_expression(text: str, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Evaluate `text` on `arrays` with numpy broadcasting and torch's dtypes."""
    expr, table = _typed(text, tuple(TensorType.of(a) for a in arrays))
    values: dict[Expr, Any] = {}
    for node in postorder(expr):
        t = table[node]
        if t.static:
            values[node] = t.value
        elif isinstance(node, Ref):
            values[node] = arrays[node.index]
        elif node.name in CASTS:
            values[node] = values[node.args[0]].astype(t.dtype)
        else:
            operands = [np.asarray(values[a], dtype=d) for a, d in zip(node.args, t.operand_dtypes, strict=True)]
            values[node] = get_op(FUNCTIONS[node.name]).compute(*operands)
    return np.asarray(values[expr], dtype=table[expr].dtype)


@register("expression", ["inputs*"], {"expr": STR()}, infer=_expression_type, traits=[Trait.ELEMENTWISE])
def expression(*inputs, expr):
    """A pnnx expression over the inputs (@0, @1, ...), result broadcast as torch would."""
    return evaluate_expression(expr, inputs)
