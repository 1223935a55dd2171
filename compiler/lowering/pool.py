"""Lowering of pooling: nn.{Max,Avg,AdaptiveAvg,AdaptiveMax}Pool{1,2,3}d, nn.LPPool{1,2,3}d and
their F.* forms.

Every pool runs on the 2-D ops (and their numba kernels), over views of its input:
- 1-D pools pool (N, C, L) viewed as (N, C, 1, L), with a unit window along the height;
- 3-D pools are separable (a box's max is the max over its planes of each plane's max; its
  average, the planes' averages averaged, torch's divisor being the product of the window's
  extents along each axis), so they pool (N, C*D, H, W) over H and W, then (N*C, 1, D, OH*OW)
  over D;
- torch's unbatched inputs ((C, L), (C, H, W), (C, D, H, W)) get a batch of one.
Max pooling's indices cannot be split that way: 3-D ones have their own ops
(max_pool3d_indices, adaptive_max_pool3d_indices); 1-D ones, flat positions in a unit-height
plane, are the 2-D ops' indices as they are.

pnnx writes F.adaptive_max_pool2d with return_indices=True and two outputs even
when the model only uses the values (torch's functional form computes both), so
an index output becomes its own *_indices node that dead-code removal can drop.

LPPool is torch's formula on these ops: (avg_pool(x ** p) * kernel area) ** (1 / p).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from compiler.lowering.conv import ntuple
from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.params import reshaped
from ir.graph import Value

# a pooling window along one axis: (kernel, stride, padding, dilation)
Window = tuple[int, int, int, int]
_UNIT: Window = (1, 1, 0, 1)

# builds a 2-D (or 3-D indices) op's attrs for pooling the given spatial axes (None: a unit axis
# of the view) of a view of the given shape; `last` is False for a 3-D pool's first (H, W) stage
AttrsFor = Callable[[tuple, tuple[int, ...], bool], dict]


def _dims(ctx: OpContext) -> int:
    """Spatial dims of the op, from the digit of its spelling (nn.MaxPool3d, F.avg_pool1d...)."""
    return int(ctx.op.type.rstrip("d")[-1])


def _pooled_input(ctx: OpContext, dims: int, x: Value | None = None) -> Value:
    """The pooled input: (N, C, *spatial) or torch's unbatched (C, *spatial)."""
    x = ctx.input(0) if x is None else x
    if x.type.rank not in (dims + 1, dims + 2):
        raise Unsupported(f"input of rank {x.type.rank} (expected {dims + 1} or {dims + 2})")
    return x


def _stage(ctx: OpContext, ir_op: str, x: Value, view: tuple[int, ...], attrs: dict, out: str | None = None) -> Value:
    """ir_op on x viewed as `view`; its output named `out` (a pnnx output) or a temp."""
    return ctx.emit(ir_op, [reshaped(ctx, x, view, "view")], attrs, outputs=[out or ctx.temp(ir_op)])[0]


def _pool(ctx: OpContext, ir_op: str, x: Value, dims: int, attrs_for: AttrsFor, out: str) -> Value:
    """The 2-D pool ir_op over the last `dims` axes of x, bound to `out`."""
    unbatched = x.type.rank == dims + 1
    (n, c), spatial, lead = ((1,) if unbatched else ()) + x.shape[:-dims], x.shape[-dims:], x.shape[:-dims]
    if dims == 2 and not unbatched:
        return _stage(ctx, ir_op, x, x.shape, attrs_for((0, 1), x.shape, True), out)
    if dims == 1:
        view = (n, c, 1, *spatial)
        y = _stage(ctx, ir_op, x, view, attrs_for((None, 0), view, True))
        shape = lead + y.shape[3:]
    elif dims == 2:
        view = (1, c, *spatial)
        y = _stage(ctx, ir_op, x, view, attrs_for((0, 1), view, True))
        shape = lead + y.shape[2:]
    else:
        d, h, w = spatial
        view = (n, c * d, h, w)
        planes = _stage(ctx, ir_op, x, view, attrs_for((1, 2), view, False))
        oh, ow = planes.shape[2:]
        view = (n * c, 1, d, oh * ow)
        y = _stage(ctx, ir_op, planes, view, attrs_for((0, None), view, True))
        shape = lead + (y.shape[2], oh, ow)
    return ctx.emit("reshape", [y], {"shape": shape}, outputs=[out])[0]


