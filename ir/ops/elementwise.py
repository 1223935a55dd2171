"""Elementwise arithmetic and math: what pnnx.Expression lowers to.

Binary ops broadcast numpy-style; the result dtype is numpy's promotion of the
inputs (constants from expressions are typed to match, as torch's scalars are).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from ir.ops.common import broadcast_shapes, promote, same_as_first
from ir.registry import STR, Trait, register
from ir.types import TensorType

_EW = [Trait.ELEMENTWISE]


def _binary_type(types: list[TensorType], attrs: dict) -> TensorType:
    return TensorType(broadcast_shapes(types[0].shape, types[1].shape), promote(types))


def _float_binary_type(types: list[TensorType], attrs: dict) -> TensorType:
    t = _binary_type(types, attrs)
    return t if np.issubdtype(np.dtype(t.dtype), np.floating) else TensorType(t.shape, "float32")


def _compare_type(types: list[TensorType], attrs: dict) -> TensorType:
    return TensorType(broadcast_shapes(types[0].shape, types[1].shape), "bool")


def _binary(name: str, fn, infer=_binary_type) -> None:
    def compute(a, b):
        with np.errstate(all="ignore"):
            out = fn(a, b)
        return np.asarray(out, dtype=np.result_type(a, b)) if infer is _binary_type else out

    register(name, ["a", "b"], infer=infer, traits=_EW)(compute)


def _unary(name: str, fn) -> None:
    def compute(x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x), dtype=x.dtype)

    register(name, ["x"], infer=same_as_first, traits=_EW)(compute)


def _torch_div(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        return np.true_divide(a, b).astype(np.float32)
    return np.divide(a, b)


_binary("add", np.add)
_binary("sub", np.subtract)
_binary("mul", np.multiply)
_binary("div", _torch_div, infer=_float_binary_type)
_binary("pow", np.power)
_binary("maximum", np.maximum)
_binary("minimum", np.minimum)
_binary("floor_divide", np.floor_divide)
_binary("fmod", np.fmod)
_binary("remainder", np.remainder)  # python-style sign, as torch.remainder
_binary("atan2", np.arctan2)
_binary("equal", np.equal, infer=_compare_type)
_binary("less", np.less, infer=_compare_type)

_UNARY = {
    "neg": np.negative,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "log10": np.log10,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": np.reciprocal,
    "square": np.square,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,  # round half to even, as torch.round
    "trunc": np.trunc,
    "sign": np.sign,
    "erf": special.erf,
}
for _name, _fn in _UNARY.items():
    _unary(_name, _fn)


@register("copy", ["x"], infer=same_as_first, traits=_EW)
def copy(x):
    return np.array(x, copy=True)


@register("cast", ["x"], {"dtype": STR()}, infer=lambda t, a: TensorType(t[0].shape, a["dtype"]), traits=_EW)
def cast(x, dtype):
    return x.astype(dtype)


@register("where", ["cond", "a", "b"],
          infer=lambda t, a: TensorType(broadcast_shapes(t[0].shape, t[1].shape, t[2].shape), promote(t[1:])),
          traits=_EW)
def where(cond, a, b):
    return np.where(cond, a, b).astype(np.result_type(a, b))
