"""Indexing: flips, advanced (integer-array) indexing and its scatter (index_put), gather and
scatter along a dim, slice scatter, and the sliding-block ops unfold (im2col) and fold (col2im).

Indices are int tensors (any integer dtype; negative entries count from the end, as in
torch and numpy). Boolean masks never reach these ops: their output size depends on the
mask's values, so the lowering turns a constant mask into integer indices (its nonzero
positions) and refuses a runtime one. The ops that move elements keep their input's dtype.
"""

from __future__ import annotations

import numpy as np

from ir.op_registry import BOOL, INT, INTS, STR, register
from ir.ops.common import broadcast_shapes, conv_out_size, normalize_axis
from ir.ops.shape import slice_index
from ir.types import TensorType


def _integer(t: TensorType, what: str) -> None:
    if not np.issubdtype(np.dtype(t.dtype), np.integer):
        raise ValueError(f"{what} must be an integer tensor, got {t}")


# -- flip ------------------------------------------------------------------------------------


def _flip_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, dims = types[0], attrs["dims"]
    axes = [normalize_axis(d, x.rank) for d in dims]
    if len(set(axes)) != len(axes):
        raise ValueError(f"flip dims {dims} repeat an axis of {x}")
    return x


@register("flip", ["x"], {"dims": INTS()}, infer=_flip_type)
def flip(x, dims):
    """torch.flip: reverse the order of the elements along each of `dims`."""
    return np.flip(x, dims)


# -- advanced indexing -------------------------------------------------------------------------


def _index_tuple(rank: int, axes, indices) -> tuple:
    """The numpy index: each index array at its axis, the full range elsewhere."""
    index: list = [slice(None)] * rank
    for axis, i in zip(axes, indices, strict=True):
        index[axis] = i
    return tuple(index)


def indexed_shape(x: TensorType, axes, index_types: list[TensorType]) -> tuple[int, ...]:
    """The shape of x[index] for integer index arrays at `axes` (increasing), as numpy and torch
    give it: the indices broadcast together; their shape replaces the indexed dims where those
    are adjacent, and comes first otherwise."""
    if len(axes) != len(index_types) or not axes:
        raise ValueError(f"{len(index_types)} index tensors for axes {axes}")
    if any(not 0 <= a < x.rank for a in axes) or list(axes) != sorted(set(axes)):
        raise ValueError(f"index axes {axes} must be increasing axes of {x}")
    for t in index_types:
        _integer(t, "an index")
    broadcast = broadcast_shapes(*[t.shape for t in index_types])
    rest = [d for a, d in enumerate(x.shape) if a not in axes]
    if axes[-1] - axes[0] + 1 == len(axes):
        return x.shape[:axes[0]] + broadcast + x.shape[axes[-1] + 1:]
    return broadcast + tuple(rest)


def _index_type(types: list[TensorType], attrs: dict) -> TensorType:
    x = types[0]
    return x.with_shape(indexed_shape(x, attrs["axes"], types[1:]))


@register("index", ["x", "indices*"], {"axes": INTS()}, infer=_index_type)
def index(x, *indices, axes):
    """x[..., i0, ..., i1, ...]: integer index arrays at `axes`, full slices elsewhere
    (torch's advanced indexing, index_select and embedding lookups)."""
    return x[_index_tuple(x.ndim, axes, indices)]


def _index_put_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, values = types[0], types[1]
    target = indexed_shape(x, attrs["axes"], types[2:])
    if broadcast_shapes(values.shape, target) != target:
        raise ValueError(f"index_put values {values} do not broadcast to the indexed shape {target}")
    return x


@register("index_put", ["x", "values", "indices*"], {"axes": INTS(), "accumulate": BOOL(False)},
          infer=_index_put_type)
def index_put(x, values, *indices, axes, accumulate):
    """torch's index_put: a copy of x with x[index] = values (cast to x's dtype, broadcast), or
    += values with accumulate, where repeated indices add up (np.add.at, in index order)."""
    out = x.copy()
    where = _index_tuple(x.ndim, axes, indices)
    values = np.broadcast_to(values.astype(x.dtype, copy=False), out[where].shape)
    if accumulate:
        np.add.at(out, where, values)
    else:
        out[where] = values
    return out


# -- gather and scatter ----------------------------------------------------------------------------------------


def _along(index: np.ndarray, axis: int) -> tuple:
    """The positions gather and scatter address: `index` along `axis`, each element's own
    position in the other dims."""
    grid = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    return tuple(grid)


def _gather_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, index = types
    _integer(index, "gather's index")
    axis = normalize_axis(attrs["dim"], x.rank)
    if index.rank != x.rank or any(i > n for a, (i, n) in enumerate(zip(index.shape, x.shape)) if a != axis):
        raise ValueError(f"gather index {index} must have the rank of {x} and no larger dims but dim {axis}")
    return x.with_shape(index.shape)


@register("gather", ["x", "index"], {"dim": INT()}, infer=_gather_type)
def gather(x, index, dim):
    """torch.gather: out[i][j][k] = x[index[i][j][k]][j][k] (dim 0); the index may be smaller
    than x in the other dims, which then read x's leading part."""
    return x[_along(index, dim % x.ndim)]


def _scatter_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, index, src = types
    _integer(index, "scatter's index")
    axis = normalize_axis(attrs["dim"], x.rank)
    fits = index.rank == x.rank == src.rank and all(
        i <= s and (a == axis or i <= n) for a, (i, n, s) in enumerate(zip(index.shape, x.shape, src.shape)))
    if not fits:
        raise ValueError(f"scatter index {index} must have the rank of {x} and {src}, and no larger dims "
                         f"than src, nor than x but in dim {axis}")
    return x


