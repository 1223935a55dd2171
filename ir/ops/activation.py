"""Activation functions: elementwise, one input, same shape and dtype out.

Reference implementations follow torch's formulas; they compute in the input's
dtype except where float64 intermediates avoid overflow noise.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from ir.ops.common import same_as_first
from ir.registry import FLOAT, STR, Trait, register

_EW = [Trait.ELEMENTWISE]


def _cast(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=like.dtype)


@register("relu", ["x"], infer=same_as_first, traits=_EW)
def relu(x):
    return np.maximum(x, 0).astype(x.dtype, copy=False)


@register("leaky_relu", ["x"], {"negative_slope": FLOAT(0.01)}, infer=same_as_first, traits=_EW)
def leaky_relu(x, negative_slope):
    return _cast(np.where(x >= 0, x, x * negative_slope), x)


@register("clamp", ["x"], {"min": FLOAT(None, optional=True), "max": FLOAT(None, optional=True)},
          infer=same_as_first, traits=_EW)
def clamp(x, min, max):
    return _cast(np.clip(x, min, max), x)


@register("sigmoid", ["x"], infer=same_as_first, traits=_EW)
def sigmoid(x):
    return _cast(special.expit(x), x)


@register("silu", ["x"], infer=same_as_first, traits=_EW)
def silu(x):
    return _cast(x * special.expit(x), x)


@register("tanh", ["x"], infer=same_as_first, traits=_EW)
def tanh(x):
    return np.tanh(x)


@register("gelu", ["x"], {"approximate": STR("none")}, infer=same_as_first, traits=_EW)
def gelu(x, approximate):
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    else:
        y = 0.5 * x64 * (1 + special.erf(x64 / np.sqrt(2)))
    return _cast(y, x)


@register("hardswish", ["x"], infer=same_as_first, traits=_EW)
def hardswish(x):
    return _cast(x * np.clip(x + 3, 0, 6) / 6, x)


@register("hardsigmoid", ["x"], infer=same_as_first, traits=_EW)
def hardsigmoid(x):
    return _cast(np.clip(x / 6 + 0.5, 0, 1), x)


@register("mish", ["x"], infer=same_as_first, traits=_EW)
def mish(x):
    x64 = x.astype(np.float64)
    return _cast(x64 * np.tanh(np.logaddexp(0, x64)), x)


@register("elu", ["x"], {"alpha": FLOAT(1.0)}, infer=same_as_first, traits=_EW)
def elu(x, alpha):
    x64 = x.astype(np.float64)
    return _cast(np.where(x64 > 0, x64, alpha * np.expm1(np.minimum(x64, 0))), x)
