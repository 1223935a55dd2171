"""Lowering of data movement: views, reshapes, transposes, slicing, pixel and channel
shuffles, identities and pnnx.Attribute constants (joins and splits: join.py).

pnnx writes most of these with static params once shapes are known (view and
reshape become `Tensor.reshape shape=(...)`, `x[:, 2]` becomes `Tensor.select`,
multi-axis indexing one `Tensor.slice` with list params). torch conventions are
resolved here, against the input's static shape: -1 sizes, negative dims,
"to the end" bounds (2147483647 or 9223372036854775807) and negative indices.
With dynamic exports, a param computed from input sizes becomes an extra operand
($shape, $end, $sizes, ...): a constant once our input shapes are fixed, so we
read it; anything that stays a runtime value is refused with Unsupported.
"""

from __future__ import annotations

import math

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.params import axis_of, int_param, int_tuple, tensor_input
from ir.graph import Value

_NO_SELECT = 2147483647  # pnnx's "this axis is sliced, not selected" marker in `selects`


def resolve_shape(ctx: OpContext, shape: tuple[int, ...], size: int) -> tuple[int, ...]:
    """Replace torch's single -1 in a reshape target by the size that makes the element counts agree."""
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ctx.format_error(f"reshape target {shape} is invalid")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or size % known:
            raise ctx.format_error(f"cannot reshape {size} elements to {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    if math.prod(shape) != size:
        raise ctx.format_error(f"cannot reshape {size} elements to {shape}")
    return shape


# -- emitting -------------------------------------------------------------------------------


def emit_reshape(ctx: OpContext, x: Value, shape: tuple[int, ...]) -> None:
    """Reshape x into the op's output; a reshape that changes nothing is an alias, not a node."""
    if tuple(shape) == x.shape:
        ctx.alias(ctx.op.outputs[0], x)
    else:
        ctx.emit("reshape", [x], {"shape": shape})


def emit_slice(ctx: OpContext, x: Value, bounds: dict[int, slice], drop: tuple[int, ...] = ()) -> None:
    """Slice x (python slice per axis) into the op's output, then drop the `drop` axes
    (each sliced to length 1), as a select does."""
    if any(b.step <= 0 for b in bounds.values()):
        raise ctx.format_error(f"slice steps {[b.step for b in bounds.values()]}: torch allows only positive steps")
    canonical = {a: b.indices(x.shape[a]) for a, b in sorted(bounds.items())}
    attrs = {
        "axes": tuple(canonical),
        "starts": tuple(b[0] for b in canonical.values()),
        "ends": tuple(b[1] for b in canonical.values()),
        "steps": tuple(b[2] for b in canonical.values()),
    }
    if not drop:
        ctx.emit("slice", [x], attrs)
        return
    (sliced,) = ctx.emit("slice", [x], attrs, outputs=[ctx.temp("slice")])
    emit_reshape(ctx, sliced, tuple(d for a, d in enumerate(sliced.shape) if a not in drop))


def select_bound(ctx: OpContext, index: int, size: int) -> slice:
    """The length-1 slice picking `index` (negative counts from the end) out of `size`."""
    if not -size <= index < size:
        raise ctx.format_error(f"select index {index} is out of range for a dim of size {size}")
    index %= size
    return slice(index, index + 1, 1)


# -- constants and identities ------------------------------------------------------------


@lowers("pnnx.Attribute")
def attribute(ctx: OpContext) -> None:
    ctx.alias(ctx.op.outputs[0], ctx.attr_const("data"))


@lowers("nn.Identity", "nn.Dropout", "nn.Dropout2d", "nn.Dropout3d", "nn.AlphaDropout", "F.dropout",
        "F.dropout2d", "F.dropout3d", "F.alpha_dropout", "F.feature_alpha_dropout", "Tensor.contiguous",
        "torch.clone", "Tensor.clone", "torch.positive")
def identity(ctx: OpContext) -> None:
    """Inference-time identities: the output is the input (dropout is off in eval mode)."""
    if ctx.param("training", False) is True:  # F.dropout(x, training=True): traced from a module in train mode
        raise Unsupported("out of scope: dropout in training mode is random; export the model in eval mode")
    ctx.alias(ctx.op.outputs[0], ctx.input(0))


# -- reshapes -----------------------------------------------------------------------------------


@lowers("Tensor.reshape", "Tensor.view", "torch.reshape", "torch.view")
def reshape(ctx: OpContext) -> None:
    x = tensor_input(ctx, "shape")
    target = int_tuple(ctx, "shape")  # shape=() (to 0-d) reads as None
    emit_reshape(ctx, x, resolve_shape(ctx, () if target is None else target, x.type.size))


@lowers("Tensor.view_as", "Tensor.reshape_as", "aten::view_as")
def reshape_as(ctx: OpContext) -> None:
    emit_reshape(ctx, ctx.input(0), ctx.input(1).shape)


@lowers("torch.flatten", "Tensor.flatten")
def flatten(ctx: OpContext) -> None:
    x = ctx.input(0)
    if x.type.rank == 0:
        emit_reshape(ctx, x, (1,))
        return
    start = axis_of(ctx, int_param(ctx, "start_dim", 0), x.type.rank)
    end = axis_of(ctx, int_param(ctx, "end_dim", -1), x.type.rank)
    if start > end:
        raise ctx.format_error(f"flatten start_dim {start} comes after end_dim {end}")
    s = x.shape
    emit_reshape(ctx, x, s[:start] + (math.prod(s[start:end + 1]),) + s[end + 1:])


@lowers("Tensor.unflatten", "torch.unflatten")
def unflatten(ctx: OpContext) -> None:
    x = tensor_input(ctx, "sizes")
    axis = axis_of(ctx, int_param(ctx, "dim"), x.type.rank)
    sizes = resolve_shape(ctx, int_tuple(ctx, "sizes"), x.shape[axis])
    emit_reshape(ctx, x, x.shape[:axis] + sizes + x.shape[axis + 1:])


@lowers("torch.squeeze", "Tensor.squeeze")
def squeeze(ctx: OpContext) -> None:
    """Drop the given dims (all dims when none is given) that have size 1; others stay, as torch."""
    x = ctx.input(0)
    dims = int_tuple(ctx, "dim", None)
    axes = range(x.type.rank) if dims is None else {axis_of(ctx, d, x.type.rank) for d in dims}
    drop = {a for a in axes if x.shape[a] == 1}
    emit_reshape(ctx, x, tuple(d for a, d in enumerate(x.shape) if a not in drop))


@lowers("torch.unsqueeze", "Tensor.unsqueeze")
def unsqueeze(ctx: OpContext) -> None:
    x = ctx.input(0)
    axis = axis_of(ctx, int_param(ctx, "dim"), x.type.rank + 1)
    emit_reshape(ctx, x, x.shape[:axis] + (1,) + x.shape[axis:])


# -- transposes -------------------------------------------------------------------------------------


@lowers("Tensor.permute", "torch.permute")
def permute(ctx: OpContext) -> None:
    x = ctx.input(0)
    perm = tuple(axis_of(ctx, d, x.type.rank) for d in int_tuple(ctx, "dims"))
    if sorted(perm) != list(range(x.type.rank)):
        raise ctx.format_error(f"dims {perm} are not a permutation of {x.type.rank} axes")
    ctx.emit("transpose", [x], {"perm": perm})


def emit_swap(ctx: OpContext, x: Value, a: int, b: int) -> None:
    perm = list(range(x.type.rank))
    perm[a], perm[b] = perm[b], perm[a]
    ctx.emit("transpose", [x], {"perm": tuple(perm)})


@lowers("torch.transpose", "Tensor.transpose")
def transpose(ctx: OpContext) -> None:
    x = ctx.input(0)
    rank = x.type.rank
    emit_swap(ctx, x, axis_of(ctx, int_param(ctx, "dim0"), rank), axis_of(ctx, int_param(ctx, "dim1"), rank))


@lowers("torch.t", "Tensor.t")
def matrix_transpose(ctx: OpContext) -> None:
    """torch.t: a 2-D transpose; 0-D and 1-D tensors are returned as they are."""
    x = ctx.input(0)
    if x.type.rank > 2:
        raise ctx.format_error(f"torch.t expects at most 2 dims, got {x.type}")
    if x.type.rank < 2:
        ctx.alias(ctx.op.outputs[0], x)
    else:
        emit_swap(ctx, x, 0, 1)


@lowers("nn.ChannelShuffle")
def channel_shuffle(ctx: OpContext) -> None:
    """(N, g*k, ...) -> view (N, g, k, ...) -> swap g and k -> flatten back."""
    x = ctx.input(0)
    groups = int_param(ctx, "groups")
    n, c, *rest = x.shape
    if groups < 1 or c % groups:
        raise ctx.format_error(f"{c} channels are not divisible into {groups} groups")
    (grouped,) = ctx.emit("reshape", [x], {"shape": (n, groups, c // groups, *rest)}, outputs=[ctx.temp("grouped")])
    perm = (0, 2, 1, *range(3, grouped.type.rank))
    (swapped,) = ctx.emit("transpose", [grouped], {"perm": perm}, outputs=[ctx.temp("swapped")])
    emit_reshape(ctx, swapped, x.shape)


# -- slicing ------------------------------------------------------------------------------------------


@lowers("Tensor.slice")
def slice_(ctx: OpContext) -> None:
    x = tensor_input(ctx, "start", "end", "step")
    emit_slice(ctx, x, *slice_params(ctx, x))


def slice_params(ctx: OpContext, x: Value) -> tuple[dict[int, slice], tuple[int, ...]]:
    """(bounds by axis, axes a select drops) of pnnx's two slice forms: `dim start end step`, and the
    fused `dims starts ends steps selects` (dims index the input; a selects entry other than
    2147483647 picks that index and drops the dim). Tensor.slice and Tensor.slice_copy write both."""
    rank = x.type.rank
    if "dims" not in ctx.op.params:
        axis = axis_of(ctx, int_param(ctx, "dim"), rank)
        return {axis: slice(int_param(ctx, "start", 0), int_param(ctx, "end", _NO_SELECT),
                            int_param(ctx, "step", 1))}, ()
    dims, starts, ends, steps = (int_tuple(ctx, k) for k in ("dims", "starts", "ends", "steps"))
    selects = int_tuple(ctx, "selects", None) or (_NO_SELECT,) * len(dims)
    if not len(dims) == len(starts) == len(ends) == len(steps) == len(selects):
        raise ctx.format_error("dims, starts, ends, steps and selects differ in length")
    bounds, drop = {}, []
    for dim, start, end, step, select in zip(dims, starts, ends, steps, selects, strict=True):
        axis = axis_of(ctx, dim, rank)
        if select == _NO_SELECT:
            bounds[axis] = slice(start, end, step)
        else:
            bounds[axis] = select_bound(ctx, select, x.shape[axis])
            drop.append(axis)
    return bounds, tuple(drop)


@lowers("Tensor.select", "torch.select")
def select(ctx: OpContext) -> None:
    x = tensor_input(ctx, "index")
    axis = axis_of(ctx, int_param(ctx, "dim"), x.type.rank)
    emit_slice(ctx, x, {axis: select_bound(ctx, int_param(ctx, "index"), x.shape[axis])}, (axis,))


@lowers("torch.narrow", "Tensor.narrow")
def narrow(ctx: OpContext) -> None:
    x = tensor_input(ctx, "start", "length")
    axis = axis_of(ctx, int_param(ctx, "dim"), x.type.rank)
    start, length = int_param(ctx, "start"), int_param(ctx, "length")
    if start < 0:
        start += x.shape[axis]
    if not 0 <= start <= start + length <= x.shape[axis]:
        raise ctx.format_error(f"narrow start {start} length {length} exceed dim of size {x.shape[axis]}")
    emit_slice(ctx, x, {axis: slice(start, start + length, 1)})


# -- pixel shuffles ------------------------------------------------------------------------------------


@lowers("nn.PixelShuffle", "F.pixel_shuffle")
def pixel_shuffle(ctx: OpContext) -> None:
    ctx.emit("pixel_shuffle", [ctx.input(0)], {"upscale": int_param(ctx, "upscale_factor")})


@lowers("nn.PixelUnshuffle", "F.pixel_unshuffle")
def pixel_unshuffle(ctx: OpContext) -> None:
    ctx.emit("pixel_unshuffle", [ctx.input(0)], {"downscale": int_param(ctx, "downscale_factor")})
