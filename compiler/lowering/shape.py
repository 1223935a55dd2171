"""Lowering of data movement: views, reshapes, slicing, concatenation, splitting,
expand/repeat, pixel and channel shuffles, identities and pnnx.Attribute constants.

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
from ir.graph import Value

_NO_SELECT = 2147483647  # pnnx's "this axis is sliced, not selected" marker in `selects`


# -- reading params ---------------------------------------------------------------------


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
        "torch.clone", "Tensor.clone")
def identity(ctx: OpContext) -> None:
    """Inference-time identities: the output is the input (dropout is off in eval mode)."""
    ctx.alias(ctx.op.outputs[0], ctx.input(0))


# -- reshapes -----------------------------------------------------------------------------------


@lowers("Tensor.reshape", "Tensor.view", "torch.reshape", "torch.view")
def reshape(ctx: OpContext) -> None:
    x = tensor_input(ctx, "shape")
    emit_reshape(ctx, x, resolve_shape(ctx, int_tuple(ctx, "shape"), x.type.size))


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
    """Both pnnx forms: `dim start end step`, and the fused `dims starts ends steps selects`
    (dims index the input; a selects entry other than 2147483647 picks that index and drops the dim)."""
    x = tensor_input(ctx, "start", "end", "step")
    rank = x.type.rank
    if "dims" not in ctx.op.params:
        axis = axis_of(ctx, int_param(ctx, "dim"), rank)
        bound = slice(int_param(ctx, "start", 0), int_param(ctx, "end", _NO_SELECT), int_param(ctx, "step", 1))
        emit_slice(ctx, x, {axis: bound})
        return
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
    emit_slice(ctx, x, bounds, tuple(drop))


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


# -- joining and splitting -------------------------------------------------------------------------


@lowers("torch.cat")
def cat(ctx: OpContext) -> None:
    xs = ctx.inputs
    ctx.emit("concat", xs, {"dim": axis_of(ctx, int_param(ctx, "dim", 0), xs[0].type.rank)})


@lowers("torch.stack")
def stack(ctx: OpContext) -> None:
    """Unsqueeze every input at dim, then concatenate along it."""
    xs = ctx.inputs
    axis = axis_of(ctx, int_param(ctx, "dim", 0), xs[0].type.rank + 1)
    pieces = []
    for i, x in enumerate(xs):
        shape = x.shape[:axis] + (1,) + x.shape[axis:]
        pieces += ctx.emit("reshape", [x], {"shape": shape}, outputs=[ctx.temp(f"unsqueeze{i}")])
    ctx.emit("concat", pieces, {"dim": axis})


def emit_split(ctx: OpContext, x: Value, axis: int, sizes: list[int]) -> None:
    if len(sizes) != len(ctx.op.outputs):
        raise ctx.format_error(f"splitting dim {axis} of {x.type} gives {len(sizes)} pieces, "
                               f"the op has {len(ctx.op.outputs)} outputs")
    ctx.emit("split", [x], {"dim": axis, "sizes": tuple(sizes)})


def even_pieces(total: int, piece: int) -> list[int]:
    """torch's split sizes for an int split_size: full pieces, then the remainder."""
    if piece <= 0:
        return [total]
    return [piece] * (total // piece) + ([total % piece] if total % piece else [])


@lowers("torch.chunk", "Tensor.chunk")
def chunk(ctx: OpContext) -> None:
    """torch.chunk uses pieces of ceil(n / chunks), so it may yield fewer than `chunks` outputs."""
    x = tensor_input(ctx)
    axis = axis_of(ctx, int_param(ctx, "dim", 0), x.type.rank)
    n = x.shape[axis]
    emit_split(ctx, x, axis, even_pieces(n, -(-n // int_param(ctx, "chunks"))))


@lowers("torch.split", "Tensor.split")
def split(ctx: OpContext) -> None:
    x = tensor_input(ctx)
    axis = axis_of(ctx, int_param(ctx, "dim", 0), x.type.rank)
    sections = ctx.param("split_size_or_sections")
    if isinstance(sections, int) and not isinstance(sections, bool):
        emit_split(ctx, x, axis, even_pieces(x.shape[axis], sections))
    else:
        emit_split(ctx, x, axis, list(int_tuple(ctx, "split_size_or_sections")))


@lowers("torch.unbind", "Tensor.unbind")
def unbind(ctx: OpContext) -> None:
    """Split into size-1 pieces, then drop the split dim from each."""
    x = tensor_input(ctx)
    axis = axis_of(ctx, int_param(ctx, "dim", 0), x.type.rank)
    n = x.shape[axis]
    if n != len(ctx.op.outputs):
        raise ctx.format_error(f"unbinding dim {axis} of {x.type} gives {n} pieces, the op has {len(ctx.op.outputs)}")
    pieces = ctx.emit("split", [x], {"dim": axis, "sizes": (1,) * n},
                      outputs=[ctx.temp(f"piece{i}") for i in range(n)])
    shape = x.shape[:axis] + x.shape[axis + 1:]
    for piece, out in zip(pieces, ctx.op.outputs, strict=True):
        ctx.emit("reshape", [piece], {"shape": shape}, outputs=[out])


# -- broadcasting and repetition --------------------------------------------------------------------


@lowers("Tensor.expand")
def expand(ctx: OpContext) -> None:
    """-1 keeps a dim; new dims may only be added in front, as torch."""
    x = tensor_input(ctx, "sizes")
    sizes = int_tuple(ctx, "sizes")
    lead = len(sizes) - x.type.rank
    if lead < 0 or -1 in sizes[:lead]:
        raise ctx.format_error(f"cannot expand {x.type} to {sizes}")
    shape = sizes[:lead] + tuple(d if s == -1 else s for d, s in zip(x.shape, sizes[lead:], strict=True))
    ctx.emit("expand", [x], {"shape": shape})


@lowers("Tensor.expand_as")
def expand_as(ctx: OpContext) -> None:
    ctx.emit("expand", [ctx.input(0)], {"shape": ctx.input(1).shape})


@lowers("Tensor.repeat", "torch.tile")
def repeat(ctx: OpContext) -> None:
    """Tensor.repeat(sizes) needs a size per dim; torch.tile(dims) pads missing leading ones with 1."""
    key = "dims" if ctx.op.type == "torch.tile" else "sizes"
    x = tensor_input(ctx, key)
    repeats = int_tuple(ctx, key)
    repeats = (1,) * (x.type.rank - len(repeats)) + repeats
    ctx.emit("tile", [x], {"repeats": repeats})


# -- pixel shuffles ------------------------------------------------------------------------------------


@lowers("nn.PixelShuffle", "F.pixel_shuffle")
def pixel_shuffle(ctx: OpContext) -> None:
    ctx.emit("pixel_shuffle", [ctx.input(0)], {"upscale": int_param(ctx, "upscale_factor")})


@lowers("nn.PixelUnshuffle", "F.pixel_unshuffle")
def pixel_unshuffle(ctx: OpContext) -> None:
    ctx.emit("pixel_unshuffle", [ctx.input(0)], {"downscale": int_param(ctx, "downscale_factor")})
