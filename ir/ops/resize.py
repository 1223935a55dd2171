"""resize: torch's interpolate over the trailing spatial axes (nearest, nearest-exact, n-linear).

Attributes:
- size: the output size of each resized (trailing) axis;
- mode: "nearest" (torch's legacy floor(dst * scale)), "nearest_exact" (pixel
  centres, torch's "nearest-exact") or "linear" (linear / bilinear / trilinear:
  n-linear interpolation is separable, so it is applied one axis at a time);
- align_corners: linear mode only, as torch;
- scales: the scale_factor torch was given per axis, or None. torch maps output to
  input coordinates with 1/scale_factor when it has one and with in/out otherwise;
  the two differ for non-integer factors (1.5 on 7 pixels: 0.667 vs 0.7), so the
  factor must survive lowering.

The coordinate math copies ATen's UpSample.h exactly, in float32 as ATen does, so
indices match torch even where a float64 computation would round differently.
The index helpers are public: a compiled kernel can precompute the same tables.
"""

from __future__ import annotations

import numpy as np

from ir.op_registry import BOOL, FLOATS, INTS, STR, register
from ir.types import TensorType

MODES = ("nearest", "nearest_exact", "linear")
_F32 = np.float32


def coordinate_scale(in_size: int, out_size: int, scale: float | None) -> np.float32:
    """ATen's compute_scales_value: 1/scale_factor if torch had one, else in/out."""
    if scale is not None and scale > 0:
        return _F32(1.0 / scale)
    return _F32(in_size) / _F32(out_size)


def nearest_source_index(in_size: int, out_size: int, scale: float | None, exact: bool) -> np.ndarray:
    """Input index read by each output index (ATen's nearest_idx / nearest_exact_idx)."""
    dst = np.arange(out_size)
    s = coordinate_scale(in_size, out_size, scale)
    if exact:
        src = np.floor(((dst + 0.5) * np.float64(s)).astype(_F32))
    elif out_size == in_size:
        return dst
    elif out_size == 2 * in_size:
        return dst >> 1
    else:
        src = np.floor(dst.astype(_F32) * s)
    return np.minimum(src.astype(np.int64), in_size - 1)


def linear_source_weights(in_size: int, out_size: int, scale: float | None,
                          align_corners: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index0, index1, lambda1) per output index: out = in[i0] * (1 - l1) + in[i1] * l1
    (ATen's compute_source_index_and_lambda)."""
    dst = np.arange(out_size)
    if out_size == in_size:
        return dst, dst, np.zeros(out_size, _F32)
    if align_corners:
        ratio = _F32(in_size - 1) / _F32(out_size - 1) if out_size > 1 else _F32(0)
        real = ratio * dst.astype(_F32)
    else:
        ratio = coordinate_scale(in_size, out_size, scale)
        real = np.maximum(ratio * (dst.astype(_F32) + _F32(0.5)) - _F32(0.5), _F32(0))
    i0 = np.minimum(np.floor(real).astype(np.int64), in_size - 1)
    lambda1 = np.clip(real - i0.astype(_F32), 0, 1).astype(_F32)
    i1 = i0 + (i0 < in_size - 1)
    return i0, i1, lambda1


def _resize_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, size, scales, mode = types[0], attrs["size"], attrs["scales"], attrs["mode"]
    if mode not in MODES:
        raise ValueError(f"unknown resize mode {mode!r}; expected one of {MODES}")
    if not size or len(size) >= x.rank:
        raise ValueError(f"resize size {size} must name 1 to {x.rank - 1} trailing axes of {x}")
    if min(size) < 1:
        raise ValueError(f"resize output size {size} must be positive")
    if scales is not None and (len(scales) != len(size) or min(scales) <= 0):
        raise ValueError(f"resize scales {scales} must be positive, one per resized axis {size}")
    if attrs["align_corners"] and mode != "linear":
        raise ValueError("align_corners applies to linear mode only")
    if mode == "linear" and not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise ValueError(f"linear resize needs a floating input, got {x}")
    return x.with_shape(x.shape[:x.rank - len(size)] + tuple(size))


def _along(shape_rank: int, axis: int, weights: np.ndarray) -> np.ndarray:
    """Weights shaped to broadcast along `axis`."""
    shape = [1] * shape_rank
    shape[axis] = -1
    return weights.reshape(shape)


@register("resize", ["x"],
          {"size": INTS(), "mode": STR("nearest"), "align_corners": BOOL(False), "scales": FLOATS(None, optional=True)},
          infer=_resize_type)
def resize(x, size, mode, align_corners, scales):
    first = x.ndim - len(size)
    for i, out_size in enumerate(size):
        axis, in_size = first + i, x.shape[first + i]
        scale = None if scales is None else scales[i]
        if mode == "linear":
            i0, i1, lambda1 = linear_source_weights(in_size, out_size, scale, align_corners)
            x0, x1 = np.take(x, i0, axis=axis), np.take(x, i1, axis=axis)
            x1 -= x0  # x0 + (x1 - x0) * lambda1, in place: a third faster than two products
            x1 *= _along(x.ndim, axis, lambda1.astype(x.dtype))
            x1 += x0
            x = x1
        else:
            x = np.take(x, nearest_source_index(in_size, out_size, scale, mode == "nearest_exact"), axis=axis)
    return x
