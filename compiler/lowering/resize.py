"""Lowering of upsampling and sampling: nn.Upsample, nn.UpsamplingNearest2d/Bilinear2d,
F.interpolate, F.upsample, F.upsample_nearest, F.upsample_bilinear (to resize, or
resize_cubic for bicubic), F.grid_sample (to grid_sample) and F.affine_grid (to a
matmul of a constant base grid by the transposed theta).

pnnx writes either `size=(h,w)` or `scale_factor=(sh,sw)` (always a float tuple, with
float32 precision). With a scale factor, torch computes the output size as
floor(in * factor) and, unless recompute_scale_factor=True, also maps coordinates
with 1/factor rather than in/out; the IR keeps the factor in `scales` for that.
UpsamplingBilinear2d and F.upsample_bilinear imply align_corners=True. pnnx writes
mode="area" as F.adaptive_avg_pool*d and antialias=True as an aten op of its own,
so neither reaches these rules.
"""

from __future__ import annotations

import math

import numpy as np

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.params import param_value, tensor_input
from ir.ops.resize import GRID_MODES, PADDING_MODES

# torch mode -> (IR mode, number of spatial dims it requires, or None for any)
_MODES = {
    "nearest": ("nearest", None),
    "nearest-exact": ("nearest_exact", None),
    "linear": ("linear", 1),
    "bilinear": ("linear", 2),
    "trilinear": ("linear", 3),
    "bicubic": ("cubic", 2),
}


def _per_axis(ctx: OpContext, key: str, value, n: int, kind: type) -> tuple:
    """An int/float or a tuple of them, as one value per spatial axis."""
    items = value if isinstance(value, tuple) else (value,)
    if len(items) == 1:
        items *= n
    if len(items) != n or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        raise ctx.format_error(f"param {key}={value!r} is not one {kind.__name__} or {n} of them")
    return tuple(kind(v) for v in items)


def _scaled_size(ctx: OpContext, spatial: tuple[int, ...], factors: tuple[float, ...]) -> tuple[int, ...]:
    """floor(in * factor) per axis, as torch; pnnx's annotation wins where it has the size,
    because pnnx keeps factors in float32: 7/3 is written 2.33333325, and floor(9 * that)
    is 20 where torch gets 21."""
    annotated = ctx.annotated_shape(ctx.op.outputs[0]) or (None,) * (len(spatial) + 2)
    return tuple(a if a is not None else math.floor(n * f)
                 for n, f, a in zip(spatial, factors, annotated[-len(spatial):], strict=True))


def emit_resize(ctx: OpContext, mode: str, align_corners: bool) -> None:
    x = tensor_input(ctx, "size", "scale_factor")
    if mode not in _MODES:
        raise Unsupported(f"mode={mode}")
    if ctx.param("antialias", False):
        raise Unsupported("antialias=True")
    ir_mode, spatial_rank = _MODES[mode]
    spatial = x.shape[2:]
    if not spatial or (spatial_rank is not None and len(spatial) != spatial_rank):
        raise ctx.format_error(f"mode={mode} does not fit input {x.type}")
    size, factor = param_value(ctx, "size", None), param_value(ctx, "scale_factor", None)
    if size is not None:
        out_size, scales = _per_axis(ctx, "size", size, len(spatial), int), None
    elif factor is not None:
        factors = _per_axis(ctx, "scale_factor", factor, len(spatial), float)
        out_size = _scaled_size(ctx, spatial, factors)
        scales = None if ctx.param("recompute_scale_factor", False) else factors
    else:
        raise ctx.format_error("neither size nor scale_factor is given")
    if ir_mode == "cubic":
        ctx.emit("resize_cubic", [x], {"size": out_size, "align_corners": bool(align_corners), "scales": scales})
        return
    ctx.emit("resize", [x], {
        "size": out_size,
        "mode": ir_mode,
        "align_corners": bool(align_corners) and ir_mode == "linear",
        "scales": scales,
    })


