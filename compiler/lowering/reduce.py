"""Lowering of reductions: torch.sum/mean/prod/amax/amin, torch.max/min, torch.argmax/argmin,
torch.logsumexp, torch.std/var, torch.norm; scans (torch.cumsum/cumprod) and torch.topk.

pnnx spells `dim` as a tuple for sum/mean/amax/amin/logsumexp/std/var/norm (`dim=(1)`) and
as an int for max/min/argmax/prod/cumsum/topk (`dim=1`); a full reduction has no params at
all. torch.max(x, dim) has two outputs (values, indices) when the indices are used and one
otherwise. logsumexp, std, var and norm are composed of reductions and elementwise ops,
which have kernels; the scans and topk are ops of their own.
"""

from __future__ import annotations

import math

import numpy as np

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.expression import TORCH_DTYPES
from compiler.lowering.params import axis_of, int_param, int_tuple, tensor_input
from ir.graph import Value
from ir.ops.reduce import reduce_axes, reduced_shape
from ir.types import DTYPES

_AXES_REDUCTIONS = {
    "torch.sum": "reduce_sum",
    "torch.mean": "reduce_mean",
    "torch.prod": "reduce_prod",
    "torch.amax": "reduce_max",
    "torch.amin": "reduce_min",
}
_VALUE_INDEX_REDUCTIONS = {"torch.max": ("reduce_max", "argmax"), "torch.min": ("reduce_min", "argmin")}


def reduce_attrs(ctx: OpContext, rank: int) -> dict:
    """dims (None for every dim: no dim param, or pnnx's empty `dim=()`) and keepdim."""
    if ctx.param("dtype", None) is not None:
        raise Unsupported(f"dtype={ctx.param('dtype')}")
    dims = int_tuple(ctx, "dim", None)
    dims = None if dims is None else tuple(axis_of(ctx, d, rank) for d in dims)
    return {"dims": dims, "keepdim": bool(ctx.param("keepdim", False))}


def _axes_reduction(ctx: OpContext) -> None:
    x = tensor_input(ctx)
    ctx.emit(_AXES_REDUCTIONS[ctx.op.type], [x], reduce_attrs(ctx, x.type.rank))


for _type in _AXES_REDUCTIONS:
    lowers(_type)(_axes_reduction)


@lowers(*_VALUE_INDEX_REDUCTIONS)
def value_index_reduction(ctx: OpContext) -> None:
    """torch.max(x) is a full reduction; torch.max(x, dim) gives values and, when pnnx kept
    a second output, int64 indices."""
    x = tensor_input(ctx)
    value_op, index_op = _VALUE_INDEX_REDUCTIONS[ctx.op.type]
    attrs = reduce_attrs(ctx, x.type.rank)
    if len(ctx.op.outputs) == 1:
        ctx.emit(value_op, [x], attrs)
        return
    if attrs["dims"] is None or len(attrs["dims"]) != 1:
        raise ctx.format_error("two outputs (values, indices) need exactly one dim")
    values, indices = ctx.op.outputs
    ctx.emit(value_op, [x], attrs, outputs=[values])
    ctx.emit(index_op, [x], {"dim": attrs["dims"][0], "keepdim": attrs["keepdim"]}, outputs=[indices])


@lowers("torch.argmax", "torch.argmin")
def arg_reduction(ctx: OpContext) -> None:
    """dim None means the index into the flattened tensor."""
    x = tensor_input(ctx)
    attrs = reduce_attrs(ctx, x.type.rank)
    dims = attrs["dims"]
    if dims is not None and len(dims) != 1:
        raise ctx.format_error(f"{ctx.op.type} takes one dim, got {ctx.param('dim')}")
    ir_op = "argmax" if ctx.op.type == "torch.argmax" else "argmin"
    ctx.emit(ir_op, [x], {"dim": None if dims is None else dims[0], "keepdim": attrs["keepdim"]})


# -- helpers for composed reductions ----------------------------------------------------------


