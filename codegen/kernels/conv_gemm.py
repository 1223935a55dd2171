"""Convolution as GEMM, one tile of the output at a time (every conv that is neither
depthwise nor Winograd's).

The output of each image and group is cut into tiles of pixels (whole output rows,
sized so a tile's im2col matrix stays in L2), times blocks of output channels when
there are too few tiles to keep every thread busy. Each task of one parallel loop
  1. copies its tile's input windows into a (C*KH*KW, pixels) matrix (im2col; a 1x1
     stride-1 conv reads its input block where it lies instead),
  2. multiplies its block of the weights by it in single-threaded BLAS, writing the
     product straight into its block of the output (common.gemm_blocks),
  3. applies the epilogue (bias, activation, residual) to that block in place.
So the im2col matrix never leaves the core that made it, and the product is touched
once more, while it is still in cache.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import SEQ, blocks, gemm_blocks, span, u
from codegen.kernels.epilogue import epilogue_run, residual_run
from codegen.kernels.tasks import run_tasks

TILE_BYTES = 1 << 19  # im2col matrix (or input block of a 1x1 conv) of one tile: about half of a core's L2
WHOLE_IMAGE_BYTES = 1 << 21  # an im2col matrix up to this size is one tile
MIN_BLOCK = 16  # output channels per block, at least
MIN_PIXELS = 128  # pixels per tile of a 1x1 conv, at least: narrower GEMMs lose efficiency


@numba.njit(**SEQ)
def im2col_rows(xf, x0, h, w, cg, cols, p, oy0, ow, sh, sw, pt, pl, dh, dw, kh, kw):
    """cols[(c*KH + i)*KW + j, y*OW + ox] = x[c, (oy0 + y)*sh - pt + i*dh, ox*sw - pl + j*dw]
    for the p // OW output rows from oy0 (cols may be wider than p: its other columns are
    left alone), 0 where that falls in the padding; channel c of the input starts at
    xf[x0 + c*H*W]."""
    ld = cols.shape[1]
    cf = cols.reshape(-1)
    for c in range(cg):
        for i in range(kh):
            for j in range(kw):
                off = j * dw - pl
                lo, hi = span(off, sw, w, ow)
                for y in range(p // ow):
                    iy = (oy0 + y) * sh - pt + i * dh
                    d = ((c * kh + i) * kw + j) * ld + y * ow
                    if iy < 0 or iy >= h:
                        for ox in range(ow):
                            cf[u(d + ox)] = 0
                        continue
                    s = x0 + (c * h + iy) * w + off
                    for ox in range(lo):
                        cf[u(d + ox)] = 0
                    if sw == 1:
                        for ox in range(lo, hi):
                            cf[u(d + ox)] = xf[u(s + ox)]
                    elif sw == 2:  # a constant stride: LLVM vectorises the gather
                        for ox in range(lo, hi):
                            cf[u(d + ox)] = xf[u(s + 2 * ox)]
                    else:
                        for ox in range(lo, hi):
                            cf[u(d + ox)] = xf[u(s + ox * sw)]
                    for ox in range(hi, ow):
                        cf[u(d + ox)] = 0


@numba.njit(**SEQ)
def conv_gemm(x, weight, bias, residual, out, sh, sw, pt, pl, dh, dw, groups,
              act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, weight) + bias) + residual); bias may be None, residual None or empty for none."""
    n_n, c_n, h, w = x.shape
    o_n, cg, kh, kw = weight.shape
    oh, ow = out.shape[2], out.shape[3]
    og, k, p_n = o_n // groups, cg * kh * kw, oh * ow
    pointwise = kh == 1 and kw == 1 and sh == 1 and sw == 1 and pt == 0 and pl == 0 and oh == h and ow == w
    if pointwise:  # tiles of any pixels: the GEMM reads the input where it lies
        tile = min(p_n, max(MIN_PIXELS, TILE_BYTES // (x.itemsize * (cg + og))))
    elif x.itemsize * k * p_n <= WHOLE_IMAGE_BYTES:  # small images: split output channels, which
        tile = p_n  # divide evenly (7 rows cut into tiles of 4 and 3 keep one thread idle 1/7 of the time)
    else:  # tiles of whole output rows, for im2col
        tile = max(1, min(oh, TILE_BYTES // (x.itemsize * k * ow))) * ow
    n_p = -(-p_n // tile)
    n_o, ob = blocks(n_n * groups * n_p, og, MIN_BLOCK)
    xf, wf, of = x.reshape(-1), weight.reshape(-1), out.reshape(-1)
    rf = residual_run(residual, out)
    run_tasks(_gemm_task, n_n * groups * n_p * n_o,
              (xf, wf, of, rf, bias, (c_n, h, w, o_n, oh, ow, groups, cg, kh, kw), (sh, sw, pt, pl, dh, dw),
               (tile, n_p, n_o, ob), pointwise, (act, post), (alpha, beta, post_alpha, post_beta)))


@numba.njit(**SEQ)
def _gemm_task(t, xf, wf, of, rf, bias, dims, window, split, pointwise, acts, params):
    """Task t of conv_gemm: one tile of pixels of one image and group, times one block of channels."""
    c_n, h, w, o_n, oh, ow, groups, cg, kh, kw = dims
    sh, sw, pt, pl, dh, dw = window
    tile, n_p, n_o, ob = split
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    og, k, p_n = o_n // groups, cg * kh * kw, oh * ow
    oi, pi = t % n_o, (t // n_o) % n_p
    g, n = (t // (n_o * n_p)) % groups, t // (n_o * n_p * groups)
    p0 = pi * tile
    p = min(tile, p_n - p0)
    o0 = g * og + oi * ob
    o1 = min(g * og + og, o0 + ob)
    x0 = (n * c_n + g * cg) * h * w
    c0 = (n * o_n + o0) * p_n + p0  # the block's tile of the output: rows of p pixels, p_n apart
    if pointwise:
        gemm_blocks(o1 - o0, p, k, wf, o0 * k, k, xf, x0 + p0, h * w, False, of, c0, p_n, False)
    else:
        cols = np.empty(k * p, xf.dtype)
        im2col_rows(xf, x0, h, w, cg, cols.reshape((k, p)), p, p0 // ow, ow, sh, sw, pt, pl, dh, dw, kh, kw)
        gemm_blocks(o1 - o0, p, k, wf, o0 * k, k, cols, 0, p, False, of, c0, p_n, False)
    for r in range(o1 - o0):  # the epilogue while the tile is still in cache
        d = c0 + r * p_n
        bv = 0.0 if bias is None else float(bias[o0 + r])  # epilogue_run's float64 bias: one signature
        epilogue_run(of, d, p, of, d, bv, rf, act, alpha, beta, post, post_alpha, post_beta)
