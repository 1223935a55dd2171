"""Interpolation and sampling, torch's semantics: resize and resize_cubic (F.interpolate over the
trailing spatial axes) and grid_sample (F.grid_sample).

Attributes of resize (nearest, nearest-exact, n-linear) and resize_cubic (bicubic):
- size: the output size of each resized (trailing) axis;
- mode (resize only): "nearest" (torch's legacy floor(dst * scale)), "nearest_exact"
  (pixel centres, torch's "nearest-exact") or "linear" (linear / bilinear / trilinear:
  n-linear interpolation is separable, so it is applied one axis at a time);
- align_corners: linear and cubic only, as torch;
- scales: the scale_factor torch was given per axis, or None. torch maps output to
  input coordinates with 1/scale_factor when it has one and with in/out otherwise;
  the two differ for non-integer factors (1.5 on 7 pixels: 0.667 vs 0.7), so the
  factor must survive lowering.

resize_cubic is torch's bicubic (cubic convolution with A = -0.75, the four taps of each
output clamped to the border), also separable: applied to the innermost axis first, in
the order torch's kernel sums. It is a separate op so that the resize emit rule, which
knows the modes above, never meets it.

The coordinate math copies ATen's UpSample.h exactly, in float32 as ATen does, so
indices match torch even where a float64 computation would round differently.
The index helpers are public: a compiled kernel can precompute the same tables.

grid_sample reads the input at the points a grid gives in [-1, 1] (x, then y, then z),
with torch's modes ("bilinear", "nearest", "bicubic": 2-D only) and padding modes
("zeros", "border", "reflection"). Its coordinate math follows ATen's CPU kernels: the
vectorised GridSamplerKernel.cpp for 4-D inputs, GridSampler.h for 5-D ones.
"""

from __future__ import annotations

import itertools

import numpy as np

from ir.op_registry import BOOL, FLOATS, INTS, STR, register
from ir.types import TensorType

MODES = ("nearest", "nearest_exact", "linear")
GRID_MODES = ("bilinear", "nearest", "bicubic")
PADDING_MODES = ("zeros", "border", "reflection")
CUBIC_A = -0.75  # torch's cubic convolution constant (UpSample.h, GridSampler)
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


def cubic_coefficients(t: np.ndarray) -> list[np.ndarray]:
    """The four cubic-convolution weights of taps -1, 0, 1, 2 at fraction t (ATen's
    get_cubic_upsample_coefficients), in t's dtype."""
    f = t.dtype.type
    a = f(CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + f(2)) * x - (a + f(3))) * x * x + f(1)

    def far(x):  # 1 < |x| < 2
        return ((a * x - f(5) * a) * x + f(8) * a) * x - f(4) * a

    return [far(t + f(1)), near(t), near(f(1) - t), far(f(1) - t + f(1))]