def scalar(ctx: OpContext, name: str, value: float, dtype: str) -> Value:
    """A 0-d constant of `dtype` (the tensor operand's, so that the elementwise op keeps it)."""
    return ctx.const(name, np.array(value, dtype=dtype))


def _as_float(ctx: OpContext, x: Value) -> Value:
    """Integers and bools as float32, torch's default dtype, for ops that only take floats."""
    if np.issubdtype(np.dtype(x.dtype), np.floating):
        return x
    return ctx.intermediate("cast", [x], {"dtype": "float32"}, "as_float")


def vector_norm(ctx: OpContext, x: Value, p: float, dims: tuple[int, ...] | None, keepdim: bool) -> Value:
    """torch.linalg.vector_norm: max |x| for p = inf, min |x| for -inf, the count of nonzeros
    for 0, sum |x| for 1, sqrt(sum x^2) for 2, else (sum |x|^p)^(1/p)."""
    reduce = {"dims": dims, "keepdim": keepdim}
    if p == 2:
        squares = ctx.intermediate("square", [x])
        return ctx.intermediate("sqrt", [ctx.intermediate("reduce_sum", [squares], reduce)])
    if p == 0:
        nonzero = ctx.intermediate("ne", [x, scalar(ctx, "zero", 0, x.dtype)], name="nonzero")
        counted = ctx.intermediate("cast", [nonzero], {"dtype": x.dtype}, "nonzero_as_float")
        return ctx.intermediate("reduce_sum", [counted], reduce)
    magnitude = ctx.intermediate("abs", [x])
    if math.isinf(p):
        return ctx.intermediate("reduce_max" if p > 0 else "reduce_min", [magnitude], reduce)
    if p == 1:
        return ctx.intermediate("reduce_sum", [magnitude], reduce)
    powers = ctx.intermediate("pow", [magnitude, scalar(ctx, "p", p, x.dtype)], name="powers")
    total = ctx.intermediate("reduce_sum", [powers], reduce)
    return ctx.intermediate("pow", [total, scalar(ctx, "inverse_p", 1 / p, x.dtype)], name="root")


def _norm_order(ctx: OpContext) -> float:
    """p as a number: pnnx writes 'fro' as 2 already; 'nuc' (a matrix norm) is not a vector norm."""
    p = ctx.param("p", 2)
    if p == "fro":
        return 2.0
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise Unsupported(f"p={p!r}")
    return float(p)


# -- logsumexp, std, var, norm ----------------------------------------------------------------


@lowers("torch.logsumexp")
def logsumexp(ctx: OpContext) -> None:
    """log(sum(exp(x - m))) + m with m the max over dims; an infinite m counts as 0 (as torch
    does), so that all -inf gives -inf and a +inf gives +inf rather than NaN."""
    x = _as_float(ctx, tensor_input(ctx))
    attrs = reduce_attrs(ctx, x.type.rank)
    dims, keepdim = attrs["dims"], attrs["keepdim"]
    peak = ctx.intermediate("reduce_max", [x], {"dims": dims, "keepdim": True}, "max")
    infinite = ctx.intermediate("eq", [ctx.intermediate("abs", [peak], name="abs_max"),
                                     scalar(ctx, "inf", np.inf, x.dtype)], name="max_is_inf")
    peak = ctx.intermediate("where", [infinite, scalar(ctx, "zero", 0, x.dtype), peak], name="finite_max")
    shifted = ctx.intermediate("exp", [ctx.intermediate("sub", [x, peak], name="shifted")], name="exp")
    total = ctx.intermediate("reduce_sum", [shifted], {"dims": dims, "keepdim": keepdim}, "sum")
    if not keepdim:
        shape = reduced_shape(x.shape, reduce_axes(x.type.rank, dims), False)
        peak = ctx.intermediate("reshape", [peak], {"shape": shape}, "finite_max_squeezed")
    ctx.emit("add", [ctx.intermediate("log", [total]), peak])


