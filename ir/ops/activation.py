"""Activation functions: elementwise, same shape and dtype out (prelu also takes a weight).

Each is one declaration: attributes, shape rule, reference (the decorated function,
following torch's formulas) and the scalar form codegen generates fused loops and
conv/linear epilogues from (`epilogue=True`: fuse-conv-epilogue may fold it into a
conv or linear; its float attributes become the epilogue's alpha and beta). The rarer ones with exp/log/erf
work in float64 and round once at the end, so large magnitudes neither overflow
nor lose the tail (mish(90), gelu(-5) are exact to float32). sigmoid and silu,
hot in conv nets, stay in float32, where scipy's expit is within 1 ulp and already
saturates cleanly (sigmoid(-100) is the denormal 3.8e-44, torch flushes it to 0).
tanh, a plain math function, lives with the elementwise ops.
"""

from __future__ import annotations

import functools

import numpy as np

from ir.op_registry import FLOAT, STR, ScalarForm, Trait, register
from ir.ops.common import broadcast_shapes, scipy_special
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


def _activation(name: str, scalar: ScalarForm, attrs: dict | None = None, infer=_floating,
                inputs: tuple[str, ...] = ("x",), epilogue: bool = False):
    """Register an activation; inf and nan are ordinary results here, as in torch, so numpy's
    floating-point warnings are silenced."""

    def decorate(fn):
        @functools.wraps(fn)
        def quiet(*arrays, **values):
            with np.errstate(all="ignore"):
                return fn(*arrays, **values)

        traits = _EW + [Trait.EPILOGUE] if epilogue else _EW
        register(name, list(inputs), attrs, infer=infer, traits=traits, scalar=scalar)(quiet)
        return fn

    return decorate


# x * g(x) with g(-inf) = 0 is 0 at -inf, not IEEE's -inf * 0 = nan: such activations multiply by
# x clamped to the finite range (float32's largest magnitude, which leaves float64 results alike)
FINITE = 3.4028234663852886e+38
_FLOOR = "max({0}, {T}(-3.4028234663852886e+38))"  # the scalar forms' x clamped from below
_CLAMP = "min(max({0}, {T}(-3.4028234663852886e+38)), {T}(3.4028234663852886e+38))"


def _floor(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, -FINITE)


def _finite(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -FINITE, FINITE)


