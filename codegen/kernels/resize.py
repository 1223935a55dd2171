"""resize: nearest, nearest-exact and n-linear interpolation over 1 to 3 trailing dims;
resize_cubic: bicubic over the last two.

The emit rule views the input as (B, D, H, W) (missing spatial dims are size 1)
and passes each axis's coordinate scale as ir/ops/resize.py computes it
(`coordinate_scale`, float32). The kernel builds the source index (and weight)
tables with the same float32 arithmetic as that module's public helpers
(`nearest_source_index`, `linear_source_weights`), so indices match torch.

Linear mode interpolates one axis after the other in the input dtype, as the
reference does (depth, then height into a row buffer, then width), so results
agree to the last bit for finite inputs. Nearest mode copies a whole output row
when it repeats the previous one (every other row of a x2 upsample), and writes a
x2 row as pairs instead of gathering it.

Cubic mode takes its index and weight tables from the emit rule (ir/ops/resize.py's
cubic_source_weights, computed at compile time) and sums the four taps of each axis in
the reference's order, width first.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from codegen.kernels.common import PARALLEL_MIN_ELEMENTS
from codegen.kernels.tasks import run_tasks

MODE_CODES = {"nearest": 0, "nearest_exact": 1, "linear": 2}


@numba.njit(cache=True, nogil=True)
def nearest_table(in_size, out_size, scale, exact):
    """ATen's nearest_idx / nearest_exact_idx (scale: float32 coordinate scale)."""
    index = np.empty(out_size, np.int64)
    for d in range(out_size):
        if exact:
            src = math.floor(np.float32((d + 0.5) * np.float64(scale)))
        elif out_size == in_size:
            src = d
        elif out_size == 2 * in_size:
            src = d >> 1
        else:
            src = math.floor(np.float32(d) * scale)
        index[d] = min(src, in_size - 1)
    return index


@numba.njit(cache=True, nogil=True)
def linear_table(in_size, out_size, scale, align_corners):
    """ATen's compute_source_index_and_lambda: (index0, index1, lambda1) per output index."""
    i0, i1 = np.empty(out_size, np.int64), np.empty(out_size, np.int64)
    lam = np.zeros(out_size, np.float32)
    for d in range(out_size):
        if out_size == in_size:
            i0[d], i1[d] = d, d
            continue
        if align_corners:
            ratio = np.float32(in_size - 1) / np.float32(out_size - 1) if out_size > 1 else np.float32(0)
            real = ratio * np.float32(d)
        else:
            real = max(scale * (np.float32(d) + np.float32(0.5)) - np.float32(0.5), np.float32(0))
        k = min(math.floor(real), in_size - 1)
        i0[d] = k
        i1[d] = k + 1 if k < in_size - 1 else k
        lam[d] = min(max(real - np.float32(k), np.float32(0)), np.float32(1))
    return i0, i1, lam


@numba.njit(cache=True, nogil=True)
def _nearest_plane(p, x, out, td, th, tw, twice):
    """twice: tw[i] == i // 2 (a x2 upsample), copied as pairs instead of gathered.
    Rows are views indexed from 0: numba then drops its negative-index checks and the copies vectorize."""
    _, d_in, h_in, w_in = x.shape
    _, d_out, h_out, w_out = out.shape
    xf, of = x.reshape(-1), out.reshape(-1)
    for od in range(d_out):
        for oh in range(h_out):
            dst = ((p * d_out + od) * h_out + oh) * w_out
            orow = of[dst:dst + w_out]
            if oh > 0 and th[oh] == th[oh - 1]:
                prev = of[dst - w_out:dst]
                for ow in range(w_out):
                    orow[ow] = prev[ow]
                continue
            src = ((p * d_in + td[od]) * h_in + th[oh]) * w_in
            xrow = xf[src:src + w_in]
            if twice:
                for i in range(w_in):
                    v = xrow[i]
                    orow[2 * i] = v
                    orow[2 * i + 1] = v
            else:
                for ow in range(w_out):
                    orow[ow] = xrow[tw[ow]]


@numba.njit(inline="always", cache=True, nogil=True)
def _depth_row(xf, row, a, b, lam, n, same):
    """row = input row at offset a, interpolated towards the row at b (the next depth) by lam."""
    ra = xf[a:a + n]
    if same:
        for w in range(n):
            row[w] = ra[w]
    else:
        rb = xf[b:b + n]
        for w in range(n):
            row[w] = ra[w] + (rb[w] - ra[w]) * lam


