"""Activation functions: elementwise, same shape and dtype out (prelu also takes a weight).

Reference implementations follow torch's formulas. The rarer ones with exp/log/erf
work in float64 and round once at the end, so large magnitudes neither overflow
nor lose the tail (mish(90), gelu(-5) are exact to float32). sigmoid and silu,
hot in conv nets, stay in float32, where scipy's expit is within 1 ulp and already
saturates cleanly (sigmoid(-100) is the denormal 3.8e-44, torch flushes it to 0).
tanh, a plain math function, lives with the elementwise ops.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import special

from ir.op_registry import FLOAT, STR, Trait, register
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


def _activation(name: str, attrs: dict | None = None, infer=_floating, inputs: tuple[str, ...] = ("x",)):
    """Register an activation; inf and nan are ordinary results here, as in torch, so numpy's
    floating-point warnings are silenced."""

    def decorate(fn):
        @functools.wraps(fn)
        def quiet(*arrays, **values):
            with np.errstate(all="ignore"):
                return fn(*arrays, **values)

        register(name, list(inputs), attrs, infer=infer, traits=_EW)(quiet)
        return fn

    return decorate


def _like(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.asarray(y, dtype=x.dtype)


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


@_activation("relu", infer=_same)
def relu(x):
    return _like(np.maximum(x, 0), x)


@_activation("leaky_relu", {"negative_slope": FLOAT(0.01)})
def leaky_relu(x, negative_slope):
    return _like(np.where(x > 0, x, x * negative_slope), x)


def _clamp_type(types: list[TensorType], attrs: dict) -> TensorType:
    if attrs["min"] is None and attrs["max"] is None:
        raise ValueError("clamp needs min, max or both")
    return types[0]


@_activation("clamp", {"min": FLOAT(None, optional=True), "max": FLOAT(None, optional=True)}, infer=_clamp_type)
def clamp(x, min, max):  # noqa: A002 - torch's names
    """min(max(x, min), max): with min > max every element is max, as torch."""
    y = x if min is None else np.maximum(x, min)
    return _like(y if max is None else np.minimum(y, max), x)


@_activation("sigmoid")
def sigmoid(x):
    return _like(special.expit(x), x)


@_activation("silu")
def silu(x):
    return _like(x * special.expit(x), x)


@_activation("logsigmoid")
def logsigmoid(x):
    return _like(-np.logaddexp(0, -_f64(x)), x)


@_activation("gelu", {"approximate": STR("none")})
def gelu(x, approximate):
    x64 = _f64(x)
    if approximate == "tanh":
        y = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    else:
        y = 0.5 * x64 * (1 + special.erf(x64 / np.sqrt(2)))
    return _like(y, x)


@_activation("hardswish")
def hardswish(x):
    return _like(x * np.clip(x + 3, 0, 6) / 6, x)


@_activation("hardsigmoid")
def hardsigmoid(x):
    return _like(np.clip(x + 3, 0, 6) / 6, x)


@_activation("mish")
def mish(x):
    x64 = _f64(x)
    return _like(x64 * np.tanh(np.logaddexp(0, x64)), x)


@_activation("softplus", {"beta": FLOAT(1.0), "threshold": FLOAT(20.0)})
def softplus(x, beta, threshold):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (torch's cut-off)."""
    scaled = _f64(x) * beta
    return _like(np.where(scaled > threshold, x, np.logaddexp(0, scaled) / beta), x)


def _elu64(x: np.ndarray, alpha: float) -> np.ndarray:
    x64 = _f64(x)
    return np.where(x64 > 0, x64, alpha * np.expm1(np.minimum(x64, 0)))


@_activation("elu", {"alpha": FLOAT(1.0)})
def elu(x, alpha):
    return _like(_elu64(x, alpha), x)


@_activation("selu")
def selu(x):
    return _like(SELU_SCALE * _elu64(x, SELU_ALPHA), x)


@_activation("celu", {"alpha": FLOAT(1.0)})
def celu(x, alpha):
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    x64 = _f64(x)
    return _like(np.where(x64 > 0, x64, alpha * np.expm1(np.minimum(x64, 0) / alpha)), x)


@_activation("softsign")
def softsign(x):
    return _like(x / (1 + np.abs(x)), x)


@_activation("tanhshrink")
def tanhshrink(x):
    return _like(x - np.tanh(x), x)


@_activation("hardshrink", {"lambd": FLOAT(0.5)})
def hardshrink(x, lambd):
    return _like(np.where(np.abs(x) > lambd, x, 0), x)


@_activation("softshrink", {"lambd": FLOAT(0.5)})
def softshrink(x, lambd):
    return _like(np.where(x > lambd, x - lambd, np.where(x < -lambd, x + lambd, 0)), x)


@_activation("threshold", {"threshold": FLOAT(), "value": FLOAT()}, infer=_same)
def threshold(x, threshold, value):
    return _like(np.where(x > threshold, x, value), x)


def _prelu_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types
    channels = x.shape[1] if x.rank >= 2 else 1
    if w.size not in (1, channels):
        raise ValueError(f"prelu weight has {w.size} elements; input {x.shape} has {channels} channels (dim 1)")
    return _floating(types, attrs)


@_activation("prelu", inputs=("x", "weight"), infer=_prelu_type)
def prelu(x, weight):
    """The weight scales negative inputs per channel (dim 1), or everywhere if it has one element."""
    w = weight.reshape(-1)
    if w.size > 1:
        w = w.reshape((w.size,) + (1,) * (x.ndim - 2))
    return _like(np.where(x >= 0, x, w * x), x)
