"""Data movement: reshape, transpose, concat, split, slice, expand, tile, pixel (un)shuffle.

These ops only move elements, so each returns its input's dtype (concat promotes,
as torch.cat does). Attributes are static and explicit: target shapes hold no -1
(the lowering resolves it) and slice bounds follow python slicing, which the
lowering also canonicalises (0 <= start <= end <= dim), so a kernel can read them
without knowing torch's conventions.
"""

from __future__ import annotations

import math

import numpy as np

from ir.op_registry import INT, INTS, register
from ir.ops.common import normalize_axis, promote
from ir.types import TensorType


def _with_dim(shape: tuple[int, ...], axis: int, size: int) -> tuple[int, ...]:
    return shape[:axis] + (size,) + shape[axis + 1:]


def _require_rank(x: TensorType, rank: int, op: str) -> None:
    if x.rank < rank:
        raise ValueError(f"{op} needs a tensor of rank >= {rank}, got {x}")


# -- reshape / transpose -------------------------------------------------------------


def _reshape_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, shape = types[0], attrs["shape"]
    if any(d < 0 for d in shape):
        raise ValueError(f"reshape target {shape} has a negative size (-1 must be resolved before)")
    if math.prod(shape) != x.size:
        raise ValueError(f"cannot reshape {x} ({x.size} elements) to {shape} ({math.prod(shape)} elements)")
    return x.with_shape(shape)


@register("reshape", ["x"], {"shape": INTS()}, infer=_reshape_type)
def reshape(x, shape):
    return x.reshape(shape)


def _transpose_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, perm = types[0], attrs["perm"]
    if sorted(perm) != list(range(x.rank)):
        raise ValueError(f"perm {perm} is not a permutation of the {x.rank} axes of {x}")
    return x.with_shape(tuple(x.shape[p] for p in perm))


@register("transpose", ["x"], {"perm": INTS()}, infer=_transpose_type)
def transpose(x, perm):
    return x.transpose(perm)


# -- concat / split ----------------------------------------------------------------------


def _concat_type(types: list[TensorType], attrs: dict) -> TensorType:
    first = types[0]
    _require_rank(first, 1, "concat")
    axis = normalize_axis(attrs["dim"], first.rank)
    for t in types[1:]:
        if t.rank != first.rank or _with_dim(t.shape, axis, 0) != _with_dim(first.shape, axis, 0):
            raise ValueError(f"concat along dim {axis}: {t} does not match {first} outside that axis")
    return TensorType(_with_dim(first.shape, axis, sum(t.shape[axis] for t in types)), concat_dtype(types))


def concat_dtype(types: list[TensorType]) -> str:
    """torch.cat's promotion: like numpy's, except that floats win over integers without
    widening (f32 with i64 is f32 in torch, f64 in numpy)."""
    floats = [t for t in types if np.issubdtype(np.dtype(t.dtype), np.floating)]
    return promote(floats or types)


@register("concat", ["xs*"], {"dim": INT()}, infer=_concat_type)
def concat(*xs, dim):
    return np.concatenate(xs, axis=dim, dtype=concat_dtype([TensorType.of(x) for x in xs]))


def _split_type(types: list[TensorType], attrs: dict) -> list[TensorType]:
    x, sizes = types[0], attrs["sizes"]
    _require_rank(x, 1, "split")
    axis = normalize_axis(attrs["dim"], x.rank)
    if not sizes or any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise ValueError(f"split sizes {sizes} do not add up to dim {axis} of {x}")
    return [x.with_shape(_with_dim(x.shape, axis, s)) for s in sizes]


@register("split", ["x"], {"dim": INT(), "sizes": INTS()}, infer=_split_type)
def split(x, dim, sizes):
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=dim))


# -- slice ------------------------------------------------------------------------------


def slice_index(shape: tuple[int, ...], attrs: dict) -> tuple[slice, ...]:
    """The numpy index of a slice op: python slice semantics per listed axis (negative
    bounds count from the end, out-of-range bounds clamp), the full range elsewhere."""
    index = [slice(None)] * len(shape)
    for axis, start, end, step in zip(attrs["axes"], attrs["starts"], attrs["ends"], attrs["steps"], strict=True):
        index[axis] = slice(start, end, step)
    return tuple(index)