@register("scatter", ["x", "index", "src"], {"dim": INT(), "reduce": STR("none", choices=("none", "add"))},
          infer=_scatter_type)
def scatter(x, index, src, dim, reduce):
    """torch.scatter / scatter_add: a copy of x with out[index[i][j]][j] = src[i][j] (dim 0), or
    += with reduce="add", repeated positions adding up; src's leading part matches index."""
    out = x.copy()
    where = _along(index, dim % x.ndim)
    values = src[tuple(slice(0, n) for n in index.shape)].astype(x.dtype, copy=False)
    if reduce == "add":
        np.add.at(out, where, values)
    else:
        out[where] = values
    return out


# -- slice scatter -----------------------------------------------------------------------------------


def _slice_scatter_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, src = types
    if any(s <= 0 for s in attrs["steps"]):
        raise ValueError(f"slice_scatter steps {attrs['steps']} must be positive")
    index = slice_index(x.shape, attrs)
    target = tuple(len(range(*s.indices(n))) for s, n in zip(index, x.shape, strict=True))
    if src.shape != target:
        raise ValueError(f"slice_scatter source {src} does not have the slice's shape {target}")
    return x


@register("slice_scatter", ["x", "src"], {"axes": INTS(), "starts": INTS(), "ends": INTS(), "steps": INTS()},
          infer=_slice_scatter_type)
def slice_scatter(x, src, axes, starts, ends, steps):
    """torch.slice_scatter: a copy of x with the slice (bounds as the slice op's) replaced by src."""
    out = x.copy()
    out[slice_index(x.shape, {"axes": axes, "starts": starts, "ends": ends, "steps": steps})] = src
    return out


# -- sliding blocks: unfold (im2col) and fold (col2im) --------------------------------------------------

_BLOCK_ATTRS = {"kernel": INTS(), "stride": INTS(), "padding": INTS(), "dilation": INTS()}


def _block_grid(size: tuple[int, int], attrs: dict) -> tuple[int, int]:
    """The number of block positions along each of the two spatial dims."""
    for key in _BLOCK_ATTRS:
        if len(attrs[key]) != 2 or min(attrs[key]) < (0 if key == "padding" else 1):
            least = "non-negative" if key == "padding" else "positive"
            raise ValueError(f"{key} {attrs[key]} must be two {least} ints")
    return tuple(conv_out_size(n, k, s, p, p, d)
                 for n, k, s, p, d in zip(size, attrs["kernel"], attrs["stride"], attrs["padding"], attrs["dilation"]))


def _tap_window(i: int, j: int, grid: tuple[int, int], attrs: dict) -> tuple:
    """The padded image's elements that tap (i, j) of every block touches, as a strided slice."""
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    return (..., slice(i * dh, i * dh + sh * (grid[0] - 1) + 1, sh), slice(j * dw, j * dw + sw * (grid[1] - 1) + 1, sw))


def _unfold_type(types: list[TensorType], attrs: dict) -> TensorType:
    x = types[0]
    if x.rank != 4:
        raise ValueError(f"unfold needs an (N, C, H, W) tensor, got {x}")
    n, c, h, w = x.shape
    oh, ow = _block_grid((h, w), attrs)
    kh, kw = attrs["kernel"]
    return x.with_shape((n, c * kh * kw, oh * ow))


@register("unfold", ["x"], _BLOCK_ATTRS, infer=_unfold_type)
def unfold(x, kernel, stride, padding, dilation):
    """torch's F.unfold (im2col): every sliding block as a column, (N, C*kh*kw, L); row
    c*kh*kw + i*kw + j holds tap (i, j) of channel c. One strided slice per tap."""
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation}
    n, c, h, w = x.shape
    grid = _block_grid((h, w), attrs)
    (ph, pw), (kh, kw) = padding, kernel
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    taps = [padded[_tap_window(i, j, grid, attrs)] for i in range(kh) for j in range(kw)]
    return np.stack(taps, axis=2).reshape(n, c * kh * kw, grid[0] * grid[1])


def _fold_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, (oh, ow) = types[0], attrs["output_size"]
    kh, kw = attrs["kernel"]
    if x.rank != 3 or x.shape[1] % (kh * kw):
        raise ValueError(f"fold needs an (N, C*{kh}*{kw}, L) tensor, got {x}")
    grid = _block_grid((oh, ow), attrs)
    if x.shape[2] != grid[0] * grid[1]:
        raise ValueError(f"fold of {x} to {(oh, ow)}: expected {grid[0]} * {grid[1]} blocks, got {x.shape[2]}")
    return x.with_shape((x.shape[0], x.shape[1] // (kh * kw), oh, ow))


@register("fold", ["x"], {"output_size": INTS(), **_BLOCK_ATTRS}, infer=_fold_type)
def fold(x, output_size, kernel, stride, padding, dilation):
    """torch's F.fold (col2im), unfold's adjoint: each column's taps are added into the image
    where unfold took them from, overlaps summing; taps in (c, i, j) order, as torch adds them."""
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation}
    (oh, ow), (ph, pw), (kh, kw) = output_size, padding, kernel
    grid = _block_grid((oh, ow), attrs)
    n, c = x.shape[0], x.shape[1] // (kh * kw)
    cols = x.reshape(n, c, kh, kw, *grid)
    padded = np.zeros((n, c, oh + 2 * ph, ow + 2 * pw), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            padded[_tap_window(i, j, grid, attrs)] += cols[:, :, i, j]
    return padded[:, :, ph:ph + oh, pw:pw + ow]
