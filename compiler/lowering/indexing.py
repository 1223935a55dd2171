"""Lowering of indexing and shape ops: roll, flip, tensor_split, repeat_interleave, cross,
diag/diagonal, advanced indexing (Tensor.index, index_put), gather, scatter, index_select,
index_add, embedding, slice_scatter/slice_copy, fill, masked_select, unfold/fold and the
tensor factories (zeros_like, full, arange...).

What only moves elements lowers onto ops with kernels where that is natural: roll is two
slices and a concat per dim, repeat_interleave a reshape-expand-reshape, cross slices and
elementwise expressions, a diagonal a strided slice of the flattened matrix, diag of a vector
a pad and a where over an eye mask. The rest are the ops of ir/ops/indexing.py.

Indices: pnnx writes a constant index list in the `expr` param of Tensor.index
(`expr=[None,[1,0]]`, None meaning the whole dim) and a tensor one as a list expression
operand (`$expr`, `$indices` = `[None,@0]`). Constant boolean masks become integer
indices (their nonzero positions); a runtime mask makes the output size depend on the
data, which a static graph cannot express, except in index_put where it is a where().
The tensor factories are constants: pnnx folds them itself unless the export is dynamic.
"""

from __future__ import annotations

import math

import numpy as np

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.expression import TORCH_DTYPES, Operands, lower_expression
from compiler.lowering.join import emit_split
from compiler.lowering.params import axis_of, int_param, int_tuple, param_value, reshaped, tensor_input
from compiler.lowering.shape import emit_reshape, slice_params
from ir.expr import ListExpr, Literal, parse_expression
from ir.graph import Value

# -- helpers ----------------------------------------------------------------------------------------


def operand(ctx: OpContext, name: str, position: int) -> Value:
    """The tensor operand `$name`, or the input at `position` when pnnx wrote no names."""
    value = ctx.input_named(name)
    if value is None:
        if position >= len(ctx.op.inputs):
            raise ctx.format_error(f"missing operand {name}")
        value = ctx.input(position)
    return value


def emit_slice_to(ctx: OpContext, x: Value, axis: int, start: int, end: int, step: int, name: str) -> Value:
    """x[start:end:step] along `axis` (bounds already in range) into a temporary."""
    attrs = {"axes": (axis,), "starts": (start,), "ends": (end,), "steps": (step,)}
    return ctx.intermediate("slice", [x], attrs, name=name)


def cast_to(ctx: OpContext, x: Value, dtype: str, name: str) -> Value:
    if x.dtype == dtype:
        return x
    return ctx.intermediate("cast", [x], {"dtype": dtype}, name=name)


def torch_dtype(ctx: OpContext, default: str) -> str:
    """The op's `dtype=` param as a numpy dtype name (None: `default`)."""
    spelled = ctx.param("dtype", None)
    if spelled is None:
        return default
    if spelled not in TORCH_DTYPES:
        raise Unsupported(f"dtype={spelled}")
    return TORCH_DTYPES[spelled]


# -- roll and flip ------------------------------------------------------------------------------------


@lowers("torch.roll", "Tensor.roll")
def roll(ctx: OpContext) -> None:
    """Per rolled dim, the last `shift` elements move to the front: concat(x[n-s:], x[:n-s]).
    Without dims, the flattened tensor is rolled and reshaped back."""
    x = tensor_input(ctx)
    shifts, dims = int_tuple(ctx, "shifts"), int_tuple(ctx, "dims", None)
    if dims is None:
        if len(shifts) != 1:
            raise ctx.format_error(f"roll without dims takes one shift, got {shifts}")
        flat = reshaped(ctx, x, (x.type.size,), "flat")
        emit_reshape(ctx, _roll_axes(ctx, flat, {0: shifts[0]}), x.shape)
        return
    if len(shifts) != len(dims):
        raise ctx.format_error(f"roll shifts {shifts} and dims {dims} differ in length")
    total: dict[int, int] = {}
    for shift, dim in zip(shifts, dims, strict=True):
        axis = axis_of(ctx, dim, x.type.rank)
        total[axis] = total.get(axis, 0) + shift
    emit_reshape(ctx, _roll_axes(ctx, x, total), x.shape)


def _roll_axes(ctx: OpContext, x: Value, shifts: dict[int, int]) -> Value:
    for axis, shift in shifts.items():
        n = x.shape[axis]
        s = shift % n if n else 0
        if s:
            tail = emit_slice_to(ctx, x, axis, n - s, n, 1, f"tail{axis}")
            head = emit_slice_to(ctx, x, axis, 0, n - s, 1, f"head{axis}")
            (x,) = ctx.emit("concat", [tail, head], {"dim": axis}, outputs=[ctx.temp(f"roll{axis}")])
    return x


