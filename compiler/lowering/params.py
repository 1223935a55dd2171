"""Reading torch-convention params of pnnx ops, shared by the rule families.

pnnx passes a param computed from input sizes as an extra operand ($shape, $end,
$size, ...) in dynamic exports; under our static input shapes the expression
lowering folds it to a constant, which param_value reads like a param.
"""

from __future__ import annotations

from compiler.lowering.core import OpContext, Unsupported
from ir.graph import Value


def tensor_input(ctx: OpContext, *operand_params: str) -> Value:
    """Input 0, the tensor. pnnx passes a param computed from input sizes as an extra operand
    (`$shape`, `$end`, `$size`, ...); those named in operand_params are read by param_value."""
    unknown = [f"${n}" if n else f"operand {i}" for i, n in enumerate(ctx.op.input_names)
               if i and n not in operand_params]
    if unknown:
        raise Unsupported(f"{', '.join(unknown)} given as a tensor")
    return ctx.input(0)


def param_value(ctx: OpContext, key: str, default=...):
    """Param `key`, or the operand `$key` pnnx wrote instead. Under our static input shapes
    the expression lowering folds such a size computation to a constant, which we read."""
    operand = ctx.input_named(key)
    if operand is None:
        value = ctx.param(key, default)
        if isinstance(value, str) and "%" in value:
            raise Unsupported(f"{key}={value} depends on runtime sizes")
        return value
    if not operand.is_constant:
        raise Unsupported(f"${key} depends on tensor values, not only on shapes")
    data = operand.data
    return data.item() if data.ndim == 0 else tuple(data.tolist())


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_tuple(ctx: OpContext, key: str, default=...) -> tuple[int, ...] | None:
    """An int-or-list param as a tuple (None stays None)."""
    value = param_value(ctx, key, default)
    items = value if isinstance(value, tuple) or value is None else (value,)
    if items is not None and not all(map(_is_int, items)):
        raise ctx.format_error(f"param {key}={value!r} is not an int or a list of ints")
    return items


def int_param(ctx: OpContext, key: str, default=...) -> int:
    value = param_value(ctx, key, default)
    if not _is_int(value):
        raise ctx.format_error(f"param {key}={value!r} is not an int")
    return value


def axis_of(ctx: OpContext, dim: int, rank: int) -> int:
    """torch's dim (negative counts from the end) as an axis in range(rank)."""
    if not -rank <= dim < max(rank, 1):
        raise ctx.format_error(f"dim {dim} is out of range for a rank-{rank} input")
    return dim % max(rank, 1)


def reshaped(ctx: OpContext, value: Value, shape: tuple[int, ...], suffix: str) -> Value:
    """value viewed as `shape`: a new constant for a constant (so passes still see constant
    weights), else a reshape node; value itself when it has that shape already."""
    shape = tuple(shape)
    if value.shape == shape:
        return value
    if value.is_constant:
        return ctx.const(suffix, value.data.reshape(shape))
    return ctx.intermediate("reshape", [value], {"shape": shape}, name=suffix)
