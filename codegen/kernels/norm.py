"""Normalization (batch_norm, layer_norm, group_norm) and softmax / log_softmax.

Each kernel works on rows of contiguous memory: batch_norm on (n, c) planes,
layer_norm on the normalized trailing block, group_norm on each (n, group) block,
softmax on (outer, dim, inner) with the inner positions of a block side by side,
so inner loops run along memory and vectorize. Statistics accumulate in float64
(the reference computes in float32 with pairwise sums: float64 stays closer to
it than a float32 running sum); softmax's sum of exps, all in [0, 1], runs in the
input's dtype, in vector lanes. Rows run in parallel when the tensor is big.
Optional weight and bias are passed as None.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.core import types
from numba.extending import overload

from codegen.kernels.common import PARALLEL_MIN_ELEMENTS, u
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vectors import clamp_run, run_max, run_sum
from codegen.kernels.vmath import fast_exp_no_overflow

BLOCK = 256  # softmax over a non-last dim: inner positions per task
SHORT_ROW = 32  # softmax rows shorter than this: _softmax_short_rows
ROW_FLOATS = 4096  # layer_norm, and softmax over the last dim: elements per task, at least (whole rows)


@numba.njit(cache=True, nogil=True)
def batch_norm(x, mean, var, weight, bias, out, eps):
    """out = (x - mean) / sqrt(var + eps) * weight + bias per channel (dim 1), folded as torch's eval kernel."""
    scale = weight / np.sqrt(var + eps)
    channel_affine(x, scale, bias - mean * scale, -np.inf, out)