def _indices(ctx: OpContext, x: Value, dims: int, ir_op_2d: str, ir_op_3d: str, attrs_for: AttrsFor,
             out: str) -> Value:
    """Max pooling's indices: the 2-D op over a (unit-height) plane, the 3-D op over a volume."""
    unbatched = x.type.rank == dims + 1
    view = ((1,) if unbatched else ()) + x.shape
    if dims == 1:
        view = view[:2] + (1,) + view[2:]
    axes = (None, 0) if dims == 1 else tuple(range(dims))
    attrs = attrs_for(axes, view, True)
    if view == x.shape:
        return _stage(ctx, ir_op_3d if dims == 3 else ir_op_2d, x, view, attrs, out)
    y = _stage(ctx, ir_op_3d if dims == 3 else ir_op_2d, x, view, attrs)
    shape = x.shape[:-dims] + y.shape[-dims:]
    return ctx.emit("reshape", [y], {"shape": shape}, outputs=[out])[0]


def _emit_with_indices(ctx: OpContext, values: Callable[[str], Value], indices: Callable[[str], Value]) -> None:
    """The values, plus the indices when pnnx asks for them; values(name) and indices(name) emit
    them as the value named `name`.

    pnnx gives indices as a second output (F.* and nn.MaxPool*), or (nn.AdaptiveMaxPool*) as one
    (values, indices) tuple output that a prim::TupleUnpack splits. It sometimes writes the two
    outputs indices-first, so the i64 annotation, not the position, says which is which."""
    outputs = list(ctx.op.outputs)
    if len(outputs) > 2:
        raise ctx.format_error(f"expected at most 2 outputs, got {len(outputs)}")
    if len(outputs) == 1 and ctx.param("return_indices", False):
        ctx.alias(outputs[0], [values(ctx.temp("values")), indices(ctx.temp("indices"))])
        return
    if len(outputs) == 1 and ctx.annotated_dtype(outputs[0]) == "i64":
        # a module called twice for values and indices: pnnx merges the calls into one wrong op
        raise Unsupported("pnnx wrote a single i64 output used as both values and indices")
    if len(outputs) == 2 and ctx.annotated_dtype(outputs[0]) == "i64":
        outputs.reverse()
    values(outputs[0])
    if len(outputs) == 2:
        indices(outputs[1])


# -- windowed pooling ---------------------------------------------------------------------------


def _windows(ctx: OpContext, dims: int, dilated: bool, padded: bool = True) -> tuple[Window, ...]:
    """Each spatial axis's window; a missing stride (None) is the kernel, as torch."""
    kernel = ntuple(ctx.param("kernel_size"), dims, "kernel_size", ctx)
    stride = ctx.param("stride", None)
    stride = kernel if stride in (None, ()) else ntuple(stride, dims, "stride", ctx)
    padding = ntuple(ctx.param("padding", 0), dims, "padding", ctx) if padded else (0,) * dims
    dilation = ntuple(ctx.param("dilation", 1), dims, "dilation", ctx) if dilated else (1,) * dims
    return tuple(zip(kernel, stride, padding, dilation, strict=True))


def _window_attrs(windows: tuple[Window, ...], axes: tuple, ceil_mode: bool, dilated: bool) -> dict:
    """kernel, stride, padding (befores then afters) and ceil_mode (and dilation) over `axes`."""
    ws = [_UNIT if a is None else windows[a] for a in axes]
    attrs = {
        "kernel": tuple(w[0] for w in ws),
        "stride": tuple(w[1] for w in ws),
        "padding": tuple(w[2] for w in ws) * 2,
        "ceil_mode": ceil_mode,
    }
    if dilated:
        attrs["dilation"] = tuple(w[3] for w in ws)
    return attrs


@lowers("nn.MaxPool1d", "nn.MaxPool2d", "nn.MaxPool3d", "F.max_pool1d", "F.max_pool2d", "F.max_pool3d")
def max_pool(ctx: OpContext) -> None:
    dims = _dims(ctx)
    windows, ceil_mode = _windows(ctx, dims, dilated=True), bool(ctx.param("ceil_mode", False))
    x = _pooled_input(ctx, dims)

    def attrs_for(axes, view, last):
        return _window_attrs(windows, axes, ceil_mode, dilated=True)

    _emit_with_indices(
        ctx,
        lambda out: _pool(ctx, "max_pool2d", x, dims, attrs_for, out),
        lambda out: _indices(ctx, x, dims, "max_pool2d_indices", "max_pool3d_indices", attrs_for, out))


def _avg_pool(ctx: OpContext, x: Value, dims: int, windows: tuple[Window, ...], ceil_mode: bool,
              count_include_pad: bool, divisor: int | None, out: str) -> Value:
    """avg_pool2d over the last `dims` axes. A 3-D pool's (H, W) stage divides by its own part of
    torch's divisor (the window's extent along H times W) and the D stage by the rest; with a
    divisor_override the first stage only sums."""

    def attrs_for(axes, view, last):
        return {**_window_attrs(windows, axes, ceil_mode, dilated=False), "count_include_pad": count_include_pad,
                "divisor_override": divisor if last or divisor is None else 1}

    return _pool(ctx, "avg_pool2d", x, dims, attrs_for, out)


