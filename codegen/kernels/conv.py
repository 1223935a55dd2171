"""Convolutions (conv2d, fused_conv2d, conv_transpose2d) and explicit padding (pad), NCHW.

conv2d is one of four kernels, each applying the epilogue of ir/ops/fused.py (bias,
activation, residual, post-activation) as it writes its output:
- Winograd F(2x2, 3x3) (winograd.py) for 3x3 stride-1 convs with enough channels and
  pixels, chosen at compile time by the emit rule (`uses_winograd`);
- depthwise (groups == input channels): direct loops (depthwise.py), one kernel for each way
  they run, chosen at compile time by the emit rule (`depthwise_path`);
- float32 weights known at compile time (`conv2d_packed`): im2col + our own microkernel
  on weights packed once (conv_packed.py);
- everything else (float64, weights computed by the model): im2col + OpenBLAS one
  output tile at a time (conv_gemm.py).
The kernels pad with zeros as they read; for padding_mode reflect/replicate/circular the
forward pads the input into a scratch first (pad5), so that no conv kernel carries (and
compiles) the padding code. conv_transpose2d is
one GEMM per (image, group, block of output channels), then a scatter-add.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import PARALLEL_MIN_ELEMENTS, SEQ, blocks, gemm, span, u
from codegen.kernels.conv_channels import conv1x1_by_channels, conv2d_by_channels  # noqa: F401 - emitted from here
from codegen.kernels.conv_gemm import conv_gemm
from codegen.kernels.conv_packed import (  # noqa: F401 - emitted from here
    conv1x1_packed,
    conv1x1_packed_prologue,
    conv2d_packed,
    is_pointwise,
)
from codegen.kernels.tasks import run_tasks

# conv padding_mode or pad mode -> kernel code
PAD_CODES = {"zeros": 0, "constant": 0, "reflect": 1, "replicate": 2, "circular": 3}


# -- padding ---------------------------------------------------------------------------------

@numba.njit(inline="always", **SEQ)
def _source(j, n, mode):
    """The index in [0, n) that padded position j reads, or -1 where the constant goes."""
    if j >= 0 and j < n:
        return j
    if mode == 0:
        return -1
    if mode == 1:  # reflect (pads are shorter than n)
        return -j if j < 0 else 2 * (n - 1) - j
    if mode == 2:  # replicate
        return 0 if j < 0 else n - 1
    return j % n  # circular


@numba.njit(**SEQ)
def pad5(x, out, before, crop, kept, mode, value):
    """Pad the last four dims of x (L, A, B, C, D) into out. Along each dim, out index i
    reads the cropped input at i - before (mapped into [0, kept) by mode), which is x
    index + crop (negative pads crop)."""
    rows = out.shape[0] * out.shape[1] * out.shape[2] * out.shape[3]
    run_tasks(_pad_row, rows, (x, out, before, crop, kept, mode, value))


@numba.njit(**SEQ)
def _pad_row(r, x, out, before, crop, kept, mode, value):
    """Row r (flat over out's first four dims) of pad5."""
    _, a_n, b_n, c_n, d_n = out.shape
    gd, kd = before[3], kept[3]
    c = r % c_n
    b = (r // c_n) % b_n
    a = (r // (c_n * b_n)) % a_n
    lead = r // (c_n * b_n * a_n)
    dst = out[lead, a, b, c]
    sa = _source(a - before[0], kept[0], mode)
    sb = _source(b - before[1], kept[1], mode)
    sc = _source(c - before[2], kept[2], mode)
    if sa < 0 or sb < 0 or sc < 0:
        for d in range(d_n):
            dst[d] = value
        return
    src = x[lead, sa + crop[0], sb + crop[1], sc + crop[2]]
    for d in range(gd, gd + kd):
        dst[d] = src[d - gd + crop[3]]
    for d in range(gd):
        s = _source(d - gd, kd, mode)
        dst[d] = value if s < 0 else src[s + crop[3]]
    for d in range(gd + kd, d_n):
        s = _source(d - gd, kd, mode)
        dst[d] = value if s < 0 else src[s + crop[3]]


# -- conv2d ------------------------------------------------------------------------------------

@numba.njit(**SEQ)
def conv2d(x, weight, bias, residual, out, stride, padding, dilation, groups,
           act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, weight) + bias) + residual); bias may be None, residual None or empty
    for none. padding: (top, left, bottom, right) zeros (other modes are padded by the forward first).
    im2col and BLAS, for the convs no other kernel takes (weights the model computes, float64 but for
    depthwise convs, which run on depthwise.py's kernels whatever their weights)."""
    (sh, sw), (dh, dw) = stride, dilation
    conv_gemm(x, weight, bias, residual, out, sh, sw, padding[0], padding[1], dh, dw, groups,
              act, alpha, beta, post, post_alpha, post_beta)


# -- conv_transpose2d ----------------------------------------------------------------------------

@numba.njit(**SEQ)
def _col2im(cols, of, d0, bias, o0, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw, w_in):
    """Output channels o0.. at of[d0 + o*OH*OW] = bias + the scatter-add of every tap:
    cols[(o*KH + i)*KW + j, iy*W + ix] lands at (iy*sh - pt + i*dh, ix*sw - pl + j*dw)."""
    p_in = cols.shape[1]
    cf = cols.reshape(-1)
    for o in range(cols.shape[0] // (kh * kw)):
        y = d0 + o * oh * ow
        bv = 0.0 if bias is None else bias[o0 + o]
        for k in range(oh * ow):
            of[u(y + k)] = bv
        for i in range(kh):
            for j in range(kw):
                src = ((o * kh + i) * kw + j) * p_in
                off = j * dw - pl
                lo, hi = span(off, sw, ow, w_in)
                for iy in range(p_in // w_in):
                    oy = iy * sh - pt + i * dh
                    if oy < 0 or oy >= oh:
                        continue
                    s, d = src + iy * w_in, y + oy * ow + off
                    for ix in range(lo, hi):
                        of[u(d + ix * sw)] += cf[u(s + ix)]



@numba.njit(**SEQ)
def interleave_taps(taps, out, kh, kw):
    """out[n, o, y*KH + i, x*KW + j] = taps[n, (o*KH + i)*KW + j, y, x]: a transposed conv whose
    kernel is its stride, from its 1x1 conv's products (codegen/emit/conv.py), each output row from
    KW rows of taps; two taps a row (2x2 upsampling) in one loop of paired stores. Tasks of planes."""
    n_n, c_n, h, w = taps.shape
    planes = n_n * c_n // (kh * kw)
    tf, of = taps.reshape(-1), out.reshape(-1)
    if taps.size >= PARALLEL_MIN_ELEMENTS and planes > 1:
        run_tasks(_interleave_plane, planes, (tf, of, h, w, kh, kw))
    else:
        for p in range(planes):
            _interleave_plane(p, tf, of, h, w, kh, kw)


@numba.njit(**SEQ)
def _interleave_plane(p, tf, of, h, w, kh, kw):
    """Output plane p of interleave_taps."""
    for y in range(h):
        for i in range(kh):
            d = ((p * h + y) * kh + i) * w * kw
            s = ((p * kh + i) * kw * h + y) * w  # tap (i, 0)'s row y; tap (i, j) is j planes further
            if kw == 2:
                s1 = s + h * w
                for x in range(w):
                    of[u(d + 2 * x)] = tf[u(s + x)]
                    of[u(d + 2 * x + 1)] = tf[u(s1 + x)]
            else:
                for j in range(kw):
                    for x in range(w):
                        of[u(d + x * kw + j)] = tf[u(s + j * h * w + x)]


@numba.njit(**SEQ)
def conv_transpose2d(x, wt, bias, out, kernel, stride, padding, dilation):
    """out = conv_transpose2d(x, weight) + bias (bias may be None); wt = transpose_weight(weight).
    Each task takes one image, group and block of output channels: one GEMM gives every
    (tap, input pixel) product of its channels, then a scatter-add writes them."""
    n_n, c_n, h, w = x.shape
    groups = wt.shape[0]
    og = out.shape[1] // groups
    n_o, ob = blocks(n_n * groups, og, 4)
    run_tasks(_transpose_task, n_n * groups * n_o,
              (x.reshape(-1), wt, bias, out.reshape(-1), (c_n, h, w), out.shape, groups, n_o, ob,
               kernel, stride, padding, dilation))


@numba.njit(**SEQ)
def _transpose_task(t, xf, wt, bias, of, in_dims, out_shape, groups, n_o, ob, kernel, stride, padding, dilation):
    """Task t of conv_transpose2d: one image, group and block of output channels."""
    c_n, h, w = in_dims
    cg = wt.shape[2]
    kh, kw, sh, sw = kernel[0], kernel[1], stride[0], stride[1]
    pt, pl, dh, dw = padding[0], padding[1], dilation[0], dilation[1]
    o_n, oh, ow = out_shape[1], out_shape[2], out_shape[3]
    og = o_n // groups
    oi, g, n = t % n_o, (t // n_o) % groups, t // (n_o * groups)
    o0 = oi * ob
    o1 = min(og, o0 + ob)
    x0 = (n * c_n + g * cg) * h * w
    cols = np.empty(((o1 - o0) * kh * kw, h * w), xf.dtype)
    gemm(wt[g, o0 * kh * kw:o1 * kh * kw], xf[x0:x0 + cg * h * w].reshape((cg, h * w)), cols)
    _col2im(cols, of, (n * o_n + g * og + o0) * oh * ow, bias, g * og + o0, oh, ow, kh, kw, sh, sw, pt, pl,
            dh, dw, w)


# -- emit rules ----------------------------------------------------------------------------------
