"""Depthwise convolution (groups == input channels, MobileNet's 3x3 blocks): direct loops.

Output channel o reads input channel o // (O / C) only, so there is no GEMM to hand to
BLAS. The work is cut into tasks of one (image, channel, block of output rows), shared
out over the threads; each thread has one scratch, and for each task it
  1. copies the input rows of its block into the scratch, zero-padded and split into
     stride_h * stride_w phase planes: plane (a, b) holds the padded input's rows
     a, a + sh, ... and columns b, b + sw, ... Every tap (i, j) of output pixel (y, x)
     then reads plane (i*dh % sh, j*dw % sw) at row y + i*dh // sh, column x + j*dw // sw:
     at a fixed offset from the pixel's own flat index y * WQ + x in the planes' row pitch
     WQ, whatever the stride, dilation or padding;
  2. sums the taps in one flat loop over those flat indices, all output rows of the block
     at once (the WQ - OW columns past each row's end are computed and thrown away): no
     bounds logic, long enough for LLVM to vectorise even 7-wide rows. A 3x3 kernel keeps
     its 9 weights and offsets in registers and sums each pixel's taps at once, a Kx5
     kernel one row of taps at a time; other kernels add one tap at a time;
  3. applies the epilogue (bias, activation) to the whole block at once, a whole number
     of vectors, and copies the rows out (a residual, rare here, is added row by row).
The blocks are sized so the scratch stays in L1.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import SEQ, blocks, num_threads, u
from codegen.kernels.epilogue import epilogue_run, residual_run
from codegen.kernels.tasks import run_tasks

# a*b + c may compile to one fused multiply-add (the only fast-math flag: no reassociation)
FMA = {**SEQ, "fastmath": {"contract"}}
SCRATCH_FLOATS = 6144  # phase planes plus sums of one block: 24 KiB in float32, within L1
MIN_ROWS = 4  # output rows per block, at least, when cutting rows only to share out the work
VEC = 16  # the flat loop runs a whole number of float32 vectors (AVX-512: 16, AVX2: 2 x 8): no scalar tail


@numba.njit(**SEQ)
def _gather(xf, x0, h, w, iy0, sh, sw, pl, p, hq, wq):
    """Phase plane (a, b) of p, hq rows of pitch wq from p[(a*sw + b)*hq*wq], gets
    x[iy0 + r*sh + a, c*sw + b - pl] at (r, c) for the columns inside the image (the padding
    columns of p are never written: p starts zeroed), zeros for rows outside the image."""
    plane = hq * wq
    for r in range(hq):
        for a in range(sh):
            iy = iy0 + r * sh + a
            valid = iy >= 0 and iy < h
            src, d = x0 + iy * w, a * sw * plane + r * wq
            if sw == 1:
                if valid:
                    for c in range(w):
                        p[u(d + pl + c)] = xf[u(src + c)]
                else:
                    for c in range(w):
                        p[u(d + pl + c)] = 0
            elif sw == 2:  # one pass splits the row: x[2k] to phase pl % 2, x[2k + 1] to the other
                e = d + pl % 2 * plane + pl // 2
                f = d + (1 - pl % 2) * plane + (pl + 1) // 2
                if valid:
                    for k in range(w // 2):
                        p[u(e + k)] = xf[u(src + 2 * k)]
                        p[u(f + k)] = xf[u(src + 2 * k + 1)]
                    if w % 2:
                        p[u(e + w // 2)] = xf[u(src + w - 1)]
                else:
                    for k in range((w + 1) // 2):
                        p[u(e + k)] = 0
                    for k in range(w // 2):
                        p[u(f + k)] = 0
            else:
                for c in range(w):
                    p[u(d + (c + pl) % sw * plane + (c + pl) // sw)] = xf[u(src + c)] if valid else 0


@numba.njit(inline="always", **SEQ)
def _offset(i, j, sh, sw, dh, dw, hq, wq):
    """Where tap (i, j) of the pixel at flat index 0 lies in the phase planes."""
    a, b = i * dh, j * dw
    return ((a % sh * sw + b % sw) * hq + a // sh) * wq + b // sw


@numba.njit(**FMA)
def _sum3x3(p, wf, k0, acc, n, sh, sw, dh, dw, hq, wq):
    """acc[q] = the sum of the 9 taps of flat pixel q, for q < n; kernel at wf[k0]."""
    w00, w01, w02 = wf[k0], wf[k0 + 1], wf[k0 + 2]
    w10, w11, w12 = wf[k0 + 3], wf[k0 + 4], wf[k0 + 5]
    w20, w21, w22 = wf[k0 + 6], wf[k0 + 7], wf[k0 + 8]
    o00, o01, o02 = (_offset(0, 0, sh, sw, dh, dw, hq, wq), _offset(0, 1, sh, sw, dh, dw, hq, wq),
                     _offset(0, 2, sh, sw, dh, dw, hq, wq))
    o10, o11, o12 = (_offset(1, 0, sh, sw, dh, dw, hq, wq), _offset(1, 1, sh, sw, dh, dw, hq, wq),
                     _offset(1, 2, sh, sw, dh, dw, hq, wq))
    o20, o21, o22 = (_offset(2, 0, sh, sw, dh, dw, hq, wq), _offset(2, 1, sh, sw, dh, dw, hq, wq),
                     _offset(2, 2, sh, sw, dh, dw, hq, wq))
    for q in range(n):
        acc[u(q)] = ((w00 * p[u(q + o00)] + w01 * p[u(q + o01)] + w02 * p[u(q + o02)])
                     + (w10 * p[u(q + o10)] + w11 * p[u(q + o11)] + w12 * p[u(q + o12)])
                     + (w20 * p[u(q + o20)] + w21 * p[u(q + o21)] + w22 * p[u(q + o22)]))


@numba.njit(**FMA)
def _sum_rows5(p, wf, k0, kh, acc, n, sh, sw, dh, dw, hq, wq):
    """_sum3x3 for a KH x 5 kernel (EfficientNet's 5x5): one pass per kernel row, its 5 weights
    and offsets in registers."""
    for i in range(kh):
        k = k0 + 5 * i
        w0, w1, w2, w3, w4 = wf[k], wf[k + 1], wf[k + 2], wf[k + 3], wf[k + 4]
        o0, o1, o2 = (_offset(i, 0, sh, sw, dh, dw, hq, wq), _offset(i, 1, sh, sw, dh, dw, hq, wq),
                      _offset(i, 2, sh, sw, dh, dw, hq, wq))
        o3, o4 = _offset(i, 3, sh, sw, dh, dw, hq, wq), _offset(i, 4, sh, sw, dh, dw, hq, wq)
        if i == 0:
            for q in range(n):
                acc[u(q)] = ((w0 * p[u(q + o0)] + w1 * p[u(q + o1)]) + (w2 * p[u(q + o2)] + w3 * p[u(q + o3)])
                             + w4 * p[u(q + o4)])
        else:
            for q in range(n):
                acc[u(q)] += ((w0 * p[u(q + o0)] + w1 * p[u(q + o1)]) + (w2 * p[u(q + o2)] + w3 * p[u(q + o3)])
                              + w4 * p[u(q + o4)])


@numba.njit(**FMA)
def _sum_taps(p, wf, k0, kh, kw, acc, n, sh, sw, dh, dw, hq, wq):
    """_sum3x3 for any kernel size, one tap at a time into acc."""
    for q in range(n):
        acc[u(q)] = 0
    for i in range(kh):
        for j in range(kw):
            wv, o = wf[k0 + i * kw + j], _offset(i, j, sh, sw, dh, dw, hq, wq)
            for q in range(n):
                acc[u(q)] += wv * p[u(q + o)]


@numba.njit(**SEQ)
def conv_depthwise(x, weight, bias, residual, out, sh, sw, pt, pl, dh, dw,
                   act, alpha, beta, post, post_alpha, post_beta):
    """groups == C: output channel o reads input channel o // (O / C). See the module docstring."""
    n_n, c_n, h, w = x.shape
    o_n, _, kh, kw = weight.shape
    oh, ow = out.shape[2], out.shape[3]
    mult = o_n // c_n
    xf, wf, of = x.reshape(-1), weight.reshape(-1), out.reshape(-1)
    # phase plane pitch: every column an output reads, and every image column
    wq = -(-max((ow - 1) * sw + (kw - 1) * dw + 1, pl + w) // sw)
    reach = (kh - 1) * dh // sh  # phase rows the kernel reaches below an output row
    n_b, rows = blocks(n_n * o_n, oh, MIN_ROWS)
    rows = max(1, min(rows, SCRATCH_FLOATS // (wq * (sh * sw + 1)) - reach))
    n_b = -(-oh // rows)
    hq = rows + reach
    # ReLU6 (clamp) and relu are a min/max as the rows are written; other epilogues run per row
    typed = of.dtype.type
    rf = residual_run(residual, out)
    clamp = act <= 2 and post == 0 and rf.size == 0
    vmin = typed(-np.inf if act == 0 else (0.0 if act == 1 else alpha))
    vmax = typed(np.inf if act <= 1 else beta)
    threads = num_threads()
    run_tasks(_depthwise_share, threads,
              (threads, xf, wf, of, rf, bias, (n_n, c_n, h, w, o_n, oh, ow, mult, kh, kw),
               (sh, sw, pt, pl, dh, dw), (n_b, rows, hq, wq), clamp, vmin, vmax,
               (act, post), (alpha, beta, post_alpha, post_beta)))


@numba.njit(**SEQ)
def _depthwise_share(th, threads, xf, wf, of, rf, bias, dims, window, split, clamp, vmin, vmax, acts, params):
    """Thread th's share of conv_depthwise's (image, channel, block of rows) tasks, with scratch of its own."""
    n_n, c_n, h, w, o_n, oh, ow, mult, kh, kw = dims
    sh, sw, pt, pl, dh, dw = window
    n_b, rows, hq, wq = split
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    typed = of.dtype.type
    tasks = n_n * o_n * n_b
    # the flat loop reads up to a row and a vector past the last plane
    p = np.zeros(sh * sw * hq * wq + wq + VEC, xf.dtype)
    acc = np.empty(-(-rows * wq // VEC) * VEC, xf.dtype)
    for t in range(tasks * th // threads, tasks * (th + 1) // threads):
        job, oy0 = t // n_b, t % n_b * rows
        o, nr = job % o_n, min(rows, oh - oy0)
        k0 = o * kh * kw
        _gather(xf, (job // o_n * c_n + o // mult) * h * w, h, w, oy0 * sh - pt, sh, sw, pl, p, hq, wq)
        n = -(-nr * wq // VEC) * VEC
        if kh == 3 and kw == 3:
            _sum3x3(p, wf, k0, acc, n, sh, sw, dh, dw, hq, wq)
        elif kw == 5:
            _sum_rows5(p, wf, k0, kh, acc, n, sh, sw, dh, dw, hq, wq)
        else:
            _sum_taps(p, wf, k0, kh, kw, acc, n, sh, sw, dh, dw, hq, wq)
        bv = typed(0.0 if bias is None else bias[o])
        if not clamp and rf.size == 0:  # the epilogue over the whole block at once, a whole
            # number of vectors (the columns past each row's end too): no scalar tail per row
            epilogue_run(acc, 0, n, acc, 0, float(bv), acc[:0], act, alpha, beta, post, post_alpha, post_beta)
        for r in range(nr):
            d = (job * oh + oy0 + r) * ow
            if clamp:
                for ox in range(ow):
                    of[u(d + ox)] = min(max(acc[u(r * wq + ox)] + bv, vmin), vmax)
            elif rf.size == 0:
                for ox in range(ow):
                    of[u(d + ox)] = acc[u(r * wq + ox)]
            else:
                epilogue_run(of, d, ow, acc, r * wq, float(bv), rf, act, alpha, beta,
                             post, post_alpha, post_beta)
