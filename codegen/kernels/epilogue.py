"""Scalar activations applied inside other kernels' loops (conv, linear epilogues).

Activations are passed to kernels as small int codes so one compiled kernel
serves every activation; `activate` is inlined into the caller's loop.
"""

from __future__ import annotations

import math

import numba
import numpy as np

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
