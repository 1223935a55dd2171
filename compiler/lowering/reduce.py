"""Lowering of reductions: torch.sum/mean/prod/amax/amin, torch.max/min, torch.argmax/argmin.

pnnx spells `dim` as a tuple for sum/mean/amax/amin (`dim=(1)`) and as an int for
max/min/argmax/prod (`dim=1`); a full reduction has no params at all. torch.max(x, dim)
has two outputs (values, indices) when the indices are used and one otherwise.
"""

from __future__ import annotations

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.params import axis_of, int_tuple, tensor_input

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
