"""Elementwise arithmetic, math, comparison and logic: what pnnx.Expression lowers to.

Binary ops broadcast numpy-style. Dtypes follow torch, not numpy: operands are
promoted with `promote_types` (int64 + float32 is float32, where numpy says
float64), cast to one compute dtype, and the op's `Kind` derives the result:

    PROMOTE  the promoted dtype              add, maximum, floor, neg, ...
    FLOAT    promoted, ints and bools -> f32 div, exp, sqrt, atan2, ...
    COMPARE  computed promoted, result bool  eq, lt, isnan, ...
    BITWISE  promoted, ints and bools only   bitwise_and, lshift, ...
    LOGICAL  operands cast to bool           logical_and, logical_not

Reference kernels ignore floating-point warnings: inf and nan are results here,
as in torch.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

import numpy as np
from scipy import special

from ir.op_registry import STR, Trait, register
from ir.ops.common import broadcast_shapes
from ir.types import TensorType

_EW = [Trait.ELEMENTWISE]


class Kind(enum.Enum):
    PROMOTE = "promote"
    FLOAT = "float"
    COMPARE = "compare"
    BITWISE = "bitwise"
    LOGICAL = "logical"


def _category(dtype: np.dtype) -> int:
    """torch's promotion categories: bool < integer < floating."""
    return 0 if dtype == np.bool_ else 2 if np.issubdtype(dtype, np.floating) else 1


def promote_types(dtypes: Iterable) -> np.dtype:
    """torch.promote_types over several dtypes: a higher category wins outright
    (int64 with float16 is float16); within a category numpy's rule agrees with torch."""
    result = None
    for d in map(np.dtype, dtypes):
        if result is None or _category(d) > _category(result):
            result = d
        elif _category(d) == _category(result):
            result = np.result_type(result, d)
    if result is None:
        raise ValueError("no dtypes to promote")
    return result


# torch's promotion tiers, lowest first: Python numbers, 0-d tensors, other tensors.
SCALAR, ZERO_DIM, TENSOR = 0, 1, 2


def result_type(operands: Iterable[tuple[np.dtype, int]]) -> np.dtype:
    """torch.result_type of (dtype, tier) operands: each tier promotes within itself, and a
    higher tier keeps its dtype unless a lower one brings a higher category (c10's
    combine_categories): f32 tensor * 2.5 stays f32, i64 tensor * 2.5 is f32, and
    i32 tensor + f64 0-d tensor is f64."""
    operands = list(operands)
    result = None
    for tier in (SCALAR, ZERO_DIM, TENSOR):
        group = [dtype for dtype, t in operands if t == tier]
        if not group:
            continue
        higher = promote_types(group)
        lower_brings_category = result is not None and _category(higher) < 2 and (
            higher == np.bool_ or _category(result) == 2)
        result = promote_types([higher, result]) if lower_brings_category else higher
    return result


def kind_dtypes(kind: Kind, promoted: np.dtype) -> tuple[np.dtype, np.dtype]:
    """(compute dtype the operands are cast to, result dtype) of an op of `kind`."""
    promoted = np.dtype(promoted)
    if kind is Kind.FLOAT:
        out = promoted if _category(promoted) == 2 else np.dtype(np.float32)
        return out, out
    if kind is Kind.COMPARE:
        return promoted, np.dtype(np.bool_)
    if kind is Kind.LOGICAL:
        return np.dtype(np.bool_), np.dtype(np.bool_)
    if kind is Kind.BITWISE and _category(promoted) == 2:
        raise ValueError(f"bitwise op on {promoted.name}; it needs integer or bool operands")
    return promoted, promoted


#: IR op name -> its Kind, for every unary and binary op registered here.
KINDS: dict[str, Kind] = {}


def _register(name: str, arity: int, fn: Callable, kind: Kind) -> None:
    def infer(types: list[TensorType], attrs: dict) -> TensorType:
        shape = broadcast_shapes(*[t.shape for t in types])
        return TensorType(shape, kind_dtypes(kind, promote_types(t.dtype for t in types))[1])

    def compute(*arrays):
        compute_dtype, result_dtype = kind_dtypes(kind, promote_types(a.dtype for a in arrays))
        with np.errstate(all="ignore"):
            out = fn(*[a.astype(compute_dtype, copy=False) for a in arrays])
        return np.asarray(out, dtype=result_dtype)

    compute.__name__ = name
    KINDS[name] = kind
    register(name, ["a", "b"] if arity == 2 else ["x"], infer=infer, traits=_EW)(compute)


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _torch_sign(x):
    """torch.sign(nan) is 0; numpy's is nan. Bools are their own sign."""
    if x.dtype == np.bool_:
        return x
    out = np.sign(x)
    return np.where(np.isnan(out), 0, out) if out.dtype.kind == "f" else out


def _frac(x):
    return x - np.trunc(x)


