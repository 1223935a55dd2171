"""The `expression` IR op: a pnnx.Expression, typed as torch would type it and evaluated with numpy.

Types follow torch: a literal or a size is a Python number and a 0-d input a
0-d tensor, and neither promotes a dimensioned tensor within its category
(f32 tensor * 2.5 is f32, i64 tensor * 2.5 is f32, f32 tensor * f64[] is f32).
Subtrees of literals and sizes are folded while typing: our shapes are static.
The syntax (parser, printer, tree) is in ir/expr.py.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ir.expr import (
    Call,
    Expr,
    ListExpr,
    Literal,
    Ref,
    children,
    format_expression,
    parse_expression,
    postorder,
)
from ir.op_registry import STR, Trait, get_op, register
from ir.ops.common import broadcast_shapes
from ir.ops.elementwise import KINDS, SCALAR, TENSOR, ZERO_DIM, Kind, kind_dtypes, result_type
from ir.types import TensorType

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
        table[node] = _type_node(node, [table[c] for c in children(node)], types)
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
    try:
        expr, table = _typed(text, tuple(types))
    except ValueError as exc:
        raise ValueError(f"expression {text!r}: {exc}") from None
    root = table[expr]
    if root.is_list or root.value is None:
        raise ValueError(f"expression {text!r} is {'a list (a shape)' if root.is_list else 'None'}, not a tensor")
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