def _like(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.asarray(y, dtype=x.dtype)


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


@_activation("relu", "max({0}, {T}(0))", infer=_same, epilogue=True)
def relu(x):
    return _like(np.maximum(x, 0), x)


@_activation("leaky_relu", "({0} if {0} >= 0 else {0} * {negative_slope})", {"negative_slope": FLOAT(0.01)},
             epilogue=True)
def leaky_relu(x, negative_slope):
    return _like(np.where(x > 0, x, x * negative_slope), x)


@_activation("clamp", "min(max({0}, {min}), {max})", {"min": FLOAT(-np.inf), "max": FLOAT(np.inf)}, infer=_same,
             epilogue=True)
def clamp(x, min, max):  # noqa: A002 - torch's names
    """min(max(x, min), max): with min > max every element is max, as torch; a missing bound is infinite."""
    return _like(np.minimum(np.maximum(x, min), max), x)


@_activation("sigmoid", "fast_sigmoid({0})", epilogue=True)
def sigmoid(x):
    return _like(scipy_special().expit(x), x)


@_activation("silu", "fast_silu({0})", epilogue=True)
def silu(x):
    return _like(_floor(x) * scipy_special().expit(x), x)


@_activation("logsigmoid", "(-np.logaddexp({T}(0.0), -{0}))")
def logsigmoid(x):
    return _like(-np.logaddexp(0, -_f64(x)), x)


def _gelu_scalar(operands: list[str], attrs: dict, dtype: str) -> str:
    x = _FLOOR.format(operands[0], T=dtype)
    return f"fast_gelu_tanh({x})" if attrs["approximate"] == "tanh" else f"fast_gelu({x})"


@_activation("gelu", _gelu_scalar, {"approximate": STR("none", choices=("none", "tanh"))}, epilogue=True)
def gelu(x, approximate):
    x64 = _floor(_f64(x))
    if approximate == "tanh":
        y = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    else:
        y = 0.5 * x64 * (1 + scipy_special().erf(x64 / np.sqrt(2)))
    return _like(y, x)


@_activation("hardswish", f"({_FLOOR} * min(max({{0}} + {{T}}(3.0), {{T}}(0.0)), {{T}}(6.0)) / {{T}}(6.0))",
             epilogue=True)
def hardswish(x):
    return _like(_floor(x) * np.clip(x + 3, 0, 6) / 6, x)


@_activation("hardsigmoid", "(min(max({0} + {T}(3.0), {T}(0.0)), {T}(6.0)) / {T}(6.0))", epilogue=True)
def hardsigmoid(x):
    return _like(np.clip(x + 3, 0, 6) / 6, x)


@_activation("mish", f"({_FLOOR} * math.tanh(np.logaddexp({{T}}(0.0), {{0}})))", epilogue=True)
def mish(x):
    x64 = _f64(x)
    return _like(_floor(x64) * np.tanh(np.logaddexp(0, x64)), x)


@_activation("softplus", "({0} if {0} * {beta} > {threshold} else np.logaddexp({T}(0.0), {0} * {beta}) / {beta})",
             {"beta": FLOAT(1.0), "threshold": FLOAT(20.0)})
def softplus(x, beta, threshold):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (torch's cut-off)."""
    scaled = _f64(x) * beta
    return _like(np.where(scaled > threshold, x, np.logaddexp(0, scaled) / beta), x)


def _elu64(x: np.ndarray, alpha: float) -> np.ndarray:
    x64 = _f64(x)
    return np.where(x64 > 0, x64, alpha * np.expm1(np.minimum(x64, 0)))


@_activation("elu", "({0} if {0} > 0 else {alpha} * math.expm1({0}))", {"alpha": FLOAT(1.0)}, epilogue=True)
def elu(x, alpha):
    return _like(_elu64(x, alpha), x)


@_activation("selu", f"({{T}}({SELU_SCALE!r}) * ({{0}} if {{0}} > 0 else {{T}}({SELU_ALPHA!r}) * math.expm1({{0}})))")
def selu(x):
    return _like(SELU_SCALE * _elu64(x, SELU_ALPHA), x)


@_activation("celu", "({0} if {0} > 0 else {alpha} * math.expm1({0} / {alpha}))", {"alpha": FLOAT(1.0)})
def celu(x, alpha):
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    x64 = _f64(x)
    return _like(np.where(x64 > 0, x64, alpha * np.expm1(np.minimum(x64, 0) / alpha)), x)


@_activation("softsign", f"({_CLAMP} / ({{T}}(1.0) + abs({_CLAMP})))")
def softsign(x):
    """x / (1 + |x|), which is +-1 at +-inf (not inf / inf)."""
    c = _finite(x)
    return _like(c / (1 + np.abs(c)), x)


@_activation("tanhshrink", "({0} - math.tanh({0}))")
def tanhshrink(x):
    return _like(x - np.tanh(x), x)


@_activation("hardshrink", "({0} if abs({0}) > {lambd} else {T}(0.0))", {"lambd": FLOAT(0.5)})
def hardshrink(x, lambd):
    return _like(np.where(np.abs(x) > lambd, x, 0), x)


@_activation("softshrink", "({0} - {lambd} if {0} > {lambd} else ({0} + {lambd} if {0} < -{lambd} else {T}(0.0)))",
             {"lambd": FLOAT(0.5)})
def softshrink(x, lambd):
    return _like(np.where(x > lambd, x - lambd, np.where(x < -lambd, x + lambd, 0)), x)


@_activation("threshold", "({0} if {0} > {threshold} else {value})", {"threshold": FLOAT(), "value": FLOAT()},
             infer=_same)
def threshold(x, threshold, value):
    return _like(np.where(x > threshold, x, value), x)


def _prelu_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types
    try:
        shape = broadcast_shapes(x.shape, w.shape)
    except ValueError:
        shape = None
    if shape != x.shape:
        raise ValueError(f"prelu weight {w.shape} does not broadcast to the input {x.shape}")
    return _floating(types, attrs)


@_activation("prelu", "({0} if {0} >= 0 else {1} * {0})", inputs=("x", "weight"), infer=_prelu_type)
def prelu(x, weight):
    """Negative inputs scaled by the weight, which broadcasts numpy-style: torch's per-channel
    weight (C,) along dim 1 arrives shaped (C, 1, ..., 1) (compiler/lowering/activation.py)."""
    return _like(np.where(x >= 0, x, weight * x), x)
