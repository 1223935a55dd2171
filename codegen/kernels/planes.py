"""Phase planes: the zero-padded input of a direct convolution, split by the stride, so that
every tap of every output pixel lies at a fixed offset from the pixel's own flat index.

Plane (a, b) (a < sh, b < sw) of one channel holds the padded input's rows a, a + sh, ... and
columns b, b + sw, ..., hq rows of pitch wq. Tap (i, j) of the output pixel (y, x) then reads
plane (i*dh % sh, j*dw % sw) at row y + i*dh // sh, column x + j*dw // sw: at tap_offset(i, j)
from the flat index y * wq + x, whatever the stride, dilation or padding. A kernel loops over
flat indices, computing the wq - ow columns past each output row's end too and throwing them
away, with no bounds logic. The depthwise kernel sums its taps this way; conv2d_packed's
microkernel reads one flat row per (channel, tap) instead of an im2col matrix.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import SEQ, u
from codegen.kernels.vectors import copy_run, split_pairs


@numba.njit(inline="always", **SEQ)
def plane_pitch(ow, w, kw, sw, dw, pl):
    """wq: the planes' row pitch, every column an output reads and every image column."""
    return -(-max((ow - 1) * sw + (kw - 1) * dw + 1, pl + w) // sw)


@numba.njit(**SEQ)
def gather_planes(xf, x0, h, w, iy0, sh, sw, pl, p, p0, hq, wq):
    """Phase plane (a, b) of p, hq rows of pitch wq from p[p0 + (a*sw + b)*hq*wq], gets
    x[iy0 + r*sh + a, c*sw + b - pl] at (r, c) for the columns inside the image (the padding
    columns of p are never written: p starts zeroed), zeros for rows outside the image.

    One loop per common stride: a loop that branches on the stride per row ran 3x slower
    than the same copies alone (a 14 x 14 plane: 180 against 50 ns, AVX-512 EPYC)."""
    if sh == 1 and sw == 1:
        _gather_rows(xf, x0, h, w, iy0, pl, p, p0, hq, wq)
    elif sw == 2:
        _gather_split_rows(xf, x0, h, w, iy0, sh, pl, p, p0, hq, wq)
    else:
        _gather_any(xf, x0, h, w, iy0, sh, sw, pl, p, p0, hq, wq)


@numba.njit(inline="always", **SEQ)
def _phase_columns(b, sw, pl, w):
    """Column phase b of a row w columns wide with pl padding columns on its left, at stride sw: (its first
    input column c0, the plane column that one lands in, how many input columns it takes: c0, c0 + sw, ...)."""
    c0 = (b - pl) % sw
    return c0, (c0 + pl) // sw, (w - c0 + sw - 1) // sw


@numba.njit(**SEQ)
def zero_margins(p, p0, hq, wq, w, sh, sw, pl):
    """Zero what gather_planes leaves unwritten in the phase planes of one channel (sh * sw planes of hq rows
    of pitch wq from p[p0], of an input w columns wide, pl padding columns on its left): each row's columns
    left and right of the image's. A caller that zeroes these and gathers need not zero the planes whole."""
    plane = hq * wq
    for a in range(sh):
        for b in range(sw):
            _, first, count = _phase_columns(b, sw, pl, w)
            lo = min(first, wq)
            hi = max(lo, min(wq, lo + count))
            d = p0 + (a * sw + b) * plane
            for r in range(hq):
                for c in range(lo):
                    p[u(d + r * wq + c)] = 0
                for c in range(hi, wq):
                    p[u(d + r * wq + c)] = 0


@numba.njit(**SEQ)
def _gather_rows(xf, x0, h, w, iy0, pl, p, p0, hq, wq):
    """gather_planes for stride 1: one plane, the padded input itself."""
    for r in range(hq):
        iy, d = iy0 + r, p0 + r * wq + pl
        if iy >= 0 and iy < h:
            copy_run(p, d, xf, x0 + iy * w, w)
        else:
            for c in range(w):
                p[u(d + c)] = 0


@numba.njit(**SEQ)
def _gather_split_rows(xf, x0, h, w, iy0, sh, pl, p, p0, hq, wq):
    """gather_planes for column stride 2: one pass splits each row, x[2k] to phase pl % 2,
    x[2k + 1] to the other."""
    plane = hq * wq
    for r in range(hq):
        for a in range(sh):
            iy = iy0 + r * sh + a
            d = p0 + a * 2 * plane + r * wq
            e = d + pl % 2 * plane + pl // 2
            f = d + (1 - pl % 2) * plane + (pl + 1) // 2
            if iy >= 0 and iy < h:
                src = x0 + iy * w
                split_pairs(xf, src, w // 2, p, e, p, f)
                if w % 2:
                    p[u(e + w // 2)] = xf[u(src + w - 1)]
            else:
                for k in range((w + 1) // 2):
                    p[u(e + k)] = 0
                for k in range(w // 2):
                    p[u(f + k)] = 0


@numba.njit(**SEQ)
def _gather_any(xf, x0, h, w, iy0, sh, sw, pl, p, p0, hq, wq):
    """gather_planes for any stride: each phase of a row in one loop, every sw-th column, with no
    division per element (one per element: AlexNet's stride 4, 1.6 ns an element, 43 us a channel
    of a 28-row tile, a third of the conv)."""
    plane = hq * wq
    for r in range(hq):
        for a in range(sh):
            iy = iy0 + r * sh + a
            d = p0 + a * sw * plane + r * wq
            for b in range(sw):  # phase b: padded columns b, b + sw, ...: input columns c0, c0 + sw, ...
                c0, first, count = _phase_columns(b, sw, pl, w)
                e = d + b * plane + first
                if iy >= 0 and iy < h:
                    src = x0 + iy * w + c0
                    for k in range(count):
                        p[u(e + k)] = xf[u(src + k * sw)]
                else:
                    for k in range(count):
                        p[u(e + k)] = 0


@numba.njit(inline="always", **SEQ)
def tap_offset(i, j, sh, sw, dh, dw, hq, wq):
    """Where tap (i, j) of the pixel at flat index 0 lies in the phase planes."""
    a, b = i * dh, j * dw
    return ((a % sh * sw + b % sw) * hq + a // sh) * wq + b // sw


@numba.njit(**SEQ)
def tap_table(channels, kh, kw, sh, sw, dh, dw, hq, wq):
    """Where each reduction step (c, i, j) of a direct conv reads in the phase planes of `channels`
    channels (sh * sw planes of hq rows of pitch wq each), from an output pixel's flat index:
    entry (c * KH + i) * KW + j, int64."""
    taps = np.empty(channels * kh * kw, np.int64)
    for c in range(channels):
        for i in range(kh):
            for j in range(kw):
                taps[(c * kh + i) * kw + j] = c * sh * sw * hq * wq + tap_offset(i, j, sh, sw, dh, dw, hq, wq)
    return taps
