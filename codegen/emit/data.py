"""Emit rules of the data family: the forward's calls into codegen/kernels/data.py."""

from __future__ import annotations

import math

import numpy as np

from codegen.emit import Emit, const, emits, lit
from codegen.kernels.data import RANK, copy_runs, strided_copy, take, transpose_f32
from ir.errors import CodegenUnsupportedError
from ir.graph import Node
from ir.ops.common import normalize_axis


def contiguous_strides(shape) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def plan_copy(shape, sstr, dstr) -> tuple[tuple, tuple, tuple, bool]:
    """Simplify a strided copy: drop size-1 dims, merge dims contiguous in both arrays, put the
    source's unit-stride dim next to last when the destination's is last (tiled), pad to RANK dims."""
    dims = [(n, s, d) for n, s, d in zip(shape, sstr, dstr) if n != 1]
    if any(n == 0 for n, _, _ in dims):
        dims = [(0, 0, 0)]
    elif not dims:  # one element: a run of 1 (the kernel copies runs along the last dim's strides)
        dims = [(1, 1, 1)]
    merged: list[tuple[int, int, int]] = []
    for n, s, d in dims:
        if merged and merged[-1][1] == s * n and merged[-1][2] == d * n:
            merged[-1] = (merged[-1][0] * n, s, d)
        else:
            merged.append((n, s, d))
    transposed = False
    if len(merged) >= 2 and merged[-1][1] != 1:
        unit = [k for k, (n, s, _) in enumerate(merged[:-1]) if s == 1]
        if unit:
            merged.insert(len(merged) - 2, merged.pop(unit[0]))
            transposed = True
    merged = [(1, 0, 0)] * max(RANK - len(merged), 0) + merged
    n, s, d = zip(*merged)
    return n, s, d, transposed


def copy_call(e: Emit, src: str, dst: str, shape, sstr, dstr, soff: int = 0, doff: int = 0) -> str:
    n, s, d, transposed = plan_copy(shape, sstr, dstr)
    return (f"{e.call(strided_copy)}({src}.reshape(-1), {dst}.reshape(-1), {const(n)}, {const(s)}, {const(d)}, "
            f"{const(soff)}, {const(doff)}, {const(transposed)})")


def _gather(e: Emit, shape, sstr, soff: int = 0) -> list[str]:
    """out (contiguous, loop shape `shape`) = x gathered through strides sstr."""
    return [copy_call(e, e.args[0], e.outs[0], shape, sstr, contiguous_strides(shape), soff)]


# -- emit rules ---------------------------------------------------------------------------


@emits("reshape", alias=True)
def _emit_reshape(e: Emit) -> list[str]:
    return [f"{e.outs[0]} = {e.args[0]}.reshape({lit(e.node.outputs[0].shape)})"]


@emits("transpose")
def _emit_transpose(e: Emit) -> list[str]:
    """A float32 transpose of the unit-stride dim: transpose_f32 (squares in registers); any other, strided_copy."""
    perm, strides = e.node.attrs["perm"], contiguous_strides(e.node.inputs[0].shape)
    shape, sstr = e.node.outputs[0].shape, [strides[p] for p in perm]
    n, s, d, transposed = plan_copy(shape, sstr, contiguous_strides(shape))
    if transposed and e.node.inputs[0].dtype == e.node.outputs[0].dtype == "float32":
        return [f"{e.call(transpose_f32)}({e.args[0]}.reshape(-1), {e.outs[0]}.reshape(-1), {const(n)}, {const(s)}, "
                f"{const(d)}, 0, 0)"]
    return _gather(e, shape, sstr)


def _slice_plan(shape, index: list[slice]) -> tuple[list[int], int]:
    strides, offset, sstr = contiguous_strides(shape), 0, []
    for n, st, sl in zip(shape, strides, index):
        start, _, step = sl.indices(n)
        offset += start * st
        sstr.append(st * step)
    return sstr, offset


@emits("slice")
def _emit_slice(e: Emit) -> list[str]:
    a, shape = e.node.attrs, e.node.inputs[0].shape
    index = [slice(None)] * len(shape)
    for axis, start, end, step in zip(a["axes"], a["starts"], a["ends"], a["steps"]):
        index[normalize_axis(axis, len(shape))] = slice(start, end, step)
    sstr, offset = _slice_plan(shape, index)
    return _gather(e, e.node.outputs[0].shape, sstr, offset)


def _axis_view(shape, axis: int) -> tuple[int, int, int]:
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


@emits("split")
def _emit_split(e: Emit) -> list[str]:
    shape = e.node.inputs[0].shape
    outer, total, inner = _axis_view(shape, normalize_axis(e.node.attrs["dim"], len(shape)))
    lines, start = [], 0
    for out, size in zip(e.outs, e.node.attrs["sizes"]):
        lines.append(copy_call(e, e.args[0], out, (outer, size * inner), (total * inner, 1), (size * inner, 1),
                               start * inner))
        start += size
    return lines