@numba.njit(cache=True, nogil=True)
def _linear_plane(p, x, out, d0, d1, ld, h0, h1, lh, w0, w1, lw):
    _, d_in, h_in, w_in = x.shape
    _, d_out, h_out, w_out = out.shape
    xf, of = x.reshape(-1), out.reshape(-1)
    row0 = np.empty(w_in, x.dtype)
    row1 = np.empty(w_in, x.dtype)
    for od in range(d_out):
        a, b = (p * d_in + d0[od]) * h_in, (p * d_in + d1[od]) * h_in
        for oh in range(h_out):
            _depth_row(xf, row0, (a + h0[oh]) * w_in, (b + h0[oh]) * w_in, ld[od], w_in, d_in == d_out)
            if h_in != h_out:  # then height
                _depth_row(xf, row1, (a + h1[oh]) * w_in, (b + h1[oh]) * w_in, ld[od], w_in, d_in == d_out)
                lam = lh[oh]
                for w in range(w_in):
                    row0[w] = row0[w] + (row1[w] - row0[w]) * lam
            dst = ((p * d_out + od) * h_out + oh) * w_out
            orow = of[dst:dst + w_out]
            if w_in == w_out:  # then width
                for ow in range(w_out):
                    orow[ow] = row0[ow]
            else:
                for ow in range(w_out):
                    u, v = row0[w0[ow]], row0[w1[ow]]
                    orow[ow] = u + (v - u) * lw[ow]


@numba.njit(cache=True, nogil=True)
def resize(x, out, mode, align_corners, scales):
    """out (B, OD, OH, OW) = x (B, D, H, W) resized; mode 0 nearest, 1 nearest-exact, 2 linear;
    scales: float32 coordinate scale (input per output pixel) of D, H, W."""
    planes, d_in, h_in, w_in = x.shape
    _, d_out, h_out, w_out = out.shape
    parallel = planes > 1 and out.size >= PARALLEL_MIN_ELEMENTS
    if mode == 2:
        d0, d1, ld = linear_table(d_in, d_out, scales[0], align_corners)
        h0, h1, lh = linear_table(h_in, h_out, scales[1], align_corners)
        w0, w1, lw = linear_table(w_in, w_out, scales[2], align_corners)
        if parallel:
            run_tasks(_linear_plane, planes, (x, out, d0, d1, ld, h0, h1, lh, w0, w1, lw))
        else:
            for p in range(planes):
                _linear_plane(p, x, out, d0, d1, ld, h0, h1, lh, w0, w1, lw)
        return
    exact = mode == 1
    td = nearest_table(d_in, d_out, scales[0], exact)
    th = nearest_table(h_in, h_out, scales[1], exact)
    tw = nearest_table(w_in, w_out, scales[2], exact)
    twice = w_out == 2 * w_in
    for i in range(w_out):
        twice = twice and tw[i] == i // 2
    if parallel:
        run_tasks(_nearest_plane, planes, (x, out, td, th, tw, twice))
    else:
        for p in range(planes):
            _nearest_plane(p, x, out, td, th, tw, twice)


@numba.njit(cache=True, nogil=True)
def _cubic_plane(p, x, out, hi, hw, wi, ww):
    """One plane: each input row resized along W into a row buffer (taps summed in order), then the
    four buffered rows of each output row summed along H, as the reference does (innermost first)."""
    _, h_in, w_in = x.shape
    _, h_out, w_out = out.shape
    rows = np.empty((h_in, w_out), x.dtype)
    for h in range(h_in):
        xrow, row = x[p, h], rows[h]
        for ow in range(w_out):
            acc = xrow[wi[ow, 0]] * ww[ow, 0]
            acc += xrow[wi[ow, 1]] * ww[ow, 1]
            acc += xrow[wi[ow, 2]] * ww[ow, 2]
            row[ow] = acc + xrow[wi[ow, 3]] * ww[ow, 3]
    for oh in range(h_out):
        orow = out[p, oh]
        r0, r1, r2, r3 = rows[hi[oh, 0]], rows[hi[oh, 1]], rows[hi[oh, 2]], rows[hi[oh, 3]]
        w0, w1, w2, w3 = hw[oh, 0], hw[oh, 1], hw[oh, 2], hw[oh, 3]
        for ow in range(w_out):
            acc = r0[ow] * w0
            acc += r1[ow] * w1
            acc += r2[ow] * w2
            orow[ow] = acc + r3[ow] * w3


@numba.njit(cache=True, nogil=True)
def resize_cubic(x, out, hi, hw, wi, ww):
    """out (P, OH, OW) = x (P, H, W) resized by cubic convolution: output row oh sums input rows
    hi[oh, j] with weights hw[oh, j], output column ow input columns wi[ow, j] with weights ww[ow, j]
    (ir/ops/resize.py's cubic_source_weights, computed at compile time)."""
    planes = x.shape[0]
    if planes > 1 and out.size >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_cubic_plane, planes, (x, out, hi, hw, wi, ww))
    else:
        for p in range(planes):
            _cubic_plane(p, x, out, hi, hw, wi, ww)
