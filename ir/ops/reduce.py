"""Reductions over dims: reduce_sum/mean/prod/max/min and argmax/argmin.

`dims` None reduces every dim (torch.sum(x)); keepdim keeps reduced dims as size 1.
Result dtypes follow torch: sum and prod of integers or bools give int64, mean needs
a floating input, argmax/argmin give int64 indices of the first extremum.
Float sums and means accumulate in float64 so the reference stays accurate for
large reductions (torch accumulates pairwise; plain float32 loops drift).
"""

from __future__ import annotations

import numpy as np

from ir.op_registry import BOOL, INT, INTS, register
from ir.ops.common import normalize_axis
from ir.types import TensorType

_ATTRS = {"dims": INTS(None, optional=True), "keepdim": BOOL(False)}


def reduce_axes(rank: int, axes: tuple[int, ...] | None) -> tuple[int, ...]:
    """Normalised, sorted axes to reduce; all axes when `axes` is None."""
    if axes is None:
        return tuple(range(rank))
    norm = [normalize_axis(a, rank) for a in axes]
    if len(set(norm)) != len(norm):
        raise ValueError(f"reduction axes {axes} repeat an axis")
    return tuple(sorted(set(norm))) if rank else ()


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _is_float(dtype: str) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


def _accumulating_dtype(dtype: str) -> str:
    """torch.sum / torch.prod promote integers and bools to int64."""
    return dtype if _is_float(dtype) else "int64"


def _reduce_type(dtype_rule=lambda dtype: dtype, has_identity: bool = True):
    """Shape rule of a reduction; max and min have no identity, so they refuse empty axes."""

    def infer(types: list[TensorType], attrs: dict) -> TensorType:
        x = types[0]
        axes = reduce_axes(x.rank, attrs["dims"])
        if not has_identity and any(x.shape[a] == 0 for a in axes):
            raise ValueError(f"cannot take the max/min over an empty axis of {x}")
        return TensorType(reduced_shape(x.shape, axes, attrs["keepdim"]), dtype_rule(x.dtype))

    return infer


def _mean_dtype(dtype: str) -> str:
    if not _is_float(dtype):
        raise ValueError(f"mean needs a floating input, got {dtype} (torch refuses it too)")
    return dtype


def _np_axes(x: np.ndarray, dims) -> tuple[int, ...] | None:
    return reduce_axes(x.ndim, dims) if x.ndim else None


@register("reduce_sum", ["x"], _ATTRS, infer=_reduce_type(_accumulating_dtype))
def reduce_sum(x, dims, keepdim):
    out_dtype = _accumulating_dtype(x.dtype.name)
    acc = np.float64 if _is_float(out_dtype) else np.int64
    return np.asarray(np.sum(x, axis=_np_axes(x, dims), keepdims=keepdim, dtype=acc), dtype=out_dtype)


@register("reduce_mean", ["x"], _ATTRS, infer=_reduce_type(_mean_dtype))
def reduce_mean(x, dims, keepdim):
    return np.asarray(np.mean(x, axis=_np_axes(x, dims), keepdims=keepdim, dtype=np.float64), dtype=x.dtype)


@register("reduce_prod", ["x"], _ATTRS, infer=_reduce_type(_accumulating_dtype))
def reduce_prod(x, dims, keepdim):
    out_dtype = _accumulating_dtype(x.dtype.name)
    return np.asarray(np.prod(x, axis=_np_axes(x, dims), keepdims=keepdim, dtype=out_dtype), dtype=out_dtype)


@register("reduce_max", ["x"], _ATTRS, infer=_reduce_type(has_identity=False))
def reduce_max(x, dims, keepdim):
    return np.asarray(np.max(x, axis=_np_axes(x, dims), keepdims=keepdim))


@register("reduce_min", ["x"], _ATTRS, infer=_reduce_type(has_identity=False))
def reduce_min(x, dims, keepdim):
    return np.asarray(np.min(x, axis=_np_axes(x, dims), keepdims=keepdim))


# -- arg reductions ------------------------------------------------------------------------

_ARG_ATTRS = {"dim": INT(None, optional=True), "keepdim": BOOL(False)}


def _arg_type(types: list[TensorType], attrs: dict) -> TensorType:
    """One dim, or the flattened tensor when dim is None (keepdim then keeps every dim as 1)."""
    x, axis = types[0], attrs["dim"]
    if x.size == 0:
        raise ValueError(f"argmax/argmin of an empty tensor {x}")
    axes = reduce_axes(x.rank, None if axis is None else (axis,))
    return TensorType(reduced_shape(x.shape, axes, attrs["keepdim"]), "int64")


def _arg_reduce(fn, x, dim, keepdim):
    if dim is None:
        flat = fn(x.reshape(-1))
        return np.full((1,) * x.ndim if keepdim else (), flat, dtype=np.int64)
    axis = normalize_axis(dim, x.ndim) if x.ndim else None
    return np.asarray(fn(x, axis=axis, keepdims=keepdim), dtype=np.int64)


@register("argmax", ["x"], _ARG_ATTRS, infer=_arg_type)
def argmax(x, dim, keepdim):
    return _arg_reduce(np.argmax, x, dim, keepdim)


@register("argmin", ["x"], _ARG_ATTRS, infer=_arg_type)
def argmin(x, dim, keepdim):
    return _arg_reduce(np.argmin, x, dim, keepdim)
