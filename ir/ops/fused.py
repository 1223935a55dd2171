"""Fused ops made by the fusion passes: a conv or linear with its epilogue.

    y = conv2d(x, weight) + bias        (or linear)
    y = activation(y; alpha, beta)
    y = y + residual                    (when a 4th input is given)
    y = post_activation(y; post_alpha, post_beta)

Activations are named as their IR ops; alpha/beta carry their parameters:
clamp (alpha=min, beta=max), leaky_relu (alpha=slope), elu (alpha). gelu_tanh is
gelu with approximate="tanh". The reference runs the unfused ops' references.
"""

from __future__ import annotations

import numpy as np

from ir.ops.conv import _CONV_ATTRS, _conv2d_type, conv2d
from ir.ops.linear import linear
from ir.registry import FLOAT, STR, Trait, get_op, register
from ir.types import TensorType

EPILOGUE_ACTIVATIONS = (
    "none", "relu", "clamp", "leaky_relu", "silu", "sigmoid", "tanh",
    "hardswish", "hardsigmoid", "gelu", "gelu_tanh", "elu", "mish",
)

_EPILOGUE_ATTRS = {
    "activation": STR("none"),
    "alpha": FLOAT(0.0),
    "beta": FLOAT(0.0),
    "post_activation": STR("none"),
    "post_alpha": FLOAT(0.0),
    "post_beta": FLOAT(0.0),
}


def activation_attrs(name: str, alpha: float, beta: float) -> tuple[str, dict]:
    """The IR op and attributes of an epilogue activation."""
    if name == "clamp":
        return "clamp", {"min": alpha, "max": beta}
    if name == "leaky_relu":
        return "leaky_relu", {"negative_slope": alpha}
    if name == "elu":
        return "elu", {"alpha": alpha}
    if name == "gelu":
        return "gelu", {"approximate": "none"}
    if name == "gelu_tanh":
        return "gelu", {"approximate": "tanh"}
    return name, {}


def apply_activation(y: np.ndarray, name: str, alpha: float, beta: float) -> np.ndarray:
    if name == "none":
        return y
    op, attrs = activation_attrs(name, alpha, beta)
    return get_op(op).compute(y, **attrs)


def _check_epilogue(types: list[TensorType], attrs: dict, out: TensorType, first_extra: int) -> TensorType:
    for key in ("activation", "post_activation"):
        if attrs[key] not in EPILOGUE_ACTIVATIONS:
            raise ValueError(f"unknown epilogue {key} {attrs[key]!r}")
    if len(types) > first_extra and types[first_extra].shape != out.shape:
        raise ValueError(f"residual {types[first_extra]} does not match output {out}")
    return out


def _epilogue(y, residual, activation, alpha, beta, post_activation, post_alpha, post_beta):
    y = apply_activation(y, activation, alpha, beta)
    if residual is not None:
        y = y + residual
    return np.ascontiguousarray(apply_activation(y, post_activation, post_alpha, post_beta), dtype=np.float32)


@register("fused_conv2d", ["x", "weight", "bias", "residual?"], {**_CONV_ATTRS, **_EPILOGUE_ATTRS},
          infer=lambda t, a: _check_epilogue(t, a, _conv2d_type(t[:3], a), 3), traits=[Trait.EXPENSIVE])
def fused_conv2d(x, weight, bias, residual=None, *, stride, padding, dilation, groups, padding_mode, **epilogue):
    y = conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups,
               padding_mode=padding_mode)
    return _epilogue(y, residual, **epilogue)


def _linear_type(types: list[TensorType], attrs: dict) -> TensorType:
    out = get_op("linear").infer_types(types[:3], {})[0]
    return _check_epilogue(types, attrs, out, 3)


@register("fused_linear", ["x", "weight", "bias", "residual?"], dict(_EPILOGUE_ATTRS),
          infer=_linear_type, traits=[Trait.EXPENSIVE])
def fused_linear(x, weight, bias, residual=None, **epilogue):
    return _epilogue(linear(x, weight, bias), residual, **epilogue)
