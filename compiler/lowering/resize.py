"""Lowering of upsampling: nn.Upsample, nn.UpsamplingNearest2d/Bilinear2d, F.interpolate,
F.upsample, F.upsample_nearest, F.upsample_bilinear.

pnnx writes either `size=(h,w)` or `scale_factor=(sh,sw)` (always a float tuple, with
float32 precision). With a scale factor, torch computes the output size as
floor(in * factor) and, unless recompute_scale_factor=True, also maps coordinates
with 1/factor rather than in/out; the IR keeps the factor in `scales` for that.
UpsamplingBilinear2d and F.upsample_bilinear imply align_corners=True.
"""

from __future__ import annotations

import math

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.params import param_value, tensor_input

# torch mode -> (IR mode, number of spatial dims it requires, or None for any)
_MODES = {
    "nearest": ("nearest", None),
    "nearest-exact": ("nearest_exact", None),
    "linear": ("linear", 1),
    "bilinear": ("linear", 2),
    "trilinear": ("linear", 3),
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