@lowers("torch.flip", "Tensor.flip")
def flip(ctx: OpContext) -> None:
    x = tensor_input(ctx)
    axes = tuple(sorted({axis_of(ctx, d, x.type.rank) for d in int_tuple(ctx, "dims")}))
    axes = tuple(a for a in axes if x.shape[a] > 1)
    if axes:
        ctx.emit("flip", [x], {"dims": axes})
    else:
        ctx.alias(ctx.op.outputs[0], x)


# -- splitting and repeating ----------------------------------------------------------------------------


@lowers("torch.tensor_split", "Tensor.tensor_split")
def tensor_split(ctx: OpContext) -> None:
    """`sections=k`: k pieces, the first n % k one longer; `indices=(i, j)`: x[:i], x[i:j], x[j:]
    with python slicing's bounds (a decreasing index gives an empty piece, then restarts)."""
    x = tensor_input(ctx)
    axis = axis_of(ctx, int_param(ctx, "dim", 0), x.type.rank)
    n = x.shape[axis]
    if "sections" in ctx.op.params:
        k = int_param(ctx, "sections")
        if k < 1:
            raise ctx.format_error(f"tensor_split into {k} sections")
        emit_split(ctx, x, axis, [n // k + 1] * (n % k) + [n // k] * (k - n % k))
        return
    if "indices" not in ctx.op.params:
        raise Unsupported("tensor_split by a tensor of indices or sections")
    cuts = (0, *int_tuple(ctx, "indices"), None)
    pieces = [slice(a, b).indices(n)[:2] for a, b in zip(cuts, cuts[1:])]
    if all(a <= b for a, b in pieces) and all(p[1] == q[0] for p, q in zip(pieces, pieces[1:])):
        emit_split(ctx, x, axis, [b - a for a, b in pieces])
        return
    if len(pieces) != len(ctx.op.outputs):
        raise ctx.format_error(f"tensor_split gives {len(pieces)} pieces, the op has {len(ctx.op.outputs)} outputs")
    for (a, b), out in zip(pieces, ctx.op.outputs, strict=True):
        attrs = {"axes": (axis,), "starts": (a,), "ends": (max(a, b),), "steps": (1,)}
        ctx.emit("slice", [x], attrs, outputs=[out])


@lowers("torch.repeat_interleave", "Tensor.repeat_interleave")
def repeat_interleave(ctx: OpContext) -> None:
    """Each element repeated along dim (the flattened tensor without dim): an int repeat is
    reshape (.., n, 1, ..) -> expand (.., n, r, ..) -> reshape (.., n*r, ..); a constant tensor
    of repeats per element gathers with the indices it spells out."""
    x = tensor_input(ctx, "repeats")
    dim = param_value(ctx, "dim", None)
    if dim is None:
        x, axis = reshaped(ctx, x, (x.type.size,), "flat"), 0
    else:
        axis = axis_of(ctx, dim, x.type.rank)
    repeats = _repeats(ctx)
    n, shape = x.shape[axis], x.shape
    if repeats.size == 1:
        r = int(repeats.reshape(()))
        ones = reshaped(ctx, x, shape[:axis + 1] + (1,) + shape[axis + 1:], "unsqueeze")
        (wide,) = ctx.emit("expand", [ones], {"shape": shape[:axis + 1] + (r,) + shape[axis + 1:]},
                           outputs=[ctx.temp("expand")])
        emit_reshape(ctx, wide, shape[:axis] + (n * r,) + shape[axis + 1:])
        return
    if repeats.shape != (n,) or repeats.min() < 0:
        raise ctx.format_error(f"repeats {repeats.tolist()} must be {n} non-negative counts")
    index = ctx.const("index", np.repeat(np.arange(n, dtype=np.int64), repeats))
    ctx.emit("index", [x, index], {"axes": (axis,)})


def _repeats(ctx: OpContext) -> np.ndarray:
    """The repeats: an int param, or a `$repeats` tensor that must be a constant."""
    value = ctx.input_named("repeats")
    if value is None:
        return np.asarray(int_param(ctx, "repeats"))
    if not value.is_constant:
        raise Unsupported("repeats given as a runtime tensor: the output size depends on its values")
    return np.asarray(value.data, dtype=np.int64)


# -- cross and diagonals ---------------------------------------------------------------------------------


@lowers("torch.cross", "torch.linalg.cross", "aten::linalg_cross")
def cross(ctx: OpContext) -> None:
    """a x b along dim (size 3): component i is a[i+1] b[i+2] - a[i+2] b[i+1], from slices and
    elementwise expressions, concatenated. torch.cross without dim takes the first dim of
    size 3; torch.linalg.cross the last."""
    a, b = operand(ctx, "input", 0), operand(ctx, "other", 1)
    axis = axis_of(ctx, _cross_dim(ctx, a, b), a.type.rank)
    if a.type.rank != b.type.rank or a.shape[axis] != 3 or b.shape[axis] != 3:
        raise ctx.format_error(f"cross along dim {axis} of {a.type} and {b.type}: they must have the same rank "
                               "and size 3 in that dim")
    parts = {(v, i): emit_slice_to(ctx, v, axis, i, i + 1, 1, f"{tag}{i}")
             for v, tag in ((a, "a"), (b, "b")) for i in range(3)}
    components = []
    for i in range(3):
        j, k = (i + 1) % 3, (i + 2) % 3
        inputs = [parts[a, j], parts[b, k], parts[a, k], parts[b, j]]
        components += ctx.emit("expression", inputs, {"expr": "sub(mul(@0,@1),mul(@2,@3))"},
                               outputs=[ctx.temp(f"c{i}")])
    ctx.emit("concat", components, {"dim": axis})


def _cross_dim(ctx: OpContext, a: Value, b: Value) -> int:
    if ctx.op.type == "aten::linalg_cross":
        dim = ctx.input(2) if len(ctx.op.inputs) > 2 else None
        if dim is not None and not dim.is_constant:
            raise Unsupported("dim given as a runtime tensor")
        return -1 if dim is None else int(dim.data)
    dim = param_value(ctx, "dim", None)
    if dim is not None:
        return dim
    if ctx.op.type == "torch.linalg.cross":
        return -1
    shape = np.broadcast_shapes(a.shape, b.shape)
    if 3 not in shape:
        raise ctx.format_error(f"cross of {a.type} and {b.type}: no dim of size 3")
    return shape.index(3)


@lowers("torch.diag", "Tensor.diag")
def diag(ctx: OpContext) -> None:
    """A vector becomes a square matrix with it on the `diagonal`-th diagonal; a matrix gives
    that diagonal as a vector."""
    x = tensor_input(ctx)
    k = int_param(ctx, "diagonal", 0)
    if x.type.rank == 2:
        emit_diagonal(ctx, x, k, 0, 1)
    elif x.type.rank == 1:
        _diag_matrix(ctx, x, k)
    else:
        raise ctx.format_error(f"torch.diag takes a vector or a matrix, got {x.type}")


def _diag_matrix(ctx: OpContext, v: Value, k: int) -> None:
    """out[i, j] = row[j] where j == i + k, else 0: `row` is v padded to m = n + |k| on the side
    that puts v[i] in column i + k (k >= 0) or i (k < 0)."""
    m = v.shape[0] + abs(k)
    row = v if k == 0 else ctx.intermediate("pad", [v], {"pads": (k, 0) if k > 0 else (0, -k)}, name="row")
    mask = ctx.const("mask", np.eye(m, k=k, dtype=bool))
    spell = Operands()
    zero = "False" if v.dtype == "bool" else "0"
    lower_expression(ctx, f"where({spell(mask)},{spell(row)},{zero})", spell.values)


@lowers("torch.tril", "torch.triu", "Tensor.tril", "Tensor.triu", "aten::tril", "aten::triu")
def triangle(ctx: OpContext) -> None:
    """The lower (tril) or upper (triu) triangle of the last two dims from the `diagonal`-th diagonal on,
    zeros elsewhere: where(mask, x, 0) with the (rows, cols) mask a constant. pnnx writes torch.tril with a
    `diagonal` param, or leaves aten::tril with the diagonal as a second, constant operand."""
    x = operand(ctx, "input", 0)
    if ctx.op.type.startswith("aten::"):
        if len(ctx.op.inputs) > 2 or (len(ctx.op.inputs) == 2 and not ctx.input(1).is_constant):
            raise Unsupported("a diagonal given as a runtime tensor")
        k = int(ctx.input(1).data) if len(ctx.op.inputs) == 2 else 0
    else:
        k = int_param(ctx, "diagonal", 0)
    if x.type.rank < 2:
        raise ctx.format_error(f"{ctx.op.type} takes a tensor of 2 dims or more, got {x.type}")
    rows, cols = x.shape[-2:]
    lower = ctx.op.type.endswith("tril")
    ones = np.ones((rows, cols), dtype=bool)
    mask = ctx.const("mask", np.tril(ones, k) if lower else np.triu(ones, k))
    spell = Operands()
    zero = "False" if x.dtype == "bool" else "0"
    lower_expression(ctx, f"where({spell(mask)},{spell(x)},{zero})", spell.values)


def emit_diagonal(ctx: OpContext, x: Value, offset: int, dim1: int, dim2: int) -> None:
    """torch.diagonal: the (dim1, dim2) diagonal at `offset`, as the last dim. With those two
    dims moved last and flattened to r*c, the diagonal is a slice of step c + 1."""
    rank = x.type.rank
    d1, d2 = axis_of(ctx, dim1, rank), axis_of(ctx, dim2, rank)
    if d1 == d2:
        raise ctx.format_error(f"diagonal dims {dim1} and {dim2} are the same")
    perm = tuple(a for a in range(rank) if a not in (d1, d2)) + (d1, d2)
    if perm != tuple(range(rank)):
        (x,) = ctx.emit("transpose", [x], {"perm": perm}, outputs=[ctx.temp("moved")])
    *lead, r, c = x.shape
    length = max(0, min(r, c - offset) if offset >= 0 else min(r + offset, c))
    start = (offset if offset >= 0 else -offset * c) if length else 0
    end = start + (length - 1) * (c + 1) + 1 if length else 0
    flat = reshaped(ctx, x, (*lead, r * c), "flat")
    ctx.emit("slice", [flat], {"axes": (len(lead),), "starts": (start,), "ends": (end,), "steps": (c + 1,)})


@lowers("torch.diagonal", "Tensor.diagonal", "aten::diagonal")
def diagonal(ctx: OpContext) -> None:
    x = operand(ctx, "input", 0)
    if ctx.op.type == "aten::diagonal":
        params = [ctx.input(i) for i in range(1, len(ctx.op.inputs))]
        if not all(p.is_constant for p in params):
            raise Unsupported("offset or dims given as runtime tensors")
        offset, dim1, dim2 = ([int(p.data) for p in params] + [0, 0, 1][len(params):])
    else:
        offset, dim1, dim2 = int_param(ctx, "offset", 0), int_param(ctx, "dim1", 0), int_param(ctx, "dim2", 1)
    emit_diagonal(ctx, x, offset, dim1, dim2)


# -- advanced indexing ------------------------------------------------------------------------------------

#: An index list's item: None (the whole dim), a constant (int or bool numpy array) or a tensor.
Item = None | np.ndarray | Value


def _literal(expr) -> object:
    if isinstance(expr, Literal):
        return expr.value
    if isinstance(expr, ListExpr):
        return [_literal(item) for item in expr.items]
    raise ValueError(f"{expr} is not a constant")


def index_items(ctx: OpContext, arg: str) -> list[Item]:
    """Tensor.index's list: a constant written in its `expr` param, or the `$expr` operand."""
    if not any(name == arg for name in ctx.op.input_names):
        try:
            expr = parse_expression(ctx.param(arg))
            items = _literal(expr) if isinstance(expr, ListExpr) else None
        except ValueError as exc:
            raise ctx.format_error(f"{arg}={ctx.param(arg)!r} is not a constant index list: {exc}") from None
        if items is None:
            raise ctx.format_error(f"{arg}={ctx.param(arg)!r} is not an index list")
        return [None if item is None else np.asarray(item) for item in items]
    return ctx.input_list(arg)


def integer_indices(ctx: OpContext, x: Value, items: list[Item]) -> tuple[tuple[int, ...], list[Value]]:
    """The axes and integer index tensors of an index list: constant masks become their nonzero
    positions (a k-dim mask indexes k dims), constants are checked against the dim they index."""
    axes: list[int] = []
    indices: list[Value] = []
    axis = 0
    for k, item in enumerate(items):
        if isinstance(item, Value) and item.is_constant:
            item = item.data if item.dtype == "bool" else item
        if item is None:
            axis += 1
            continue
        if isinstance(item, Value):
            if item.dtype == "bool":
                raise Unsupported("indexing with a runtime boolean mask: the output size depends on the mask's values")
            if not np.issubdtype(np.dtype(item.dtype), np.integer):
                raise ctx.format_error(f"index {k} is a {item.dtype} tensor, not an integer or boolean one")
            positions = [item.data] if item.is_constant else []
            values = [item]
        elif item.dtype == np.bool_:
            if item.ndim == 0 or x.shape[axis:axis + item.ndim] != item.shape:
                raise ctx.format_error(f"boolean index {k} of shape {item.shape} does not match dims "
                                       f"{axis}.. of {x.type}")
            positions = list(np.nonzero(item))
            values = [ctx.const(f"index{k}_{j}", p.astype(np.int64)) for j, p in enumerate(positions)]
        else:
            positions = [item.astype(np.int64)]
            values = [ctx.const(f"index{k}", positions[0])]
        span = len(values)
        if axis + span > x.type.rank:
            raise ctx.format_error(f"too many indices for {x.type}")
        for j, p in enumerate(positions):
            n = x.shape[axis + j]
            if p.size and not (-n <= p.min() and p.max() < n):
                raise ctx.format_error(f"index {k} is out of range for dim {axis + j} of size {n}")
        axes += range(axis, axis + span)
        indices += values
        axis += span
    return tuple(axes), indices


@lowers("Tensor.index")
def tensor_index(ctx: OpContext) -> None:
    """x[i0, i1, ...] with integer tensors (and whole dims, None in pnnx's list)."""
    x = operand(ctx, "input", 0)
    axes, indices = integer_indices(ctx, x, index_items(ctx, "expr"))
    if not axes:
        ctx.alias(ctx.op.outputs[0], x)
        return
    ctx.emit("index", [x, *indices], {"axes": axes})


@lowers("Tensor.index_put", "Tensor.index_put_", "torch.index_put", "torch.index_put_")
def index_put(ctx: OpContext) -> None:
    """x[indices] = values (+= with accumulate), into a copy of x. values is a tensor (`$values`)
    or a number (`values=`), cast to x's dtype as torch does."""
    x = operand(ctx, "input", 0)
    items = ctx.input_list("indices")
    accumulate = bool(ctx.param("accumulate", False))
    values = ctx.input_named("values")
    if values is None:
        values = ctx.const("values", np.asarray(ctx.param("values")).astype(x.dtype))
    masks = [k for k, item in enumerate(items) if isinstance(item, Value) and item.dtype == "bool"
             and not item.is_constant]
    if masks:
        _masked_put(ctx, x, items, values, accumulate)
        return
    axes, indices = integer_indices(ctx, x, items)
    if not axes:
        raise ctx.format_error("index_put without an index tensor")
    ctx.emit("index_put", [x, values, *indices], {"axes": axes, "accumulate": accumulate})


def _masked_put(ctx: OpContext, x: Value, items: list[Item], values: Value, accumulate: bool) -> None:
    """x[mask] = v with a runtime mask: where(mask, v, x), the mask's dims aligned with x's.
    The count of selected elements is not static, so v must be a single value."""
    lead = 0
    while lead < len(items) and items[lead] is None:
        lead += 1
    mask = items[lead]
    if not isinstance(mask, Value) or mask.dtype != "bool" or any(i is not None for i in items[lead + 1:]):
        raise Unsupported("index_put with a runtime boolean mask and other indices")
    if x.shape[lead:lead + mask.type.rank] != mask.shape:
        raise ctx.format_error(f"boolean index of shape {mask.shape} does not match dims {lead}.. of {x.type}")
    if values.type.size != 1:
        raise Unsupported("index_put of a tensor of values under a runtime boolean mask: "
                          "how many it takes depends on the mask's values")
    mask = reshaped(ctx, mask, mask.shape + (1,) * (x.type.rank - lead - mask.type.rank), "mask")
    values = cast_to(ctx, reshaped(ctx, values, (), "value"), x.dtype, "value_cast")
    spell = Operands()
    m, v, s = spell(mask), spell(values), spell(x)
    new = f"add({s},{v})" if accumulate else v
    lower_expression(ctx, f"where({m},{new},{s})", spell.values)


@lowers("torch.gather", "Tensor.gather")
def gather(ctx: OpContext) -> None:
    x, index = operand(ctx, "input", 0), operand(ctx, "index", 1)
    ctx.emit("gather", [x, index], {"dim": axis_of(ctx, int_param(ctx, "dim"), x.type.rank)})


@lowers("torch.scatter", "Tensor.scatter", "torch.scatter_add", "Tensor.scatter_add", "aten::scatter")
def scatter(ctx: OpContext) -> None:
    """x with src written (scatter) or added (scatter_add) at index along dim. A number or a 0-d
    tensor as src is scatter's `value` form: that value at every indexed position."""
    if ctx.op.type == "aten::scatter":
        if len(ctx.op.inputs) != 4:
            raise Unsupported("scatter with a reduce argument")
        x, dim, index, src = ctx.inputs
        if not dim.is_constant:
            raise Unsupported("dim given as a runtime tensor")
        dim, reduce = int(dim.data), "none"
    else:
        x, index = operand(ctx, "input", 0), operand(ctx, "index", 1)
        src = ctx.input_named("src")
        if src is None:
            src = ctx.const("value", np.asarray(ctx.param("value")).astype(x.dtype))
        dim = int_param(ctx, "dim")
        reduce = "add" if ctx.op.type.endswith("scatter_add") else ctx.param("reduce", "none")
        if reduce not in ("none", "add"):
            raise Unsupported(f"scatter reduce={reduce}")
    if src.type.rank == 0:
        src = cast_to(ctx, src, x.dtype, "value_cast")
        (src,) = ctx.emit("expand", [src], {"shape": index.shape}, outputs=[ctx.temp("values")])
    ctx.emit("scatter", [x, index, src], {"dim": axis_of(ctx, dim, x.type.rank), "reduce": reduce})


@lowers("aten::index_add")
def index_add(ctx: OpContext) -> None:
    """x.index_add(dim, index, source, alpha): x[..., index, ...] += alpha * source, repeated
    indices adding up: an accumulating index_put along one dim."""
    x, dim, index, source, *alpha = ctx.inputs
    if not all(v.is_constant for v in (dim, *alpha)):
        raise Unsupported("dim or alpha given as runtime tensors")
    if index.type.rank > 1:
        raise ctx.format_error(f"index_add takes a vector of indices, got {index.type}")
    if alpha and alpha[0].data.item() != 1:
        spell = Operands()
        text = f"mul({spell(source)},{spell(alpha[0])})"
        (source,) = ctx.emit("expression", spell.values, {"expr": text}, outputs=[ctx.temp("scaled")])
    index = reshaped(ctx, index, (index.type.size,), "index")
    axis = axis_of(ctx, int(dim.data), x.type.rank)
    ctx.emit("index_put", [x, source, index], {"axes": (axis,), "accumulate": True})


@lowers("torch.index_select", "Tensor.index_select")
def index_select(ctx: OpContext) -> None:
    x, index = operand(ctx, "input", 0), operand(ctx, "index", 1)
    axis = axis_of(ctx, int_param(ctx, "dim"), x.type.rank)
    if index.type.rank > 1:
        raise ctx.format_error(f"index_select takes a vector of indices, got {index.type}")
    index = reshaped(ctx, index, (index.type.size,), "index")
    ctx.emit("index", [x, index], {"axes": (axis,)})


@lowers("nn.Embedding", "F.embedding")
def embedding(ctx: OpContext) -> None:
    """weight[input]: padding_idx only matters to training; max_norm would renormalise rows."""
    if ctx.param("max_norm", None) is not None:
        raise Unsupported("max_norm (renormalises the weight rows it looks up)")
    if ctx.op.type == "nn.Embedding":
        x, weight = ctx.input(0), ctx.attr_const("weight")
        if weight.type.rank != 2:
            raise ctx.format_error(f"@weight {weight.type} of nn.Embedding is not 2-D")
        ctx.check_param("num_embeddings", weight.shape[0], f"@weight {weight.shape}")
        ctx.check_param("embedding_dim", weight.shape[1], f"@weight {weight.shape}")
    else:
        x, weight = operand(ctx, "input", 0), operand(ctx, "weight", 1)
    ctx.emit("index", [weight, x], {"axes": (0,)})


@lowers("torch.masked_select", "Tensor.masked_select")
def masked_select(ctx: OpContext) -> None:
    """The elements of x (broadcast with the mask) where the mask is true, flattened. Only a
    constant mask gives a static size: then it is a gather at its nonzero positions."""
    x, mask = operand(ctx, "input", 0), operand(ctx, "mask", 1)
    if not mask.is_constant:
        raise Unsupported("a runtime mask: the output size depends on the mask's values")
    shape = tuple(np.broadcast_shapes(x.shape, mask.shape))
    if x.shape != shape:
        (x,) = ctx.emit("expand", [x], {"shape": shape}, outputs=[ctx.temp("expand")])
    flat = reshaped(ctx, x, (math.prod(shape),), "flat")
    positions = np.flatnonzero(np.broadcast_to(mask.data.astype(bool), shape))
    ctx.emit("index", [flat, ctx.const("index", positions.astype(np.int64))], {"axes": (0,)})


# -- slice scatter and fill -----------------------------------------------------------------------------------


@lowers("torch.slice_scatter", "Tensor.slice_scatter")
def slice_scatter(ctx: OpContext) -> None:
    x, src = operand(ctx, "input", 0), operand(ctx, "src", 1)
    axis = axis_of(ctx, int_param(ctx, "dim", 0), x.type.rank)
    start, end = param_value(ctx, "start", None), param_value(ctx, "end", None)
    emit_slice_scatter(ctx, x, src, {axis: slice(start, end, int_param(ctx, "step", 1))})


@lowers("Tensor.slice_copy")
def slice_copy(ctx: OpContext) -> None:
    """pnnx's `x[slices] = src` (x.copy_ into a slice), in Tensor.slice's two forms: `dim start
    end step`, or `dims starts ends steps selects` where a select picks one index and drops the dim."""
    x, src = operand(ctx, "self", 0), operand(ctx, "src", 1)
    emit_slice_scatter(ctx, x, src, *slice_params(ctx, x))


def emit_slice_scatter(ctx: OpContext, x: Value, src: Value, bounds: dict[int, slice],
                       drop: tuple[int, ...] = ()) -> None:
    """A copy of x with x[bounds] = src: src broadcast to the slice (less its `drop` dims, each
    one selected index), given those dims back, and cast to x's dtype, as torch's copy_."""
    if any(b.step is not None and b.step <= 0 for b in bounds.values()):
        raise ctx.format_error(f"slice steps {[b.step for b in bounds.values()]}: torch allows only positive steps")
    canonical = {a: b.indices(x.shape[a]) for a, b in sorted(bounds.items())}
    target = tuple(len(range(*canonical[a])) if a in canonical else n for a, n in enumerate(x.shape))
    kept = tuple(n for a, n in enumerate(target) if a not in drop)
    if src.shape != kept:
        if src.type.rank > len(kept) or np.broadcast_shapes(src.shape, kept) != kept:
            raise ctx.format_error(f"source {src.type} does not broadcast to the slice's shape {kept}")
        (src,) = ctx.emit("expand", [src], {"shape": kept}, outputs=[ctx.temp("expand")])
    src = cast_to(ctx, reshaped(ctx, src, target, "src"), x.dtype, "cast")
    attrs = {
        "axes": tuple(canonical),
        "starts": tuple(b[0] for b in canonical.values()),
        "ends": tuple(b[1] for b in canonical.values()),
        "steps": tuple(b[2] for b in canonical.values()),
    }
    ctx.emit("slice_scatter", [x, src], attrs)


@lowers("Tensor.fill", "Tensor.fill_", "torch.fill", "torch.fill_")
def fill(ctx: OpContext) -> None:
    """Every element set to value (a number, or a one-element tensor), in x's dtype."""
    x = operand(ctx, "input", 0)
    value = ctx.input_named("value")
    if value is None:
        emit_full(ctx, x.shape, ctx.param("value"), x.dtype)
        return
    if value.type.size != 1:
        raise ctx.format_error(f"fill value {value.type} is not a single value")
    value = cast_to(ctx, reshaped(ctx, value, (), "value"), x.dtype, "cast")
    ctx.emit("expand", [value], {"shape": x.shape})


# -- sliding blocks ------------------------------------------------------------------------------------------


def _pair(ctx: OpContext, key: str, default) -> tuple[int, int]:
    value = int_tuple(ctx, key, default)
    if len(value) == 1:
        value = value * 2
    if len(value) != 2:
        raise ctx.format_error(f"{key}={value} is not one or two ints")
    return tuple(value)


def _block_attrs(ctx: OpContext) -> dict:
    return {"kernel": _pair(ctx, "kernel_size", ...), "stride": _pair(ctx, "stride", (1,)),
            "padding": _pair(ctx, "padding", (0,)), "dilation": _pair(ctx, "dilation", (1,))}


@lowers("nn.Unfold", "F.unfold")
def unfold(ctx: OpContext) -> None:
    """(N, C, H, W) -> (N, C*kh*kw, L); an unbatched (C, H, W) input gets a batch of one."""
    x = tensor_input(ctx)
    if x.type.rank not in (3, 4):
        raise ctx.format_error(f"unfold takes a (N, C, H, W) or (C, H, W) tensor, got {x.type}")
    batched = reshaped(ctx, x, (1,) * (4 - x.type.rank) + x.shape, "batched")
    if x.type.rank == 4:
        ctx.emit("unfold", [batched], _block_attrs(ctx))
        return
    (cols,) = ctx.emit("unfold", [batched], _block_attrs(ctx), outputs=[ctx.temp("unfold")])
    emit_reshape(ctx, cols, cols.shape[1:])


@lowers("nn.Fold", "F.fold")
def fold(ctx: OpContext) -> None:
    """(N, C*kh*kw, L) -> (N, C, H, W); an unbatched (C*kh*kw, L) input gets a batch of one."""
    x = tensor_input(ctx)
    if x.type.rank not in (2, 3):
        raise ctx.format_error(f"fold takes a (N, C*kh*kw, L) or (C*kh*kw, L) tensor, got {x.type}")
    attrs = {"output_size": _pair(ctx, "output_size", ...), **_block_attrs(ctx)}
    batched = reshaped(ctx, x, (1,) * (3 - x.type.rank) + x.shape, "batched")
    if x.type.rank == 3:
        ctx.emit("fold", [batched], attrs)
        return
    (image,) = ctx.emit("fold", [batched], attrs, outputs=[ctx.temp("fold")])
    emit_reshape(ctx, image, image.shape[1:])


# -- tensor factories --------------------------------------------------------------------------------------


def emit_full(ctx: OpContext, shape: tuple[int, ...], value, dtype: str) -> None:
    """The op's output is the constant full(shape, value) in dtype (value converted as torch does)."""
    if isinstance(value, Value) or not isinstance(value, (bool, int, float)):
        raise Unsupported(f"fill value {value!r} is not a number")
    data = np.full(shape, np.asarray(value).astype(dtype), dtype=dtype)
    ctx.alias(ctx.op.outputs[0], ctx.const("value", data))


def _number_dtype(value) -> str:
    """torch's default dtype for a Python number: bool, int64 or float32."""
    return "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float32"


# (torch.empty, empty_like and Tensor.new_empty are out of scope: compiler/lowering/core.py)
_LIKE_VALUES = {"torch.zeros_like": 0, "torch.ones_like": 1}


@lowers("torch.zeros_like", "torch.ones_like", "torch.full_like")
def full_like(ctx: OpContext) -> None:
    """A constant of x's shape."""
    x = tensor_input(ctx)
    value = _LIKE_VALUES.get(ctx.op.type)
    if value is None:
        value = ctx.param("fill_value")
    emit_full(ctx, x.shape, value, torch_dtype(ctx, x.dtype))


def _size(ctx: OpContext) -> tuple[int, ...]:
    """The `size` param or `$size` operand; pnnx writes an empty size `()` as None."""
    return int_tuple(ctx, "size", None) or ()


_NEW_VALUES = {"Tensor.new_zeros": 0, "Tensor.new_ones": 1}


@lowers("Tensor.new_zeros", "Tensor.new_ones", "Tensor.new_full")
def new_full(ctx: OpContext) -> None:
    """A constant of the given size in x's dtype (unless dtype= says otherwise)."""
    x = tensor_input(ctx, "size")
    value = _NEW_VALUES.get(ctx.op.type)
    if value is None:
        value = ctx.param("fill_value")
    emit_full(ctx, _size(ctx), value, torch_dtype(ctx, x.dtype))


def _only_size_operands(ctx: OpContext, *params: str) -> None:
    """A factory has no tensor input: any operand must be one of its params, computed from sizes."""
    unknown = [n or f"operand {i}" for i, n in enumerate(ctx.op.input_names) if n not in params]
    if unknown:
        raise Unsupported(f"{', '.join(unknown)} given as a tensor")


_FULL_VALUES = {"torch.zeros": 0, "torch.ones": 1}


@lowers("torch.zeros", "torch.ones", "torch.full")
def full(ctx: OpContext) -> None:
    """A constant of the given size: float32 by default; torch.full's from its fill value."""
    _only_size_operands(ctx, "size")
    value = _FULL_VALUES.get(ctx.op.type)
    if value is None:
        value = ctx.param("fill_value")
        default = _number_dtype(value)
    else:
        default = "float32"
    emit_full(ctx, _size(ctx), value, torch_dtype(ctx, default))


@lowers("torch.arange")
def arange(ctx: OpContext) -> None:
    """start, start + step, ... below end: int64 when all three are ints, else float32."""
    _only_size_operands(ctx, "start", "end", "step")
    start, end, step = (param_value(ctx, k, d) for k, d in (("start", 0), ("end", ...), ("step", 1)))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end, step)) or step == 0:
        raise Unsupported(f"arange({start}, {end}, {step})")
    default = "int64" if all(isinstance(v, int) for v in (start, end, step)) else "float32"
    data = np.arange(start, end, step, dtype=np.float64 if default == "float32" else np.int64)
    ctx.alias(ctx.op.outputs[0], ctx.const("value", data.astype(torch_dtype(ctx, default))))
