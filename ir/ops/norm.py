"""Normalization (batch_norm, layer_norm, group_norm) and softmax / log_softmax.

batch_norm is inference-only: it applies running statistics, as torch does in
eval mode. layer_norm and group_norm compute their statistics from the input
(biased variance, two passes for accuracy). Softmax subtracts the maximum first
so large inputs do not overflow exp.
"""

from __future__ import annotations

import numpy as np

from ir.op_registry import FLOAT, INT, INTS, register
from ir.ops.common import normalize_axis
from ir.types import TensorType


def _check_float(op: str, t: TensorType) -> None:
    if not np.issubdtype(np.dtype(t.dtype), np.floating):
        raise ValueError(f"{op} expects a floating-point input, got {t}")


def _check_params(op: str, params: list[TensorType], names: tuple[str, ...], shape: tuple[int, ...]) -> None:
    for name, t in zip(names, params, strict=False):  # optional params may be absent
        if t.shape != shape:
            raise ValueError(f"{op}: {name} has shape {t.shape}, expected {shape}")


def _standardize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) over `axes`, in x's dtype."""
    mean = x.mean(axis=axes, keepdims=True, dtype=x.dtype)
    centered = x - mean
    var = np.mean(np.square(centered), axis=axes, keepdims=True, dtype=x.dtype)
    return centered / np.sqrt(var + np.asarray(eps, x.dtype))


# -- batch_norm -----------------------------------------------------------------------------


def _batch_norm_type(types: list[TensorType], attrs: dict) -> TensorType:
    x = types[0]
    _check_float("batch_norm", x)
    if x.rank < 2:
        raise ValueError(f"batch_norm expects an (N, C, ...) input, got {x}")
    _check_params("batch_norm", types[1:], ("running_mean", "running_var", "weight", "bias"), (x.shape[1],))
    return x


@register("batch_norm", ["x", "running_mean", "running_var", "weight", "bias"], {"eps": FLOAT(1e-5)},
          infer=_batch_norm_type)
def batch_norm(x, running_mean, running_var, weight, bias, *, eps):
    # as torch's eval kernel: fold the statistics into one scale and shift per channel
    scale = weight / np.sqrt(running_var + np.asarray(eps, running_var.dtype))
    shift = bias - running_mean * scale
    channel = (1, -1) + (1,) * (x.ndim - 2)
    return (x * scale.reshape(channel) + shift.reshape(channel)).astype(x.dtype, copy=False)


# -- layer_norm -----------------------------------------------------------------------------


def _layer_norm_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, shape = types[0], attrs["normalized_shape"]
    _check_float("layer_norm", x)
    if not shape or len(shape) > x.rank or x.shape[x.rank - len(shape):] != shape:
        raise ValueError(f"layer_norm: normalized_shape {shape} does not match the trailing dims of {x}")
    _check_params("layer_norm", types[1:], ("weight", "bias"), shape)
    return x


@register("layer_norm", ["x", "weight?", "bias?"], {"normalized_shape": INTS(), "eps": FLOAT(1e-5)},
          infer=_layer_norm_type)
def layer_norm(x, weight=None, bias=None, *, normalized_shape, eps):
    y = _standardize(x, tuple(range(x.ndim - len(normalized_shape), x.ndim)), eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype, copy=False)


# -- group_norm -----------------------------------------------------------------------------


def _group_norm_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, groups = types[0], attrs["groups"]
    _check_float("group_norm", x)
    if x.rank < 2:
        raise ValueError(f"group_norm expects an (N, C, ...) input, got {x}")
    if groups < 1 or x.shape[1] % groups:
        raise ValueError(f"group_norm: {x.shape[1]} channels do not split into {groups} groups")
    _check_params("group_norm", types[1:], ("weight", "bias"), (x.shape[1],))
    return x


@register("group_norm", ["x", "weight?", "bias?"], {"groups": INT(), "eps": FLOAT(1e-5)}, infer=_group_norm_type)
def group_norm(x, weight=None, bias=None, *, groups, eps):
    grouped = x.reshape(x.shape[0], groups, -1)
    y = _standardize(grouped, (2,), eps).reshape(x.shape)
    channel = (1, -1) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(channel)
    if bias is not None:
        y = y + bias.reshape(channel)
    return y.astype(x.dtype, copy=False)


# -- softmax ----------------------------------------------------------------------------------


def _softmax_type(op: str):
    def infer(types: list[TensorType], attrs: dict) -> TensorType:
        _check_float(op, types[0])
        normalize_axis(attrs["dim"], types[0].rank)
        return types[0]

    return infer


def _shifted(x: np.ndarray, dim: int) -> np.ndarray:
    """x minus its maximum along dim, so exp() of it is at most 1 (a row all -inf, an attention
    row with every key masked, becomes NaN, as in torch: quietly)."""
    with np.errstate(invalid="ignore"):
        return x - x.max(axis=dim, keepdims=True)


@register("softmax", ["x"], {"dim": INT()}, infer=_softmax_type("softmax"))
def softmax(x, *, dim):
    e = np.exp(_shifted(x, dim))
    return e / e.sum(axis=dim, keepdims=True)


@register("log_softmax", ["x"], {"dim": INT()}, infer=_softmax_type("log_softmax"))
def log_softmax(x, *, dim):
    z = _shifted(x, dim)
    return z - np.log(np.exp(z).sum(axis=dim, keepdims=True))
