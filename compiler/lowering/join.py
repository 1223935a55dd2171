"""Lowering of joins, splits and repetition: cat, stack, chunk, split, unbind, expand, repeat."""

from __future__ import annotations

from compiler.lowering.core import OpContext, lowers
from compiler.lowering.params import axis_of, int_param, int_tuple, tensor_input
from ir.graph import Value

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
