"""Reductions: reduce_sum/mean/prod/max/min over any dims, argmax/argmin over one dim (or all).

The emit rule merges neighbouring dims of the same kind (reduced or kept), so most
reductions become (outer, n, inner): reduce the middle axis of a 3-D view. Each
task reduces a block of inner positions of one outer row at once, so the inner
loop runs along contiguous memory. A reduction whose reduced dims are not
neighbours (dims (0, 2) of a 3-D tensor) first gathers them last into a scratch
array (data.strided_copy), then reduces (outer, n, 1).

As the reference: float sums and means accumulate in float64 (`zero` is the
accumulator's typed zero), integer sums in int64, products in the output dtype;
max/min and argmax/argmin propagate NaN and take the first extremum.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from codegen.kernels.data import contiguous_strides, copy_call
from codegen.registry import Emit, const, const_args, emits
from ir.ops.common import normalize_axis
from ir.ops.reduce import reduce_axes

BLOCK = 1024  # inner positions per task
PARALLEL_MIN_ELEMENTS = 1 << 15


@numba.njit(cache=True, nogil=True)
def _tasks(outer, inner):
    return outer * ((inner + BLOCK - 1) // BLOCK)


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"}, error_model="numpy")
def _sum_task(x, out, t, n, inner, mean, zero, prod):
    # loops index views from 0: numba then drops its negative-index checks and they vectorize
    nb = (inner + BLOCK - 1) // BLOCK
    o, lo = t // nb, (t % nb) * BLOCK
    m = min(lo + BLOCK, inner) - lo
    base = o * n * inner + lo
    if inner == 1:
        xv = x[base:base + n]
        acc = zero
        if prod:
            for k in range(n):
                acc *= xv[k]
        else:
            for k in range(n):
                acc += xv[k]
        if mean:
            out[o] = acc / n
        else:
            out[o] = acc
        return
    acc_v = np.full(m, zero)
    for k in range(n):
        xv = x[base + k * inner:base + k * inner + m]
        if prod:
            for i in range(m):
                acc_v[i] *= xv[i]
        else:
            for i in range(m):
                acc_v[i] += xv[i]
    ov = out[o * inner + lo:o * inner + lo + m]
    for i in range(m):
        if mean:
            ov[i] = acc_v[i] / n
        else:
            ov[i] = acc_v[i]


@numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def reduce_sum(x, out, outer, n, inner, mean, zero, prod):
    """out[o, i] = sum (prod if `prod`; mean if `mean`) of x[o, :, i], accumulated from `zero` (x, out flat)."""
    xf, of = x, out
    tasks = _tasks(outer, inner)
    if tasks > 1 and outer * n * inner >= PARALLEL_MIN_ELEMENTS:
        for t in numba.prange(tasks):
            _sum_task(xf, of, t, n, inner, mean, zero, prod)
    else:
        for t in range(tasks):
            _sum_task(xf, of, t, n, inner, mean, zero, prod)


@numba.njit(inline="always", cache=True, nogil=True)
def _better(v, best, is_max):
    """v replaces best: it is larger (smaller), or the first NaN."""
    if v != v:
        return best == best
    return v > best if is_max else v < best


@numba.njit(cache=True, nogil=True)
def _extreme_task(x, out, t, n, inner, is_max, arg):
    nb = (inner + BLOCK - 1) // BLOCK
    o, lo = t // nb, (t % nb) * BLOCK
    m = min(lo + BLOCK, inner) - lo
    base = o * n * inner + lo
    best = x[base:base + m].copy()
    index = np.zeros(m, np.int64)
    for k in range(1, n):
        xv = x[base + k * inner:base + k * inner + m]
        for i in range(m):
            v = xv[i]
            if _better(v, best[i], is_max):
                best[i] = v
                index[i] = k
    ov = out[o * inner + lo:o * inner + lo + m]
    for i in range(m):
        if arg:
            ov[i] = index[i]
        else:
            ov[i] = best[i]


@numba.njit(cache=True, nogil=True, parallel=True)
def reduce_extreme(x, out, outer, n, inner, is_max, arg):
    """out[o, i] = max (min) of x[o, :, i] (n >= 1), or its first index if `arg` (x, out flat)."""
    xf, of = x, out
    tasks = _tasks(outer, inner)
    if tasks > 1 and outer * n * inner >= PARALLEL_MIN_ELEMENTS:
        for t in numba.prange(tasks):
            _extreme_task(xf, of, t, n, inner, is_max, arg)
    else:
        for t in range(tasks):
            _extreme_task(xf, of, t, n, inner, is_max, arg)


# -- emit rules ---------------------------------------------------------------------------------


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
    lines = [f"{scratch} = np.empty({math.prod(shape)}, np.{e.node.inputs[0].dtype})",
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
