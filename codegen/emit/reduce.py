"""Emit rules of the reduce family: the forward's calls into codegen/kernels/reduce.py."""

from __future__ import annotations

import math

import numpy as np

from codegen.emit import Emit, const, const_args, emits
from codegen.emit.data import contiguous_strides, copy_call
from codegen.kernels.reduce import reduce_extreme, reduce_sum
from ir.ops.common import normalize_axis
from ir.ops.reduce import reduce_axes


def _groups(shape, axes) -> list[tuple[int, bool]]:
    """(size, reduced) of each run of neighbouring dims of one kind, size-1 dims dropped."""
    groups: list[tuple[int, bool]] = []
    for i, n in enumerate(shape):
        if n == 1:
            continue
        if groups and groups[-1][1] == (i in axes):
            groups[-1] = (groups[-1][0] * n, i in axes)
        else:
            groups.append((n, i in axes))
    return groups


def _view(e: Emit, axes) -> tuple[list[str], str, tuple[int, int, int]]:
    """(lines to prepare, array name, (outer, n, inner)) that reduce x over `axes` as a 3-D view."""
    shape = e.node.inputs[0].shape
    groups = _groups(shape, axes)
    if any(n == 0 for n, _ in groups):  # empty input: n = 0 if a reduced dim is empty
        n = math.prod(shape[a] for a in axes)
        return [], e.args[0], (math.prod(e.node.outputs[0].shape), n, 1)
    reduced = [k for k, (_, r) in enumerate(groups) if r]
    if not reduced:
        return [], e.args[0], (math.prod(shape), 1, 1)
    if reduced[-1] - reduced[0] == len(reduced) - 1:  # one run of reduced dims
        outer = math.prod(n for n, _ in groups[:reduced[0]])
        inner = math.prod(n for n, _ in groups[reduced[-1] + 1:])
        return [], e.args[0], (outer, math.prod(n for n, _ in groups) // (outer * inner), inner)
    # gather the kept dims first, the reduced ones last, into a scratch array
    perm = [i for i in range(len(shape)) if i not in axes] + list(axes)
    strides = contiguous_strides(shape)
    loop = [shape[p] for p in perm]
    scratch = f"{e.outs[0]}_gathered"
    kept = math.prod(shape[i] for i in range(len(shape)) if i not in axes)
    lines = [e.scratch(scratch, (math.prod(shape),), e.node.inputs[0].dtype),
             copy_call(e, e.args[0], scratch, loop, [strides[p] for p in perm], contiguous_strides(loop))]
    return lines, scratch, (kept, math.prod(shape) // kept, 1)


@emits("reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min")
def _emit_reduce(e: Emit) -> list[str]:
    x, out = e.node.inputs[0], e.node.outputs[0]
    lines, src, (outer, n, inner) = _view(e, reduce_axes(len(x.shape), e.node.attrs["dims"]))
    view = f"{src}.reshape(-1), {e.outs[0]}.reshape(-1), {const_args(outer, n, inner)}"
    if e.node.op in ("reduce_max", "reduce_min"):
        return lines + [f"{e.call(reduce_extreme)}({view}, {const(e.node.op == 'reduce_max')}, np.bool_(False))"]
    is_float = np.issubdtype(np.dtype(out.dtype), np.floating)
    if e.node.op == "reduce_prod":
        one = f"np.{out.dtype}(1)" if is_float else "np.int64(1)"
        return lines + [f"{e.call(reduce_sum)}({view}, np.bool_(False), {one}, np.bool_(True))"]
    zero = "np.float64(0)" if is_float else "np.int64(0)"
    return lines + [f"{e.call(reduce_sum)}({view}, {const(e.node.op == 'reduce_mean')}, {zero}, np.bool_(False))"]


@emits("argmax", "argmin")
def _emit_arg(e: Emit) -> list[str]:
    x, dim = e.node.inputs[0], e.node.attrs["dim"]
    if dim is None or len(x.shape) == 0:
        outer, n, inner = 1, x.type.size, 1
    else:
        axis = normalize_axis(dim, len(x.shape))
        outer, n, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
    return [f"{e.call(reduce_extreme)}({e.args[0]}.reshape(-1), {e.outs[0]}.reshape(-1), "
            f"{const_args(outer, n, inner)}, {const(e.node.op == 'argmax')}, np.bool_(True))"]