def concat_parts(node: Node) -> list[int] | None:
    """The byte offset of each input inside a concat's output when that output is its inputs laid
    end to end (every dim before the axis is 1), so that producers may write there directly
    (codegen/memory_plan.py); None for any other node."""
    if node.op != "concat":
        return None
    shape = node.outputs[0].shape
    axis = normalize_axis(node.attrs["dim"], len(shape))
    if math.prod(shape[:axis]) != 1:
        return None
    parts, start = [], 0
    for v in node.inputs:
        parts.append(start)
        start += v.type.nbytes
    return parts


@emits("concat")
def _emit_concat(e: Emit) -> list[str]:
    """A copy per input, but for the inputs the memory plan had their producers write in place; one
    call for all of them (copy_runs) where the output and the inputs to copy all live in the arena."""
    out = e.node.outputs[0]
    axis = normalize_axis(e.node.attrs["dim"], len(out.shape))
    outer, total, inner = _axis_view(out.shape, axis)
    parts, start = [], 0  # (input index, element offset of its part in a row of the output, elements per row)
    for i, v in enumerate(e.node.inputs):
        size = v.shape[axis] * inner
        if i not in e.in_place:
            parts.append((i, start, size))
        start += size
    itemsize = np.dtype(out.dtype).itemsize
    if len(parts) > 1 and out in e.offsets and all(e.node.inputs[i] in e.offsets for i, _, _ in parts):
        runs = np.array([(e.offsets[e.node.inputs[i]] // itemsize, e.offsets[out] // itemsize + at, n)
                         for i, at, n in parts], np.int64)
        arena = f"view(arena, 0, np.{out.dtype}, ({e.arena_bytes // itemsize},))"
        return [f"{e.call(copy_runs)}({arena}, {e.constant('runs', runs)}, {outer}, {total * inner})"]
    return [copy_call(e, e.args[i], e.outs[0], (outer, n), (n, 1), (total * inner, 1), 0, at) for i, at, n in parts]


@emits("expand")
def _emit_expand(e: Emit) -> list[str]:
    out = e.node.outputs[0].shape
    x = (1,) * (len(out) - len(e.node.inputs[0].shape)) + e.node.inputs[0].shape
    strides = contiguous_strides(x)
    return _gather(e, out, [0 if n == 1 else s for n, s in zip(x, strides)])


@emits("tile")
def _emit_tile(e: Emit) -> list[str]:
    """tile = an expand over interleaved (repeat, dim) pairs: out[r0, i0, r1, i1, ...] = x[i0, i1, ...]."""
    repeats = e.node.attrs["repeats"]
    x = (1,) * (len(repeats) - len(e.node.inputs[0].shape)) + e.node.inputs[0].shape
    strides = contiguous_strides(x)
    shape = [v for r, n in zip(repeats, x) for v in (r, n)]
    sstr = [v for s in strides for v in (0, s)]
    return _gather(e, shape, sstr)


@emits("pixel_shuffle", "pixel_unshuffle")
def _emit_pixel_shuffle(e: Emit) -> list[str]:
    *batch, c, h, w = e.node.inputs[0].shape
    b = math.prod(batch)
    if e.node.op == "pixel_shuffle":
        r = e.node.attrs["upscale"]
        src = (b, c // (r * r), r, r, h, w)
        perm = (0, 1, 4, 2, 5, 3)  # (B, C, H, r, W, r)
    else:
        r = e.node.attrs["downscale"]
        src = (b, c, h // r, r, w // r, r)
        perm = (0, 1, 3, 5, 2, 4)  # (B, C, r, r, H, W)
    strides = contiguous_strides(src)
    return _gather(e, [src[p] for p in perm], [strides[p] for p in perm])


@emits("index")
def _emit_index(e: Emit) -> list[str]:
    """x[..., idx, ...] along one axis (embeddings, index_select, gathers of a bias table): take."""
    axes, x = e.node.attrs["axes"], e.node.inputs[0]
    if len(axes) != 1:
        raise CodegenUnsupportedError(f"indexing along {len(axes)} axes at once (the kernel takes one)")
    outer, n, inner = _axis_view(x.shape, axes[0])
    m = e.node.inputs[1].type.size
    index = f"{e.args[1]}.reshape(({m},))"
    if e.node.inputs[1].dtype != "int64":
        index = f"{e.args[1]}.reshape(({m},)).astype(np.int64)"
    return [f"{e.call(take)}({e.args[0]}.reshape({lit((outer, n, inner))}), {index}, "
            f"{e.outs[0]}.reshape({lit((outer, m, inner))}))"]
