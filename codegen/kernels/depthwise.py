"""Depthwise convolution (groups == input channels, MobileNet's 3x3 blocks): direct loops.

Output channel o reads input channel o // (O / C) only, so there is no GEMM to hand to
BLAS; each task of one parallel loop over (image, channel) accumulates the taps along
whole output rows and applies the epilogue (bias, activation, residual) per row.
"""

from __future__ import annotations

import numba
from numba import prange

from codegen.kernels.common import PAR, span, u
from codegen.kernels.epilogue import epilogue_run


@numba.njit(**PAR)
def conv_depthwise(x, weight, bias, residual, out, sh, sw, pt, pl, dh, dw,
                   act, alpha, beta, post, post_alpha, post_beta):
    """groups == C: output channel o reads input channel o // (O / C). Direct loops over taps,
    the inner one along an output row; epilogue fused per row."""
    n_n, c_n, h, w = x.shape
    o_n, _, kh, kw = weight.shape
    oh, ow = out.shape[2], out.shape[3]
    mult = o_n // c_n
    xf, wf, of = x.reshape(-1), weight.reshape(-1), out.reshape(-1)
    rf = of if residual is None else residual.reshape(-1)
    for t in prange(n_n * o_n):
        o = t % o_n
        x0 = (t // o_n * c_n + o // mult) * h * w
        bv = 0.0 if bias is None else bias[o]
        for oy in range(oh):
            d = (t * oh + oy) * ow
            for ox in range(ow):
                of[u(d + ox)] = 0
            for i in range(kh):
                iy = oy * sh - pt + i * dh
                if iy < 0 or iy >= h:
                    continue
                for j in range(kw):
                    wv, off = wf[u((o * kh + i) * kw + j)], j * dw - pl
                    lo, hi = span(off, sw, w, ow)
                    s = x0 + iy * w + off
                    if sw == 1:
                        for ox in range(lo, hi):
                            of[u(d + ox)] += wv * xf[u(s + ox)]
                    else:
                        for ox in range(lo, hi):
                            of[u(d + ox)] += wv * xf[u(s + ox * sw)]
            if residual is None:
                epilogue_run(of, d, ow, None, 0, bv, None, act, alpha, beta, post, post_alpha, post_beta)
            else:
                epilogue_run(of, d, ow, None, 0, bv, rf, act, alpha, beta, post, post_alpha, post_beta)
