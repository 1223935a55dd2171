"""Epilogues: what conv and linear kernels apply to a GEMM's result on its way out,
post(act(v + bias) + residual), one contiguous run at a time (`epilogue_run`).

Activations are passed to kernels as small int codes so one compiled kernel
serves every activation; `activate` is inlined into the caller's loop.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from codegen.kernels.common import u

ACTIVATION_CODES = {
    "none": 0, "relu": 1, "clamp": 2, "leaky_relu": 3, "silu": 4, "sigmoid": 5, "tanh": 6,
    "hardswish": 7, "hardsigmoid": 8, "gelu": 9, "gelu_tanh": 10, "elu": 11, "mish": 12,
}

_SQRT_HALF = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654


@numba.njit(inline="always", cache=True, nogil=True)
def activate(v, code, alpha, beta):
    """Apply activation `code` to the float32 scalar v (alpha/beta: its parameters)."""
    if code == 0:
        return v
    if code == 1:
        return v if v > 0 else np.float32(0.0)
    if code == 2:
        return np.float32(min(max(v, alpha), beta))
    if code == 3:
        return v if v >= 0 else np.float32(v * alpha)
    if code == 4:
        return np.float32(v / (1.0 + math.exp(-v)))
    if code == 5:
        return np.float32(1.0 / (1.0 + math.exp(-v)))
    if code == 6:
        return np.float32(math.tanh(v))
    if code == 7:
        return np.float32(v * min(max(v + 3.0, 0.0), 6.0) / 6.0)
    if code == 8:
        return np.float32(min(max(v + 3.0, 0.0), 6.0) / 6.0)
    if code == 9:
        return np.float32(0.5 * v * (1.0 + math.erf(v * _SQRT_HALF)))
    if code == 10:
        return np.float32(0.5 * v * (1.0 + math.tanh(_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v))))
    if code == 11:
        return v if v > 0 else np.float32(alpha * math.expm1(v))
    # 12: mish = x * tanh(softplus(x))
    sp = math.log1p(math.exp(-abs(v))) + max(v, 0.0)
    return np.float32(v * math.tanh(sp))


@numba.njit(inline="always", cache=True, nogil=True)
def _finish(dst, d, n, src, s, bias, res, act, alpha, beta, post, post_alpha, post_beta):
    a, b = np.float32(alpha), np.float32(beta)
    pa, pb = np.float32(post_alpha), np.float32(post_beta)
    bv = np.float32(bias)
    if act <= 1 and post <= 1:  # none/relu: a loop LLVM vectorises
        lo = np.float32(-np.inf if act == 0 else 0.0)
        top = np.float32(0.0 if post == 1 else -np.inf)
        if res is None:
            for i in range(n):
                dst[u(d + i)] = max(max(src[u(s + i)] + bv, lo), top)
        else:
            for i in range(n):
                dst[u(d + i)] = max(max(src[u(s + i)] + bv, lo) + res[u(d + i)], top)
    elif res is None:
        for i in range(n):
            dst[u(d + i)] = activate(activate(src[u(s + i)] + bv, act, a, b), post, pa, pb)
    else:
        for i in range(n):
            dst[u(d + i)] = activate(activate(src[u(s + i)] + bv, act, a, b) + res[u(d + i)], post, pa, pb)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def epilogue_run(dst, d, n, src, s, bias, res, act, alpha, beta, post, post_alpha, post_beta):
    """dst[d:d+n] = post(act(v + bias) + res[d:d+n]) over flat arrays, v = src[s:s+n] (or
    dst[d:d+n] itself when src is None); bias is a scalar, res None or indexed like dst."""
    if src is None:
        _finish(dst, d, n, dst, d, bias, res, act, alpha, beta, post, post_alpha, post_beta)
    else:
        _finish(dst, d, n, src, s, bias, res, act, alpha, beta, post, post_alpha, post_beta)