@numba.njit(cache=True, nogil=True)
def channel_affine(x, scale, shift, lo, out):
    """out = max(x * scale + shift, lo) per channel (dim 1) of an (n, c, rest) x: lo -inf for none,
    0 for a ReLU after (a conv's prologue, fused_affine_conv2d, where its kernel has no path for it)."""
    n, c = x.shape[0], x.shape[1]
    size = x.size // (n * c) if n * c else 0
    xf, of = x.reshape(-1), out.reshape(-1)
    bound = xf.dtype.type(lo)
    per = max(1, PARALLEL_MIN_ELEMENTS // max(size, 1))  # planes per task: 7 x 7 planes one a task cost 5x
    if n * c > per and x.size >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_affine_planes, -(-n * c // per), (xf, of, scale, shift, size, bound, per))
    else:
        _affine_planes(np.int64(0), xf, of, scale, shift, size, bound, n * c)  # not a literal (common.py)


@numba.njit(cache=True, nogil=True)
def _affine_planes(t, xf, of, scale, shift, size, lo, per):
    """Planes [t * per, (t + 1) * per) of channel_affine (as far as there are)."""
    c = scale.size
    for p in range(t * per, min((t + 1) * per, xf.size // max(size, 1))):
        sc, sf = scale[p % c], shift[p % c]
        for i in range(p * size, (p + 1) * size):
            of[u(i)] = max(xf[u(i)] * sc + sf, lo)


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})  # not inlined: callers lack the flag
def _moments_at(xf, b, n):
    """(mean, biased variance) of xf[b:b + n], two passes in float64 (vectorised: reassoc)."""
    s = 0.0
    for i in range(n):
        s += xf[u(b + i)]
    mean = s / n
    q = 0.0
    for i in range(n):
        d = xf[u(b + i)] - mean
        q += d * d
    return mean, q / n


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _layer_norm_rows(t, xf, of, weight, bias, eps, inner, per, rows):
    """Rows t * per .. (t + 1) * per - 1 of layer_norm: float64 moments, then one pass in x's dtype
    ((x - mean) * scale * weight + bias): a pass per term in float64 ran 2.5x slower on 64-wide rows."""
    for r in range(t * per, min(rows, (t + 1) * per)):
        b = r * inner
        m, var = _moments_at(xf, b, inner)
        mean, scale = _narrow(xf[b], m), _narrow(xf[b], 1.0 / math.sqrt(var + eps))
        if weight is None and bias is None:
            for i in range(inner):
                of[u(b + i)] = (xf[u(b + i)] - mean) * scale
        elif bias is None:
            for i in range(inner):
                of[u(b + i)] = (xf[u(b + i)] - mean) * scale * weight[u(i)]
        elif weight is None:
            for i in range(inner):
                of[u(b + i)] = (xf[u(b + i)] - mean) * scale + bias[u(i)]
        else:
            for i in range(inner):
                of[u(b + i)] = (xf[u(b + i)] - mean) * scale * weight[u(i)] + bias[u(i)]


@numba.njit(cache=True, nogil=True)
def layer_norm(x, weight, bias, out, eps, inner):
    """Normalize each block of `inner` elements of flat x; weight, bias: flat (inner,) arrays or None."""
    if x.size == 0:
        return
    rows = x.size // inner
    per = max(1, ROW_FLOATS // inner)  # whole rows per task, ROW_FLOATS elements or more
    tasks = -(-rows // per)
    if tasks > 1 and x.size >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_layer_norm_rows, tasks, (x, out, weight, bias, eps, inner, per, rows))
    else:
        _layer_norm_rows(np.int64(0), x, out, weight, bias, eps, inner, rows, rows)  # not a literal (common.py)


@numba.njit(cache=True, nogil=True)
def _group_norm_block(xv, ov, c0, per_channel, weight, bias, eps):
    m, var = _moments_at(xv, np.int64(0), xv.size)  # not a literal (common.py)
    r = 1.0 / math.sqrt(var + eps)
    for k in range(xv.size // per_channel):
        scale, shift = r, 0.0
        if weight is not None:
            scale = r * weight[c0 + k]
        if bias is not None:
            shift = float(bias[c0 + k])
        xc, oc = xv[k * per_channel:(k + 1) * per_channel], ov[k * per_channel:(k + 1) * per_channel]
        for i in range(per_channel):
            oc[i] = (xc[i] - m) * scale + shift


@numba.njit(cache=True, nogil=True)
def group_norm(x, weight, bias, out, groups, eps):
    """Normalize each (n, group) block of channels; weight, bias: (C,) arrays or None."""
    n, c = x.shape[0], x.shape[1]
    per_channel = x.size // (n * c) if n * c else 0
    xf, of = x.reshape(-1), out.reshape(-1)
    if n * groups > 1 and x.size >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_group_norm_task, n * groups, (xf, of, c, groups, per_channel, weight, bias, eps))
    else:
        for b in range(n * groups):
            _group_norm_task(b, xf, of, c, groups, per_channel, weight, bias, eps)


@numba.njit(cache=True, nogil=True)
def _group_norm_task(b, xf, of, c, groups, per_channel, weight, bias, eps):
    block = per_channel * (c // groups)
    _group_norm_block(xf[b * block:(b + 1) * block], of[b * block:(b + 1) * block],
                      (b % groups) * (c // groups), per_channel, weight, bias, eps)


# -- softmax ------------------------------------------------------------------------------------------


def _narrow(x, v):
    """v (float64) as x's float type, so float32 rows are scaled in float32 (twice the vector width)."""
    return v


@overload(_narrow, inline="always")
def _narrow_impl(x, v):
    if x == types.float32:
        return lambda x, v: np.float32(v)
    return lambda x, v: v


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _softmax_rows(t, xf, of, d, per, rows, log):
    """Softmax over rows t * per .. (t + 1) * per - 1 (of d elements each) of flat x. The sum runs in
    x's dtype, in vector lanes: a sum of exps in [0, 1] loses little, and float64 halved the width.
    Rows shorter than SHORT_ROW (attention over few tokens) take _softmax_short_rows."""
    if d < SHORT_ROW:
        _softmax_short_rows(xf, of, d, t * per, min(rows, (t + 1) * per), log)
        return
    for r in range(t * per, min(rows, (t + 1) * per)):
        b = r * d
        m = run_max(xf, b, d)  # NaN if the row has one: then every exp, the sum and the row are NaN
        s = _narrow(m, 0.0)  # (not xf[b] * 0: NaN when the row starts with -inf, a masked key)
        for i in range(d):
            e = fast_exp_no_overflow(xf[u(b + i)] - m)
            s += e
            of[u(b + i)] = e
        if log:
            shift = _narrow(m, m + math.log(s))
            for i in range(d):
                of[u(b + i)] = xf[u(b + i)] - shift
        else:
            scale = _narrow(m, 1.0 / s)
            for i in range(d):
                of[u(b + i)] *= scale


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _softmax_short_rows(xf, of, d, r0, r1, log):
    """_softmax_rows for rows r0 .. r1 - 1 shorter than SHORT_ROW: LLVM vectorises a loop over one row's
    elements only from 32 of them, so each row's x - max and sum go through vector runs (clamp_run,
    run_sum) and the exps run as one loop over all the rows' elements. 9248 floats in rows of 17 (ViT-mini's
    attention) 25.8 -> 22.4 us, of 7 49 -> 35, of 31 25.8 -> 17.8 (one thread, in-process A/B, Zen 3 AVX2)."""
    b0, b1 = r0 * d, r1 * d
    m = np.empty(r1 - r0, xf.dtype)
    ninf, inf = _narrow(xf[b0], -np.inf), _narrow(xf[b0], np.inf)
    for r in range(r0, r1):
        m[r - r0] = run_max(xf, r * d, d)  # NaN if the row has one: then every exp, the sum and the row are NaN
        clamp_run(of, r * d, xf, r * d, d, -m[r - r0], ninf, inf)
    for i in range(b0, b1):
        of[u(i)] = fast_exp_no_overflow(of[u(i)])
    for r in range(r0, r1):
        b = r * d
        s = run_sum(of, b, d)
        if log:
            clamp_run(of, b, xf, b, d, -_narrow(m[r - r0], m[r - r0] + math.log(s)), ninf, inf)
        else:
            scale = _narrow(m[r - r0], 1.0 / s)
            for i in range(d):
                of[u(b + i)] *= scale


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _softmax_block(t, xf, of, d, inner, log):
    """Softmax over dim of the (outer, dim, inner) view, for one block of inner positions."""
    nb = (inner + BLOCK - 1) // BLOCK
    o, lo = t // nb, (t % nb) * BLOCK
    k = min(lo + BLOCK, inner) - lo
    base = o * d * inner + lo
    m = xf[base:base + k].copy()
    for j in range(1, d):
        xv = xf[base + j * inner:base + j * inner + k]
        for i in range(k):
            m[i] = max(m[i], xv[i])
    s = np.zeros(k, np.float64)
    for j in range(d):
        xv, ov = xf[base + j * inner:base + j * inner + k], of[base + j * inner:base + j * inner + k]
        for i in range(k):
            e = fast_exp_no_overflow(xv[i] - m[i])
            s[i] += e
            ov[i] = e
    for i in range(k):
        s[i] = math.log(s[i]) if log else 1.0 / s[i]
    for j in range(d):
        xv, ov = xf[base + j * inner:base + j * inner + k], of[base + j * inner:base + j * inner + k]
        if log:
            for i in range(k):
                ov[i] = xv[i] - m[i] - s[i]
        else:
            for i in range(k):
                ov[i] *= s[i]


@numba.njit(cache=True, nogil=True)
def softmax(x, out, outer, d, inner, log):
    """Softmax (log-softmax if `log`) over the middle dim of the (outer, d, inner) view of flat x."""
    if x.size == 0:
        return
    parallel = x.size >= PARALLEL_MIN_ELEMENTS
    if inner == 1:  # tasks of whole rows, ROW_FLOATS elements or more each
        per = max(1, ROW_FLOATS // max(1, d))
        tasks = -(-outer // per)
        if parallel and tasks > 1:
            run_tasks(_softmax_rows, tasks, (x, out, d, per, outer, log))
        else:
            _softmax_rows(np.int64(0), x, out, d, outer, outer, log)  # not a literal (common.py)
        return
    tasks = outer * ((inner + BLOCK - 1) // BLOCK)
    if parallel and tasks > 1:
        run_tasks(_softmax_block, tasks, (x, out, d, inner, log))
    else:
        for t in range(tasks):
            _softmax_block(t, x, out, d, inner, log)
