"""Activation functions: elementwise, same shape and dtype out (prelu also takes a weight).

Reference implementations follow torch's formulas. Those with exp/log/erf work
in float64 and round once at the end, so large magnitudes neither overflow nor
lose the tail (sigmoid(-100), mish(90), gelu(-30) are exact to float32).
tanh, a plain math function, lives with the elementwise ops.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from ir.registry import FLOAT, STR, Trait, register
from ir.types import TensorType

_EW = [Trait.ELEMENTWISE]

# torch.nn.SELU's constants
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _same(types: list[TensorType], attrs: dict) -> TensorType:
    return types[0]


def _floating(types: list[TensorType], attrs: dict) -> TensorType:
    if not np.issubdtype(np.dtype(types[0].dtype), np.floating):
        raise ValueError(f"needs a floating-point input, got {types[0].dtype}")
    return types[0]


def _like(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.asarray(y, dtype=x.dtype)


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


@register("relu", ["x"], infer=_same, traits=_EW)
def relu(x):
    return _like(np.maximum(x, 0), x)


@register("leaky_relu", ["x"], {"negative_slope": FLOAT(0.01)}, infer=_floating, traits=_EW)
def leaky_relu(x, negative_slope):
    return _like(np.where(x > 0, x, x * negative_slope), x)


def _clamp_type(types: list[TensorType], attrs: dict) -> TensorType:
    if attrs["min"] is None and attrs["max"] is None:
        raise ValueError("clamp needs min, max or both")
    return types[0]


@register("clamp", ["x"], {"min": FLOAT(None, optional=True), "max": FLOAT(None, optional=True)},
          infer=_clamp_type, traits=_EW)
def clamp(x, min, max):  # noqa: A002 - torch's names
    """min(max(x, min), max): with min > max every element is max, as torch."""
    y = x if min is None else np.maximum(x, min)
    return _like(y if max is None else np.minimum(y, max), x)


@register("sigmoid", ["x"], infer=_floating, traits=_EW)
def sigmoid(x):
    return _like(special.expit(_f64(x)), x)


@register("silu", ["x"], infer=_floating, traits=_EW)
def silu(x):
    x64 = _f64(x)
    return _like(x64 * special.expit(x64), x)


@register("logsigmoid", ["x"], infer=_floating, traits=_EW)
def logsigmoid(x):
    return _like(-np.logaddexp(0, -_f64(x)), x)


@register("gelu", ["x"], {"approximate": STR("none")}, infer=_floating, traits=_EW)
def gelu(x, approximate):
    x64 = _f64(x)
    if approximate == "tanh":
        y = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    else:
        y = 0.5 * x64 * (1 + special.erf(x64 / np.sqrt(2)))
    return _like(y, x)


@register("hardswish", ["x"], infer=_floating, traits=_EW)
def hardswish(x):
    return _like(x * np.clip(x + 3, 0, 6) / 6, x)


@register("hardsigmoid", ["x"], infer=_floating, traits=_EW)
def hardsigmoid(x):
    return _like(np.clip(x + 3, 0, 6) / 6, x)


@register("mish", ["x"], infer=_floating, traits=_EW)
def mish(x):
    x64 = _f64(x)
    return _like(x64 * np.tanh(np.logaddexp(0, x64)), x)


@register("softplus", ["x"], {"beta": FLOAT(1.0), "threshold": FLOAT(20.0)}, infer=_floating, traits=_EW)
def softplus(x, beta, threshold):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (torch's cut-off)."""
    scaled = _f64(x) * beta
    return _like(np.where(scaled > threshold, x, np.logaddexp(0, scaled) / beta), x)


def _elu64(x: np.ndarray, alpha: float) -> np.ndarray:
    x64 = _f64(x)
    return np.where(x64 > 0, x64, alpha * np.expm1(np.minimum(x64, 0)))


@register("elu", ["x"], {"alpha": FLOAT(1.0)}, infer=_floating, traits=_EW)
def elu(x, alpha):
    return _like(_elu64(x, alpha), x)


@register("selu", ["x"], infer=_floating, traits=_EW)
def selu(x):
    return _like(SELU_SCALE * _elu64(x, SELU_ALPHA), x)


@register("celu", ["x"], {"alpha": FLOAT(1.0)}, infer=_floating, traits=_EW)
def celu(x, alpha):
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    x64 = _f64(x)
    return _like(np.where(x64 > 0, x64, alpha * np.expm1(np.minimum(x64, 0) / alpha)), x)


@register("softsign", ["x"], infer=_floating, traits=_EW)
def softsign(x):
    return _like(x / (1 + np.abs(x)), x)


@register("tanhshrink", ["x"], infer=_floating, traits=_EW)
def tanhshrink(x):
    return _like(x - np.tanh(x), x)


@register("hardshrink", ["x"], {"lambd": FLOAT(0.5)}, infer=_floating, traits=_EW)
def hardshrink(x, lambd):
    return _like(np.where(np.abs(x) > lambd, x, 0), x)


@register("softshrink", ["x"], {"lambd": FLOAT(0.5)}, infer=_floating, traits=_EW)
def softshrink(x, lambd):
    return _like(np.where(x > lambd, x - lambd, np.where(x < -lambd, x + lambd, 0)), x)


@register("threshold", ["x"], {"threshold": FLOAT(), "value": FLOAT()}, infer=_same, traits=_EW)
def threshold(x, threshold, value):
    return _like(np.where(x > threshold, x, value), x)


def _prelu_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types
    channels = x.shape[1] if x.rank >= 2 else 1
    if w.size not in (1, channels):
        raise ValueError(f"prelu weight has {w.size} elements; input {x.shape} has {channels} channels (dim 1)")
    return _floating(types, attrs)


@register("prelu", ["x", "weight"], infer=_prelu_type, traits=_EW)
def prelu(x, weight):
    """The weight scales negative inputs per channel (dim 1), or everywhere if it has one element."""
    w = weight.reshape(-1)
    if w.size > 1:
        w = w.reshape((w.size,) + (1,) * (x.ndim - 2))
    return _like(np.where(x >= 0, x, w * x), x)