def cubic_source_weights(in_size: int, out_size: int, scale: float | None,
                         align_corners: bool) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (out_size, 4): out[i] = sum_j in[indices[i, j]] * weights[i, j]
    (ATen's HelperInterpCubic: the source index is not clamped at 0 before the floor, the taps are)."""
    dst = np.arange(out_size).astype(_F32)
    if align_corners:
        ratio = _F32(in_size - 1) / _F32(out_size - 1) if out_size > 1 else _F32(0)
        real = ratio * dst
    else:
        real = coordinate_scale(in_size, out_size, scale) * (dst + _F32(0.5)) - _F32(0.5)
    i0 = np.minimum(np.floor(real).astype(np.int64), in_size - 1)
    t = np.clip(real - i0.astype(_F32), 0, 1).astype(_F32)
    indices = np.clip(i0[:, None] + np.arange(-1, 3), 0, in_size - 1)
    return indices, np.stack(cubic_coefficients(t), axis=1)


def _resize_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, mode = types[0], attrs["mode"]
    if mode not in MODES:
        raise ValueError(f"unknown resize mode {mode!r}; expected one of {MODES}")
    if attrs["align_corners"] and mode != "linear":
        raise ValueError("align_corners applies to linear mode only")
    if mode == "linear" and not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise ValueError(f"linear resize needs a floating input, got {x}")
    return _resized(x, attrs["size"], attrs["scales"])


def _resize_cubic_type(types: list[TensorType], attrs: dict) -> TensorType:
    x = types[0]
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise ValueError(f"cubic resize needs a floating input, got {x}")
    return _resized(x, attrs["size"], attrs["scales"])


def _resized(x: TensorType, size: tuple[int, ...], scales: tuple[float, ...] | None) -> TensorType:
    """x with its trailing axes resized to `size`, after checking size and scales."""
    if not size or len(size) >= x.rank:
        raise ValueError(f"resize size {size} must name 1 to {x.rank - 1} trailing axes of {x}")
    if min(size) < 1:
        raise ValueError(f"resize output size {size} must be positive")
    if scales is not None and (len(scales) != len(size) or min(scales) <= 0):
        raise ValueError(f"resize scales {scales} must be positive, one per resized axis {size}")
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


@register("resize_cubic", ["x"],
          {"size": INTS(), "align_corners": BOOL(False), "scales": FLOATS(None, optional=True)},
          infer=_resize_cubic_type)
def resize_cubic(x, size, align_corners, scales):
    first = x.ndim - len(size)
    for i in reversed(range(len(size))):  # innermost first: torch sums each row, then the rows
        axis, in_size = first + i, x.shape[first + i]
        indices, weights = cubic_source_weights(in_size, size[i], None if scales is None else scales[i],
                                                align_corners)
        weights = weights.astype(x.dtype)
        out = np.take(x, indices[:, 0], axis=axis) * _along(x.ndim, axis, weights[:, 0])
        for j in range(1, 4):
            out += np.take(x, indices[:, j], axis=axis) * _along(x.ndim, axis, weights[:, j])
        x = out
    return x


# -- grid_sample ------------------------------------------------------------------------------


def _grid_sample_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, grid = types
    if x.rank not in (4, 5) or grid.rank != x.rank:
        raise ValueError(f"grid_sample takes a 4-D or 5-D input and a grid of the same rank, got {x} and {grid}")
    if grid.shape[0] != x.shape[0] or grid.shape[-1] != x.rank - 2:
        raise ValueError(f"grid_sample grid {grid} must be (N, ..., {x.rank - 2}) for input {x}")
    if attrs["mode"] == "bicubic" and x.rank != 4:
        raise ValueError("grid_sample bicubic mode takes a 4-D input only")
    for t in (x, grid):
        if not np.issubdtype(np.dtype(t.dtype), np.floating):
            raise ValueError(f"grid_sample needs floating operands, got {t}")
    return x.with_shape(x.shape[:2] + grid.shape[1:-1])


def _unnormalize(coord: np.ndarray, size: int, align_corners: bool, vectorised: bool) -> np.ndarray:
    """A grid coordinate in [-1, 1] as a pixel coordinate: -1 and 1 are the corner pixels' centres
    with align_corners, their outer edges without. torch's vectorised 2-D kernel and its scalar
    3-D kernel round differently; each is followed."""
    f = coord.dtype.type
    if vectorised:
        if align_corners:
            return (coord + f(1)) * (f(size - 1) / f(2))
        return (coord + f(1)) * (f(size) / f(2)) - f(0.5)
    if align_corners:
        return (coord + f(1)) / f(2) * f(size - 1)
    return ((coord + f(1)) * f(size) - f(1)) / f(2)


def _reflect(coord: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """coord reflected into [0, size - 1] (align_corners) or [-0.5, size - 0.5] (otherwise), as
    the vectorised kernel folds it (the 3-D kernel's fmod form differs only in rounding)."""
    f = coord.dtype.type
    if align_corners:
        if size <= 1:
            return np.zeros_like(coord)
        low, twice_span = f(0), f(2 * (size - 1))
    else:
        low, twice_span = f(-0.5), f(2 * size)
    distance = np.abs(coord - low)
    extra = distance - np.trunc(distance / twice_span) * twice_span
    return np.minimum(extra, twice_span - extra) + low


def _pad_coordinate(coord: np.ndarray, size: int, padding_mode: str, align_corners: bool) -> np.ndarray:
    """Where padding_mode sends a pixel coordinate: unchanged (zeros), clamped (border), or
    reflected and then clamped (reflection)."""
    if padding_mode == "reflection":
        coord = _reflect(coord, size, align_corners)
    if padding_mode != "zeros":
        coord = np.clip(coord, 0, size - 1)
    return coord


def _gather(x: np.ndarray, indices: list[np.ndarray]) -> np.ndarray:
    """x (N, C, *S) read at integer indices (one (N, *O) array per spatial axis), zero outside:
    (N, C, P) with P = prod(O)."""
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    valid = np.ones(indices[0].shape, bool)
    flat = np.zeros(indices[0].shape, np.int64)
    for index, size in zip(indices, spatial):
        valid &= (index >= 0) & (index < size)
        flat = flat * size + np.clip(index, 0, size - 1)
    values = np.take_along_axis(x.reshape(n, c, -1), flat.reshape(n, 1, -1), axis=2)
    return values * valid.reshape(n, 1, -1).astype(x.dtype)


def _as_weight(w: np.ndarray, dtype) -> np.ndarray:
    """A per-point weight (N, *O) as a (N, 1, P) factor of gathered values."""
    return w.reshape(w.shape[0], 1, -1).astype(dtype)


def _sample_bilinear(x, coords):
    """n-linear: the 2**k corners around each point, weighted by the opposite distances."""
    floors = [np.floor(c) for c in coords]
    fractions = [c - fl for c, fl in zip(coords, floors)]
    corners = [fl.astype(np.int64) for fl in floors]
    out = 0
    for bits in itertools.product((0, 1), repeat=len(coords)):
        weight = 1
        for bit, w in zip(bits, fractions):
            weight = weight * (w if bit else w.dtype.type(1) - w)
        out = out + _gather(x, [i + bit for i, bit in zip(corners, bits)]) * _as_weight(weight, x.dtype)
    return out


def _sample_nearest(x, coords):
    """The pixel nearest each point, ties to even (torch rounds with nearbyint)."""
    return _gather(x, [np.rint(c).astype(np.int64) for c in coords])


def _sample_bicubic(x, coords, padding_mode, align_corners):
    """4 x 4 taps around each point; each tap's coordinate goes through the padding rule, so
    border and reflection repeat pixels where zeros reads 0. Rows (x) first, then columns (y)."""
    (cy, cx), (size_y, size_x) = coords, x.shape[2:]
    fy, fx = np.floor(cy), np.floor(cx)
    wy, wx = cubic_coefficients(cy - fy), cubic_coefficients(cx - fx)

    def tap(f, offset, size):
        return _pad_coordinate(f + f.dtype.type(offset), size, padding_mode, align_corners).astype(np.int64)

    out = 0
    for i in range(4):
        row = 0
        for j in range(4):
            value = _gather(x, [tap(fy, i - 1, size_y), tap(fx, j - 1, size_x)])
            row = row + value * _as_weight(wx[j], x.dtype)
        out = out + row * _as_weight(wy[i], x.dtype)
    return out


@register("grid_sample", ["x", "grid"],
          {"mode": STR("bilinear", choices=GRID_MODES), "padding_mode": STR("zeros", choices=PADDING_MODES),
           "align_corners": BOOL(False)},
          infer=_grid_sample_type)
def grid_sample(x, grid, mode, padding_mode, align_corners):
    spatial = x.shape[2:]
    k = len(spatial)
    vectorised = k == 2
    # grid's last axis is (x, y[, z]): reversed, one coordinate per spatial axis of x
    coords = [_unnormalize(grid[..., k - 1 - a], size, align_corners, vectorised) for a, size in enumerate(spatial)]
    if mode == "bicubic":
        out = _sample_bicubic(x, coords, padding_mode, align_corners)
    else:
        coords = [_pad_coordinate(c, size, padding_mode, align_corners) for c, size in zip(coords, spatial)]
        out = _sample_nearest(x, coords) if mode == "nearest" else _sample_bilinear(x, coords)
    return np.asarray(out, dtype=x.dtype).reshape(x.shape[:2] + grid.shape[1:-1])