def _slice_type(types: list[TensorType], attrs: dict) -> TensorType:
    x = types[0]
    axes, starts, ends, steps = attrs["axes"], attrs["starts"], attrs["ends"], attrs["steps"]
    if not len(axes) == len(starts) == len(ends) == len(steps):
        raise ValueError(f"slice axes/starts/ends/steps differ in length: {axes} {starts} {ends} {steps}")
    norm = [normalize_axis(a, x.rank) for a in axes]
    if len(set(norm)) != len(norm):
        raise ValueError(f"slice axes {axes} repeat an axis")
    if any(s <= 0 for s in steps):
        raise ValueError(f"slice steps {steps} must be positive (as torch requires)")
    index = slice_index(x.shape, {**attrs, "axes": norm})
    return x.with_shape(tuple(len(range(*s.indices(n))) for s, n in zip(index, x.shape, strict=True)))


@register("slice", ["x"], {"axes": INTS(), "starts": INTS(), "ends": INTS(), "steps": INTS()},
          infer=_slice_type)
def slice_(x, axes, starts, ends, steps):
    return x[slice_index(x.shape, {"axes": axes, "starts": starts, "ends": ends, "steps": steps})]


# -- expand / tile --------------------------------------------------------------------------


def _expand_type(types: list[TensorType], attrs: dict) -> TensorType:
    """numpy broadcasting to an explicit target: x's dims align with the trailing target dims."""
    x, shape = types[0], tuple(attrs["shape"])
    lead = len(shape) - x.rank
    fits = lead >= 0 and all(d in (s, 1) for d, s in zip(x.shape, shape[max(lead, 0):], strict=True))
    if not fits or min(shape, default=0) < 0:
        raise ValueError(f"cannot expand {x} to {shape}: each dim must equal the target or be 1")
    return x.with_shape(shape)


@register("expand", ["x"], {"shape": INTS()}, infer=_expand_type)
def expand(x, shape):
    return np.broadcast_to(x, shape)


def _tile_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, repeats = types[0], attrs["repeats"]
    if len(repeats) < x.rank or any(r < 0 for r in repeats):
        raise ValueError(f"tile repeats {repeats} must be >= 0 and cover all {x.rank} dims of {x}")
    padded = (1,) * (len(repeats) - x.rank) + x.shape
    return x.with_shape(tuple(d * r for d, r in zip(padded, repeats, strict=True)))


@register("tile", ["x"], {"repeats": INTS()}, infer=_tile_type)
def tile(x, repeats):
    """torch's Tensor.repeat: extra leading repeats add new leading dims."""
    return np.tile(x, repeats)


# -- pixel shuffle ------------------------------------------------------------------------------


def _pixel_shuffle_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, r = types[0], attrs["upscale"]
    _require_rank(x, 3, "pixel_shuffle")
    *batch, c, h, w = x.shape
    if r < 1 or c % (r * r):
        raise ValueError(f"pixel_shuffle: channels {c} of {x} are not divisible by upscale^2 = {r * r}")
    return x.with_shape((*batch, c // (r * r), h * r, w * r))


@register("pixel_shuffle", ["x"], {"upscale": INT()}, infer=_pixel_shuffle_type)
def pixel_shuffle(x, upscale):
    r, nb = upscale, x.ndim - 3
    *batch, c, h, w = x.shape
    y = x.reshape(*batch, c // (r * r), r, r, h, w)
    y = y.transpose(*range(nb), nb, nb + 3, nb + 1, nb + 4, nb + 2)  # (*, C, H, r, W, r)
    return y.reshape(*batch, c // (r * r), h * r, w * r)


def _pixel_unshuffle_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, r = types[0], attrs["downscale"]
    _require_rank(x, 3, "pixel_unshuffle")
    *batch, c, h, w = x.shape
    if r < 1 or h % r or w % r:
        raise ValueError(f"pixel_unshuffle: spatial dims of {x} are not divisible by downscale {r}")
    return x.with_shape((*batch, c * r * r, h // r, w // r))


@register("pixel_unshuffle", ["x"], {"downscale": INT()}, infer=_pixel_unshuffle_type)
def pixel_unshuffle(x, downscale):
    r, nb = downscale, x.ndim - 3
    *batch, c, h, w = x.shape
    y = x.reshape(*batch, c, h // r, r, w // r, r)
    y = y.transpose(*range(nb), nb, nb + 2, nb + 4, nb + 1, nb + 3)  # (*, C, r, r, H, W)
    return y.reshape(*batch, c * r * r, h // r, w // r)
