"""Lowering of pnnx.Expression, and of the elementwise ops pnnx leaves as ops.

A pnnx.Expression becomes one `expression` node (literal-only and size()
subtrees folded, inputs renumbered), a constant when nothing in it depends on a
tensor (pnnx's 0-input `expr=1.000000e-6`, or a shape list such as
`[size(@0,0),-1]`, static under our static shapes), or an alias when it is just
an input. Comparisons, where, masked_fill, logical and bitwise ops and the
aten::* math ops pnnx does not convert are written as expressions too, so that
torch's scalar typing lives in one place (ir/ops/expression.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.lowering.core import OpContext, Unsupported, lowers
from ir.expr import ExpressionTooDeepError, Ref, format_expression, format_literal, parse_expression
from ir.graph import Value
from ir.op_registry import get_op
from ir.ops.expression import fold_expression, type_expression

# 0-d constants of these dtypes are exactly what a literal would be, so they are inlined.
_LITERAL_DTYPES = {"float32", "int64", "bool"}


class Operands:
    """Spells the operands of an expression being built: numbers and small constants
    inline as literals, tensors as @0, @1, ... (collected in `values`)."""

    def __init__(self) -> None:
        self.values: list[Value] = []

    def __call__(self, operand: Value | int | float | bool) -> str:
        if not isinstance(operand, Value):
            return format_literal(operand)
        data = operand.data
        if data is not None and data.ndim == 0 and operand.dtype in _LITERAL_DTYPES:
            return format_literal(data.item())
        if operand not in self.values:
            self.values.append(operand)
        return f"@{self.values.index(operand)}"


def lower_expression(ctx: OpContext, text: str, inputs: Sequence[Value]) -> None:
    """Bind the op's output to expression `text` over `inputs` (an expression node, a constant or an input)."""
    shown = text if len(text) <= 120 else text[:120] + "..."
    try:
        expr = parse_expression(text)
        table = type_expression(expr, [v.type for v in inputs])
    except ExpressionTooDeepError as exc:
        raise ctx.format_error(f"expression {shown!r}: {exc}") from None
    except ValueError as exc:
        raise Unsupported(f"expression {shown!r}: {exc}") from None
    root, out = table[expr], ctx.op.outputs[0]
    if root.static:
        if root.value is None:
            raise Unsupported(f"expression {text!r} is None, not a tensor")
        ctx.alias(out, ctx.const("value", np.asarray(root.value, dtype=root.dtype)))
        return
    if root.is_list:  # an index list of Tensor.index / index_put: bound to its items
        ctx.alias(out, [_list_item(ctx, item, table, inputs, k) for k, item in enumerate(expr.items)])
        return
    folded, used = fold_expression(expr, table)
    if isinstance(folded, Ref):
        ctx.alias(out, inputs[used[0]])
    else:
        ctx.emit("expression", [inputs[i] for i in used], {"expr": format_expression(folded)})


def _list_item(ctx: OpContext, item, table, inputs: Sequence[Value], k: int) -> Value | np.ndarray | None:
    """One item of a list expression: None, a constant array (bool lists stay bool), an input, or
    an expression node of its own."""
    typed = table[item]
    if typed.static:
        return None if typed.value is None else np.asarray(typed.value)
    if typed.is_list:
        raise Unsupported(f"nested list {format_expression(item)!r} in an index list")
    folded, used = fold_expression(item, table)
    if isinstance(folded, Ref):
        return inputs[used[0]]
    return ctx.intermediate("expression", [inputs[i] for i in used], {"expr": format_expression(folded)},
                            name=f"item{k}")


@lowers("pnnx.Expression")
def pnnx_expression(ctx: OpContext) -> None:
    lower_expression(ctx, ctx.param("expr"), ctx.inputs)  # pnnx_format keeps expr verbatim


def operand(ctx: OpContext, name: str, position: int) -> Value | int | float | bool:
    """The operand `name` of a torch op: its `$name` input, its `name=` param (a scalar), or,
    for aten::* ops (no $ names), the input at `position`."""
    value = ctx.input_named(name)
    if value is not None:
        return value
    if name in ctx.op.params:
        scalar = ctx.op.params[name]
        if not isinstance(scalar, (bool, int, float)):
            raise Unsupported(f"{name}={scalar!r} is not a number")
        return scalar
    if not any(ctx.op.input_names) and position < len(ctx.op.inputs):
        return ctx.input(position)
    raise ctx.format_error(f"missing operand {name}")


def _call_rule(function: str, names: Sequence[str]):
    """A rule writing `function(<names[0]>, <names[1]>, ...)` as an expression."""

    def rule(ctx: OpContext) -> None:
        spell = Operands()
        args = [spell(operand(ctx, name, i)) for i, name in enumerate(names)]
        lower_expression(ctx, f"{function}({','.join(args)})", spell.values)

    rule.__name__ = f"lower_{function}"
    return rule