_BINARY: dict[str, tuple[Callable, Kind]] = {
    "add": (np.add, Kind.PROMOTE),
    "sub": (np.subtract, Kind.PROMOTE),
    "mul": (np.multiply, Kind.PROMOTE),
    "div": (np.true_divide, Kind.FLOAT),
    "floor_divide": (np.floor_divide, Kind.PROMOTE),  # floor rounding, as torch >= 1.13
    "fmod": (np.fmod, Kind.PROMOTE),  # sign of the dividend
    "remainder": (np.remainder, Kind.PROMOTE),  # sign of the divisor
    "pow": (np.power, Kind.PROMOTE),
    "maximum": (np.maximum, Kind.PROMOTE),  # propagates nan
    "minimum": (np.minimum, Kind.PROMOTE),
    "fmax": (np.fmax, Kind.PROMOTE),  # ignores nan
    "fmin": (np.fmin, Kind.PROMOTE),
    "atan2": (np.arctan2, Kind.FLOAT),
    "logaddexp": (np.logaddexp, Kind.FLOAT),
    "hypot": (np.hypot, Kind.FLOAT),
    "copysign": (np.copysign, Kind.FLOAT),
    "eq": (np.equal, Kind.COMPARE),
    "ne": (np.not_equal, Kind.COMPARE),
    "lt": (np.less, Kind.COMPARE),
    "le": (np.less_equal, Kind.COMPARE),
    "gt": (np.greater, Kind.COMPARE),
    "ge": (np.greater_equal, Kind.COMPARE),
    "bitwise_and": (np.bitwise_and, Kind.BITWISE),
    "bitwise_or": (np.bitwise_or, Kind.BITWISE),
    "bitwise_xor": (np.bitwise_xor, Kind.BITWISE),
    "lshift": (np.left_shift, Kind.BITWISE),
    "rshift": (np.right_shift, Kind.BITWISE),
    "logical_and": (np.logical_and, Kind.LOGICAL),
    "logical_or": (np.logical_or, Kind.LOGICAL),
    "logical_xor": (np.logical_xor, Kind.LOGICAL),
}

_UNARY: dict[str, tuple[Callable, Kind]] = {
    "neg": (np.negative, Kind.PROMOTE),
    "abs": (np.abs, Kind.PROMOTE),
    "sign": (_torch_sign, Kind.PROMOTE),
    "square": (np.square, Kind.PROMOTE),
    "floor": (np.floor, Kind.PROMOTE),  # on integers: the integers, as torch
    "ceil": (np.ceil, Kind.PROMOTE),
    "round": (np.round, Kind.PROMOTE),  # half to even, as torch.round
    "trunc": (np.trunc, Kind.PROMOTE),
    "frac": (_frac, Kind.PROMOTE),
    "exp": (np.exp, Kind.FLOAT),
    "exp2": (np.exp2, Kind.FLOAT),
    "expm1": (np.expm1, Kind.FLOAT),
    "log": (np.log, Kind.FLOAT),
    "log2": (np.log2, Kind.FLOAT),
    "log10": (np.log10, Kind.FLOAT),
    "log1p": (np.log1p, Kind.FLOAT),
    "sqrt": (np.sqrt, Kind.FLOAT),
    "rsqrt": (_rsqrt, Kind.FLOAT),
    "reciprocal": (np.reciprocal, Kind.FLOAT),
    "sin": (np.sin, Kind.FLOAT),
    "cos": (np.cos, Kind.FLOAT),
    "tan": (np.tan, Kind.FLOAT),
    "asin": (np.arcsin, Kind.FLOAT),
    "acos": (np.arccos, Kind.FLOAT),
    "atan": (np.arctan, Kind.FLOAT),
    "sinh": (np.sinh, Kind.FLOAT),
    "cosh": (np.cosh, Kind.FLOAT),
    "tanh": (np.tanh, Kind.FLOAT),
    "asinh": (np.arcsinh, Kind.FLOAT),
    "acosh": (np.arccosh, Kind.FLOAT),
    "atanh": (np.arctanh, Kind.FLOAT),
    "erf": (special.erf, Kind.FLOAT),
    "erfc": (special.erfc, Kind.FLOAT),
    "isnan": (np.isnan, Kind.COMPARE),
    "signbit": (np.signbit, Kind.COMPARE),
    "bitwise_not": (np.invert, Kind.BITWISE),
    "logical_not": (np.logical_not, Kind.LOGICAL),
}

for _name, (_fn, _kind) in _BINARY.items():
    _register(_name, 2, _fn, _kind)
for _name, (_fn, _kind) in _UNARY.items():
    _register(_name, 1, _fn, _kind)


def _where_type(types: list[TensorType], attrs: dict) -> TensorType:
    shape = broadcast_shapes(*[t.shape for t in types])
    return TensorType(shape, promote_types([types[1].dtype, types[2].dtype]))


@register("where", ["cond", "a", "b"], infer=_where_type, traits=_EW)
def where(cond, a, b):
    dtype = promote_types([a.dtype, b.dtype])
    return np.where(cond.astype(bool, copy=False), a.astype(dtype, copy=False), b.astype(dtype, copy=False))


@register("copy", ["x"], infer=lambda t, a: t[0], traits=_EW)
def copy(x):
    return np.array(x, copy=True)


@register("cast", ["x"], {"dtype": STR()}, infer=lambda t, a: TensorType(t[0].shape, a["dtype"]), traits=_EW)
def cast(x, dtype):
    """astype truncates floats toward zero, as torch's .to(int)."""
    return x.astype(dtype)