def _correction(ctx: OpContext) -> float:
    """Bessel's correction: `correction`, or pnnx's `unbiased` (a bool, or the correction
    itself when torch was given correction=)."""
    value = ctx.param("correction", None)
    if value is None:
        value = ctx.param("unbiased", True)
    if not isinstance(value, (bool, int, float)):
        raise Unsupported(f"correction={value!r}")
    return float(value)


def _variance(ctx: OpContext, x: Value) -> Value:
    """sum((x - mean)^2) / max(0, N - correction) over dims (two passes, as torch)."""
    attrs = reduce_attrs(ctx, x.type.rank)
    dims, keepdim = attrs["dims"], attrs["keepdim"]
    count = math.prod(x.shape[a] for a in reduce_axes(x.type.rank, dims))
    mean = ctx.intermediate("reduce_mean", [x], {"dims": dims, "keepdim": True}, "mean")
    squares = ctx.intermediate("square", [ctx.intermediate("sub", [x, mean], name="centered")])
    total = ctx.intermediate("reduce_sum", [squares], {"dims": dims, "keepdim": keepdim}, "sum_of_squares")
    divisor = scalar(ctx, "divisor", max(0.0, count - _correction(ctx)), x.dtype)
    return ctx.intermediate("div", [total, divisor], name="variance")


@lowers("torch.var")
def var(ctx: OpContext) -> None:
    ctx.alias(ctx.op.outputs[0], _variance(ctx, tensor_input(ctx)))


@lowers("torch.std")
def std(ctx: OpContext) -> None:
    ctx.emit("sqrt", [_variance(ctx, tensor_input(ctx))])


@lowers("torch.norm")
def norm(ctx: OpContext) -> None:
    """torch.norm and torch.linalg.vector_norm (pnnx writes both as torch.norm): a vector norm
    over dim (every dim when None), whatever the number of dims."""
    x = tensor_input(ctx)
    result = vector_norm(ctx, x, _norm_order(ctx), **reduce_attrs(ctx, x.type.rank))
    ctx.alias(ctx.op.outputs[0], result)


# -- scans and topk ------------------------------------------------------------------------------


def _scan_input(ctx: OpContext) -> Value:
    """x, cast first to the dtype torch was asked to accumulate in (`dtype=`, which pnnx may
    drop, leaving only the output's dtype annotation)."""
    x = tensor_input(ctx)
    spelled = ctx.param("dtype", None)
    if spelled is not None and spelled not in TORCH_DTYPES:
        raise Unsupported(f"dtype={spelled}")
    dtype = TORCH_DTYPES[spelled] if spelled is not None else DTYPES.get(ctx.annotated_dtype(ctx.op.outputs[0]))
    if dtype is None or dtype == x.dtype or (dtype == "int64" and not np.issubdtype(np.dtype(x.dtype), np.floating)):
        return x  # integers and bools accumulate in int64 anyway
    return ctx.intermediate("cast", [x], {"dtype": dtype}, f"as_{dtype}")


@lowers("torch.cumsum", "torch.cumprod")
def scan(ctx: OpContext) -> None:
    ir_op = "cumsum" if ctx.op.type == "torch.cumsum" else "cumprod"
    x = _scan_input(ctx)
    ctx.emit(ir_op, [x], {"dim": axis_of(ctx, int_param(ctx, "dim"), x.type.rank)})


@lowers("torch.topk")
def topk(ctx: OpContext) -> None:
    """values and int64 indices; pnnx may keep only the values output."""
    x = tensor_input(ctx, "k")
    attrs = {
        "k": int_param(ctx, "k"),
        "dim": axis_of(ctx, int_param(ctx, "dim", -1), x.type.rank),
        "largest": bool(ctx.param("largest", True)),
        "sorted": bool(ctx.param("sorted", True)),
    }
    outputs = list(ctx.op.outputs)
    if len(outputs) == 1:
        outputs.append(ctx.temp("indices"))
    ctx.emit("topk", [x], attrs, outputs=outputs)
