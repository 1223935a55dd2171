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

from ir.op_registry import STR, Trait, register
from ir.ops.common import broadcast_shapes, scipy_special
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


def _register(name: str, arity: int, fn: Callable, kind: Kind, scalar: str, epilogue: bool = False) -> None:
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
    traits = _EW + [Trait.EPILOGUE] if epilogue else _EW
    register(name, ["a", "b"] if arity == 2 else ["x"], infer=infer, traits=traits, scalar=scalar)(compute)


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


# op -> (reference, kind, scalar form); the scalar form is numba source over the operands
# {0}, {1} and the computing scalar type {T} (see ir/op_registry.py, ScalarForm)
_BINARY: dict[str, tuple[Callable, Kind, str]] = {
    "add": (np.add, Kind.PROMOTE, "({0} + {1})"),
    "sub": (np.subtract, Kind.PROMOTE, "({0} - {1})"),
    "mul": (np.multiply, Kind.PROMOTE, "({0} * {1})"),
    "div": (np.true_divide, Kind.FLOAT, "({0} / {1})"),
    "floor_divide": (np.floor_divide, Kind.PROMOTE, "({0} // {1})"),  # floor rounding, as torch >= 1.13
    "fmod": (np.fmod, Kind.PROMOTE, "np.fmod({0}, {1})"),  # sign of the dividend
    "remainder": (np.remainder, Kind.PROMOTE, "({0} % {1})"),  # sign of the divisor
    "pow": (np.power, Kind.PROMOTE, "({0} ** {1})"),
    "maximum": (np.maximum, Kind.PROMOTE, "max({0}, {1})"),  # propagates nan
    "minimum": (np.minimum, Kind.PROMOTE, "min({0}, {1})"),
    "fmax": (np.fmax, Kind.PROMOTE, "max({0}, {1})"),  # ignores nan
    "fmin": (np.fmin, Kind.PROMOTE, "min({0}, {1})"),
    "atan2": (np.arctan2, Kind.FLOAT, "math.atan2({0}, {1})"),
    "logaddexp": (np.logaddexp, Kind.FLOAT, "np.logaddexp({0}, {1})"),
    "hypot": (np.hypot, Kind.FLOAT, "math.hypot({0}, {1})"),
    "copysign": (np.copysign, Kind.FLOAT, "math.copysign({0}, {1})"),
    "eq": (np.equal, Kind.COMPARE, "({0} == {1})"),
    "ne": (np.not_equal, Kind.COMPARE, "({0} != {1})"),
    "lt": (np.less, Kind.COMPARE, "({0} < {1})"),
    "le": (np.less_equal, Kind.COMPARE, "({0} <= {1})"),
    "gt": (np.greater, Kind.COMPARE, "({0} > {1})"),
    "ge": (np.greater_equal, Kind.COMPARE, "({0} >= {1})"),
    "bitwise_and": (np.bitwise_and, Kind.BITWISE, "({0} & {1})"),
    "bitwise_or": (np.bitwise_or, Kind.BITWISE, "({0} | {1})"),
    "bitwise_xor": (np.bitwise_xor, Kind.BITWISE, "({0} ^ {1})"),
    "lshift": (np.left_shift, Kind.BITWISE, "({0} << {1})"),
    "rshift": (np.right_shift, Kind.BITWISE, "({0} >> {1})"),
    "logical_and": (np.logical_and, Kind.LOGICAL, "(bool({0}) and bool({1}))"),
    "logical_or": (np.logical_or, Kind.LOGICAL, "(bool({0}) or bool({1}))"),
    "logical_xor": (np.logical_xor, Kind.LOGICAL, "(bool({0}) != bool({1}))"),
}

