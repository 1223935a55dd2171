"""Epilogues: what conv and linear kernels apply to a GEMM's result on its way out,
post(act(v + bias) + residual), one contiguous run at a time (`epilogue_run`).

Activations are passed to kernels as small int codes so one compiled kernel
serves every activation; a run branches on the code once and loops (`_activate_run`),
so each loop vectorises, transcendental ones included (vmath.py).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from codegen.kernels.common import u
from codegen.kernels.vmath import fast_exp, fast_gelu, fast_gelu_tanh, fast_sigmoid, fast_tanh

ACTIVATION_CODES = {
    "none": 0, "relu": 1, "clamp": 2, "leaky_relu": 3, "silu": 4, "sigmoid": 5, "tanh": 6,
    "hardswish": 7, "hardsigmoid": 8, "gelu": 9, "gelu_tanh": 10, "elu": 11, "mish": 12,
}

_F = np.float32
_ZERO, _HALF, _ONE, _THREE, _SIX = _F(0.0), _F(0.5), _F(1.0), _F(3.0), _F(6.0)
_ELU_SERIES = _F(1e-2)  # below this |v|, expm1(v) = v + v^2/2 + v^3/6 (exp(v) - 1 would cancel)


@numba.njit(inline="always", cache=True, nogil=True)
def activate(v, code, alpha, beta):
    """Apply activation `code` to the scalar v (alpha/beta: its parameters; float32 constants, so
    float32 stays float32). Transcendentals come from vmath, which vectorises."""
    if code == 0:
        return v
    if code == 1:
        return max(v, _ZERO)
    if code == 2:
        return min(max(v, alpha), beta)
    if code == 3:
        return v if v >= 0 else v * alpha
    if code == 4:
        return v * fast_sigmoid(v)
    if code == 5:
        return fast_sigmoid(v)
    if code == 6:
        return fast_tanh(v)
    if code == 7:
        return v * min(max(v + _THREE, _ZERO), _SIX) / _SIX
    if code == 8:
        return min(max(v + _THREE, _ZERO), _SIX) / _SIX
    if code == 9:
        return fast_gelu(v)
    if code == 10:
        return fast_gelu_tanh(v)
    if code == 11:
        expm1 = fast_exp(v) - _ONE if v < -_ELU_SERIES else v + v * v * (_HALF + v / _SIX)
        return v if v > 0 else alpha * expm1
    # 12: mish = x * tanh(softplus(x)), rare: exact libm calls
    sp = math.log1p(math.exp(-abs(v))) + max(v, 0.0)
    return v * math.tanh(sp)


@numba.njit(inline="always", cache=True, nogil=True)
def _activate_run(dst, d, n, src, s, bias, code, a, b):
    """dst[d + i] = activate(src[s + i] + bias) for i < n: one loop per activation, so the branch
    on `code` is taken once per run and each loop vectorises."""
    if code == 0:
        for i in range(n):
            dst[u(d + i)] = src[u(s + i)] + bias
    elif code == 1:
        for i in range(n):
            dst[u(d + i)] = max(src[u(s + i)] + bias, _ZERO)
    elif code == 2:
        for i in range(n):
            dst[u(d + i)] = min(max(src[u(s + i)] + bias, a), b)
    elif code == 4:
        for i in range(n):
            v = src[u(s + i)] + bias
            dst[u(d + i)] = v * fast_sigmoid(v)
    elif code == 5:
        for i in range(n):
            dst[u(d + i)] = fast_sigmoid(src[u(s + i)] + bias)
    elif code == 9:
        for i in range(n):
            dst[u(d + i)] = fast_gelu(src[u(s + i)] + bias)
    else:
        for i in range(n):
            dst[u(d + i)] = activate(src[u(s + i)] + bias, code, a, b)


@numba.njit(inline="always", cache=True, nogil=True)
def _finish(dst, d, n, src, s, bias, res, act, alpha, beta, post, post_alpha, post_beta):
    typed = dst.dtype.type  # parameters in the output's precision: float32 stays float32, float64 exact
    a, b, bv = typed(alpha), typed(beta), typed(bias)
    if act <= 1 and post <= 1:  # none/relu, the most common: one pass
        lo = typed(-np.inf if act == 0 else 0.0)
        top = typed(0.0 if post == 1 else -np.inf)
        if res is None:
            for i in range(n):
                dst[u(d + i)] = max(max(src[u(s + i)] + bv, lo), top)
        else:
            for i in range(n):
                dst[u(d + i)] = max(max(src[u(s + i)] + bv, lo) + res[u(d + i)], top)
        return
    _activate_run(dst, d, n, src, s, bv, act, a, b)  # then, over the run still in L1:
    if res is not None:
        for i in range(n):
            dst[u(d + i)] += res[u(d + i)]
    if post != 0:
        _activate_run(dst, d, n, dst, d, _ZERO, post, typed(post_alpha), typed(post_beta))


@numba.njit(cache=True, nogil=True, error_model="numpy")
def epilogue_run(dst, d, n, src, s, bias, res, act, alpha, beta, post, post_alpha, post_beta):
    """dst[d:d+n] = post(act(v + bias) + res[d:d+n]) over flat arrays, v = src[s:s+n] (or
    dst[d:d+n] itself when src is None); bias is a scalar, res None or indexed like dst."""
    if src is None:
        _finish(dst, d, n, dst, d, bias, res, act, alpha, beta, post, post_alpha, post_beta)
    else:
        _finish(dst, d, n, src, s, bias, res, act, alpha, beta, post, post_alpha, post_beta)