_TORCH_BINARY = {
    "torch.eq": "eq", "torch.ne": "ne", "torch.lt": "lt", "torch.le": "le", "torch.gt": "gt", "torch.ge": "ge",
    "torch.logical_and": "logical_and", "torch.logical_or": "logical_or", "torch.logical_xor": "logical_xor",
    "torch.bitwise_and": "and", "torch.bitwise_or": "or", "torch.bitwise_xor": "xor",
    "torch.bitwise_left_shift": "lshift", "torch.bitwise_right_shift": "rshift",
}
_TORCH_UNARY = {"torch.logical_not": "logical_not", "torch.bitwise_not": "bitwise_not", "torch.lgamma": "lgamma"}
# Ops pnnx leaves as raw aten::* (positional inputs; scalars come from 0-input expressions).
_ATEN = {
    "aten::log2": "log2", "aten::exp2": "exp2", "aten::frac": "frac", "aten::erfc": "erfc", "aten::sgn": "sign",
    "aten::isnan": "isnan", "aten::signbit": "signbit", "aten::hypot": "hypot", "aten::copysign": "copysign",
    "aten::fmax": "fmax", "aten::fmin": "fmin", "aten::clamp_min": "maximum", "aten::clamp_max": "minimum",
}

for _type, _fn in _TORCH_BINARY.items():
    lowers(_type)(_call_rule(_fn, ("input", "other")))
for _type, _fn in _TORCH_UNARY.items():
    lowers(_type)(_call_rule(_fn, ("input",)))
for _type, _fn in _ATEN.items():
    lowers(_type)(_call_rule(_fn, ("input", "other")[:get_op(_fn).arity()[0]]))
lowers("torch.where")(_call_rule("where", ("condition", "input", "other")))


@lowers("Tensor.masked_fill")
def masked_fill(ctx: OpContext) -> None:
    """where(mask, value, input); the result keeps the input's dtype, so a number is
    converted to it first (an int tensor filled with 1.7 gets 1, as in torch)."""
    x, value = ctx.input_named("input"), operand(ctx, "value", 2)
    if not isinstance(value, Value):
        value = np.asarray(value).astype(x.dtype).item()
    elif value.dtype != x.dtype:
        raise Unsupported(f"masked_fill of a {x.dtype} tensor with a {value.dtype} value tensor")
    spell = Operands()
    text = f"where({spell(ctx.input_named('mask'))},{spell(value)},{spell(x)})"
    lower_expression(ctx, text, spell.values)


@lowers("aten::lerp")
def lerp(ctx: OpContext) -> None:
    """start + weight (end - start), computed from the nearer end as torch does."""
    spell = Operands()
    a, b, w = (spell(ctx.input(i)) for i in range(3))
    text = (f"where(lt({w},0.5),add({a},mul({w},sub({b},{a}))),"
            f"sub({b},mul(sub({b},{a}),sub(1,{w}))))")
    lower_expression(ctx, text, spell.values)


#: torch dtype spellings in Tensor.to / Tensor.type params -> numpy dtype.
TORCH_DTYPES = {
    "torch.float": "float32", "torch.float32": "float32", "torch.double": "float64", "torch.float64": "float64",
    "torch.half": "float16", "torch.float16": "float16", "torch.long": "int64", "torch.int64": "int64",
    "torch.int": "int32", "torch.int32": "int32", "torch.short": "int16", "torch.int16": "int16",
    "torch.int8": "int8", "torch.uint8": "uint8", "torch.bool": "bool",
}


@lowers("Tensor.type_as")
def type_as(ctx: OpContext) -> None:
    """input converted to other's dtype."""
    x, other = ctx.input_named("input"), ctx.input_named("other")
    if x is None or other is None:
        raise ctx.format_error("needs $input and $other")
    if x.dtype == other.dtype:
        ctx.alias(ctx.op.outputs[0], x)
    else:
        ctx.emit("cast", [x], {"dtype": other.dtype})


@lowers("Tensor.to", "Tensor.type")
def to_dtype(ctx: OpContext) -> None:
    """A dtype conversion (pnnx drops conversions that change nothing)."""
    spelled = ctx.param("dtype", None)
    if spelled not in TORCH_DTYPES:
        raise Unsupported(f"dtype={spelled}")
    x = ctx.input(0)
    if x.dtype == TORCH_DTYPES[spelled]:
        ctx.alias(ctx.op.outputs[0], x)
    else:
        ctx.emit("cast", [x], {"dtype": TORCH_DTYPES[spelled]})