_UNARY: dict[str, tuple[Callable, Kind, str]] = {
    "neg": (np.negative, Kind.PROMOTE, "(-{0})"),
    "abs": (np.abs, Kind.PROMOTE, "abs({0})"),
    "sign": (_torch_sign, Kind.PROMOTE, "np.sign({0})"),
    "square": (np.square, Kind.PROMOTE, "({0} * {0})"),
    "floor": (np.floor, Kind.PROMOTE, "np.floor({0})"),  # on integers: the integers, as torch
    "ceil": (np.ceil, Kind.PROMOTE, "np.ceil({0})"),
    "round": (np.round, Kind.PROMOTE, "np.rint({0})"),  # half to even, as torch.round
    "trunc": (np.trunc, Kind.PROMOTE, "np.trunc({0})"),
    "frac": (_frac, Kind.PROMOTE, "({0} - np.trunc({0}))"),
    "exp": (np.exp, Kind.FLOAT, "fast_exp({0})"),
    "exp2": (np.exp2, Kind.FLOAT, "np.exp2({0})"),
    "expm1": (np.expm1, Kind.FLOAT, "np.expm1({0})"),
    "log": (np.log, Kind.FLOAT, "np.log({0})"),
    "log2": (np.log2, Kind.FLOAT, "np.log2({0})"),
    "log10": (np.log10, Kind.FLOAT, "np.log10({0})"),
    "log1p": (np.log1p, Kind.FLOAT, "np.log1p({0})"),
    "sqrt": (np.sqrt, Kind.FLOAT, "np.sqrt({0})"),
    "rsqrt": (_rsqrt, Kind.FLOAT, "({T}(1.0) / np.sqrt({0}))"),
    "reciprocal": (np.reciprocal, Kind.FLOAT, "({T}(1.0) / {0})"),
    "sin": (np.sin, Kind.FLOAT, "np.sin({0})"),
    "cos": (np.cos, Kind.FLOAT, "np.cos({0})"),
    "tan": (np.tan, Kind.FLOAT, "np.tan({0})"),
    "asin": (np.arcsin, Kind.FLOAT, "np.arcsin({0})"),
    "acos": (np.arccos, Kind.FLOAT, "np.arccos({0})"),
    "atan": (np.arctan, Kind.FLOAT, "np.arctan({0})"),
    "sinh": (np.sinh, Kind.FLOAT, "np.sinh({0})"),
    "cosh": (np.cosh, Kind.FLOAT, "np.cosh({0})"),
    "tanh": (np.tanh, Kind.FLOAT, "fast_tanh({0})"),  # also an epilogue activation, below
    "asinh": (np.arcsinh, Kind.FLOAT, "np.arcsinh({0})"),
    "acosh": (np.arccosh, Kind.FLOAT, "np.arccosh({0})"),
    "atanh": (np.arctanh, Kind.FLOAT, "np.arctanh({0})"),
    "erf": (lambda x: scipy_special().erf(x), Kind.FLOAT, "fast_erf({0})"),
    "erfc": (lambda x: scipy_special().erfc(x), Kind.FLOAT, "math.erfc({0})"),
    # log |gamma(x)|, inf at 0, -1, ...
    "lgamma": (lambda x: scipy_special().gammaln(x), Kind.FLOAT, "math.lgamma({0})"),
    "isnan": (np.isnan, Kind.COMPARE, "np.isnan({0})"),
    "signbit": (np.signbit, Kind.COMPARE, "np.signbit({0})"),
    "bitwise_not": (np.invert, Kind.BITWISE, "(~{0})"),
    "logical_not": (np.logical_not, Kind.LOGICAL, "(not bool({0}))"),
}
_EPILOGUE_OPS = {"tanh"}  # nn.Tanh is an activation too: conv and linear epilogues apply it

for _name, (_fn, _kind, _scalar) in _BINARY.items():
    _register(_name, 2, _fn, _kind, _scalar)
for _name, (_fn, _kind, _scalar) in _UNARY.items():
    _register(_name, 1, _fn, _kind, _scalar, epilogue=_name in _EPILOGUE_OPS)


def _where_type(types: list[TensorType], attrs: dict) -> TensorType:
    shape = broadcast_shapes(*[t.shape for t in types])
    return TensorType(shape, promote_types([types[1].dtype, types[2].dtype]))


@register("where", ["cond", "a", "b"], infer=_where_type, traits=_EW, scalar="({1} if {0} else {2})")
def where(cond, a, b):
    dtype = promote_types([a.dtype, b.dtype])
    return np.where(cond.astype(bool, copy=False), a.astype(dtype, copy=False), b.astype(dtype, copy=False))


@register("copy", ["x"], infer=lambda t, a: t[0], traits=_EW, scalar="{0}")
def copy(x):
    return np.array(x, copy=True)


def _cast_scalar(operands: list[str], attrs: dict, dtype: str) -> str:
    return f"({operands[0]} != 0)" if attrs["dtype"] == "bool" else f"np.{attrs['dtype']}({operands[0]})"


@register("cast", ["x"], {"dtype": STR()}, infer=lambda t, a: TensorType(t[0].shape, a["dtype"]), traits=_EW,
          scalar=_cast_scalar)
def cast(x, dtype):
    """astype truncates floats toward zero, as torch's .to(int)."""
    return x.astype(dtype)
