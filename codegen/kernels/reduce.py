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

import numba
import numpy as np

from codegen.kernels.common import PARALLEL_MIN_ELEMENTS
from codegen.kernels.tasks import run_tasks

BLOCK = 1024  # inner positions per task


@numba.njit(cache=True, nogil=True)
def _tasks(outer, inner):
    return outer * ((inner + BLOCK - 1) // BLOCK)


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"}, error_model="numpy")
def _sum_task(t, x, out, n, inner, mean, zero, prod):
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


@numba.njit(cache=True, nogil=True, error_model="numpy")
def reduce_sum(x, out, outer, n, inner, mean, zero, prod):
    """out[o, i] = sum (prod if `prod`; mean if `mean`) of x[o, :, i], accumulated from `zero` (x, out flat)."""
    tasks = _tasks(outer, inner)
    if tasks > 1 and outer * n * inner >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_sum_task, tasks, (x, out, n, inner, mean, zero, prod))
    else:
        for t in range(tasks):
            _sum_task(t, x, out, n, inner, mean, zero, prod)


@numba.njit(inline="always", cache=True, nogil=True)
def _better(v, best, is_max):
    """v replaces best: it is larger (smaller), or the first NaN."""
    if v != v:
        return best == best
    return v > best if is_max else v < best


@numba.njit(cache=True, nogil=True)
def _extreme_task(t, x, out, n, inner, is_max, arg):
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


@numba.njit(cache=True, nogil=True)
def reduce_extreme(x, out, outer, n, inner, is_max, arg):
    """out[o, i] = max (min) of x[o, :, i] (n >= 1), or its first index if `arg` (x, out flat)."""
    tasks = _tasks(outer, inner)
    if tasks > 1 and outer * n * inner >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_extreme_task, tasks, (x, out, n, inner, is_max, arg))
    else:
        for t in range(tasks):
            _extreme_task(t, x, out, n, inner, is_max, arg)