@lowers("nn.AvgPool1d", "nn.AvgPool2d", "nn.AvgPool3d", "F.avg_pool1d", "F.avg_pool2d", "F.avg_pool3d")
def avg_pool(ctx: OpContext) -> None:
    dims = _dims(ctx)
    divisor = ctx.param("divisor_override", None)
    if divisor is not None and (not isinstance(divisor, int) or divisor <= 0):
        raise ctx.format_error(f"divisor_override={divisor!r} is not a positive int")
    _avg_pool(ctx, _pooled_input(ctx, dims), dims, _windows(ctx, dims, dilated=False),
              bool(ctx.param("ceil_mode", False)), bool(ctx.param("count_include_pad", True)), divisor,
              ctx.op.outputs[0])


@lowers("nn.LPPool1d", "nn.LPPool2d", "nn.LPPool3d", "F.lp_pool1d", "F.lp_pool2d", "F.lp_pool3d")
def lp_pool(ctx: OpContext) -> None:
    """torch's (sign(a) * relu(|a|) * kernel area) ** (1 / p), a = avg_pool(x ** p) without padding
    (sign(a) * relu(|a|) is a itself)."""
    dims = _dims(ctx)
    x = _pooled_input(ctx, dims)
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise Unsupported(f"{x.dtype} input")
    norm_type = ctx.param("norm_type")
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)) or not 0 < norm_type < math.inf:
        raise Unsupported(f"norm_type={norm_type!r}")
    windows = _windows(ctx, dims, dilated=False, padded=False)

    def scalar(name: str, value: float) -> Value:
        return ctx.const(name, np.array(value, dtype=x.dtype))

    (powered,) = ctx.emit("pow", [x, scalar("norm_type", norm_type)], outputs=[ctx.temp("pow")])
    mean = _avg_pool(ctx, powered, dims, windows, bool(ctx.param("ceil_mode", False)), True, None,
                     ctx.temp("mean"))
    area = math.prod(w[0] for w in windows)
    (total,) = ctx.emit("mul", [mean, scalar("area", area)], outputs=[ctx.temp("sum")])
    ctx.emit("pow", [total, scalar("inverse_norm_type", 1.0 / norm_type)])


# -- adaptive pooling -----------------------------------------------------------------------------


def _adaptive_size(ctx: OpContext, x: Value, dims: int) -> tuple[int, ...]:
    """output_size as dims ints; pnnx writes torch's None (keep that input dim) as 0."""
    size = ctx.param("output_size")
    if isinstance(size, tuple) and any(s is None for s in size):
        size = tuple(0 if s is None else s for s in size)
    size = ntuple(size, dims, "output_size", ctx)
    return tuple(s or n for s, n in zip(size, x.shape[-dims:], strict=True))


def _adaptive_attrs(size: tuple[int, ...]) -> AttrsFor:
    def attrs_for(axes, view, last):
        # a unit axis of the view keeps its size: one-element bins
        return {"output_size": tuple(view[2 + j] if a is None else size[a] for j, a in enumerate(axes))}

    return attrs_for


@lowers("nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "nn.AdaptiveAvgPool3d",
        "F.adaptive_avg_pool1d", "F.adaptive_avg_pool2d", "F.adaptive_avg_pool3d")
def adaptive_avg_pool(ctx: OpContext) -> None:
    dims = _dims(ctx)
    x = _pooled_input(ctx, dims)
    _pool(ctx, "adaptive_avg_pool2d", x, dims, _adaptive_attrs(_adaptive_size(ctx, x, dims)), ctx.op.outputs[0])


@lowers("nn.AdaptiveMaxPool1d", "nn.AdaptiveMaxPool2d", "nn.AdaptiveMaxPool3d",
        "F.adaptive_max_pool1d", "F.adaptive_max_pool2d", "F.adaptive_max_pool3d")
def adaptive_max_pool(ctx: OpContext) -> None:
    dims = _dims(ctx)
    x = _pooled_input(ctx, dims)
    attrs_for = _adaptive_attrs(_adaptive_size(ctx, x, dims))
    _emit_with_indices(
        ctx,
        lambda out: _pool(ctx, "adaptive_max_pool2d", x, dims, attrs_for, out),
        lambda out: _indices(ctx, x, dims, "adaptive_max_pool2d_indices", "adaptive_max_pool3d_indices",
                             attrs_for, out))