@lowers("nn.Upsample", "F.interpolate", "F.upsample")
def interpolate(ctx: OpContext) -> None:
    emit_resize(ctx, ctx.param("mode", "nearest"), ctx.param("align_corners", False) or False)


@lowers("nn.UpsamplingNearest2d", "F.upsample_nearest")
def upsample_nearest(ctx: OpContext) -> None:
    emit_resize(ctx, "nearest", False)


@lowers("nn.UpsamplingBilinear2d", "F.upsample_bilinear")
def upsample_bilinear(ctx: OpContext) -> None:
    emit_resize(ctx, "bilinear", True)


@lowers("F.grid_sample")
def grid_sample(ctx: OpContext) -> None:
    mode, padding_mode = ctx.param("mode", "bilinear"), ctx.param("padding_mode", "zeros")
    if mode not in GRID_MODES:
        raise Unsupported(f"mode={mode}")
    if padding_mode not in PADDING_MODES:
        raise Unsupported(f"padding_mode={padding_mode}")
    x, grid = ctx.input_named("input") or ctx.input(0), ctx.input_named("grid") or ctx.input(1)
    if mode == "bicubic" and x.type.rank != 4:
        raise ctx.format_error(f"mode=bicubic takes a 4-D input, got {x.type}")
    ctx.emit("grid_sample", [x, grid],
             {"mode": mode, "padding_mode": padding_mode, "align_corners": bool(ctx.param("align_corners", False))})


def linspace_from_neg_one(steps: int, align_corners: bool) -> np.ndarray:
    """torch's affine_grid axis: linspace(-1, 1, steps) in float32 (from both ends, each point
    start + step * i rounded once, as torch's fused multiply-add), scaled by (steps - 1) / steps
    without align_corners; 0 for one step."""
    f = np.float32
    if steps <= 1:
        return np.zeros(1, f)
    i, step = np.arange(steps), np.float64(f(2) / f(steps - 1))
    ramp = np.where(i < steps // 2, -1 + step * i, 1 - step * (steps - 1 - i)).astype(f)
    return ramp if align_corners else ramp * f(steps - 1) / f(steps)


def affine_base_grid(spatial: tuple[int, ...], align_corners: bool) -> np.ndarray:
    """(prod(spatial), k + 1) homogeneous pixel coordinates (x, y[, z], 1), x fastest."""
    axes = [linspace_from_neg_one(n, align_corners) for n in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # one (D,) H, W array per spatial axis
    columns = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size, np.float32)]
    return np.stack(columns, axis=1)


@lowers("F.affine_grid")
def affine_grid(ctx: OpContext) -> None:
    """grid[n, ..., :] = theta[n] @ (x, y[, z], 1): a constant base grid times theta transposed."""
    theta = tensor_input(ctx, "size")
    size = param_value(ctx, "size")
    if not isinstance(size, tuple) or len(size) not in (4, 5):
        raise ctx.format_error(f"size={size!r} is not an (N, C, H, W) or (N, C, D, H, W) size")
    spatial, k = tuple(size[2:]), len(size) - 2
    if theta.type.shape != (size[0], k, k + 1):
        raise ctx.format_error(f"theta {theta.type} must be ({size[0]}, {k}, {k + 1}) for size {size}")
    if not np.issubdtype(np.dtype(theta.type.dtype), np.floating):
        raise Unsupported(f"theta of dtype {theta.type.dtype}")
    base = ctx.const("base_grid", affine_base_grid(spatial, bool(ctx.param("align_corners", False)))
                     .astype(theta.type.dtype))
    (theta_t,) = ctx.emit("transpose", [theta], {"perm": (0, 2, 1)}, outputs=[ctx.temp("theta_t")])
    (flat,) = ctx.emit("matmul", [base, theta_t], outputs=[ctx.temp("grid")])
    ctx.emit("reshape", [flat], {"shape": (size[0],) + spatial + (k,)})
