"""Lowering of 2-D pooling: nn.MaxPool2d, nn.AvgPool2d, nn.Adaptive{Avg,Max}Pool2d and their F.* forms.

pnnx writes F.adaptive_max_pool2d with return_indices=True and two outputs even
when the model only uses the values (torch's functional form computes both), so
an index output becomes its own *_indices node that dead-code removal can drop.
"""

from __future__ import annotations

from compiler.lowering.conv import pair
from compiler.lowering.core import OpContext, Unsupported, lowers
from ir.graph import Value


def _nchw_input(ctx: OpContext) -> Value:
    """The pooled input; torch also accepts unbatched (C, H, W), which we do not."""
    x = ctx.input(0)
    if x.type.rank != 4:
        raise Unsupported(f"input of rank {x.type.rank} (only 4-D NCHW)")
    return x


def _window_attrs(ctx: OpContext) -> dict:
    """kernel, stride (None means the kernel, as torch), padding as (top, left, bottom, right), ceil_mode."""
    kernel = pair(ctx.param("kernel_size"), "kernel_size", ctx)
    stride = ctx.param("stride", None)
    ph, pw = pair(ctx.param("padding", 0), "padding", ctx)
    return {
        "kernel": kernel,
        "stride": kernel if stride in (None, ()) else pair(stride, "stride", ctx),
        "padding": (ph, pw, ph, pw),
        "ceil_mode": bool(ctx.param("ceil_mode", False)),
    }


def _emit_with_indices(ctx: OpContext, ir_op: str, attrs: dict) -> None:
    """The values op, plus the indices op when pnnx asks for indices.

    pnnx gives indices as a second output (F.* and nn.MaxPool2d), or (nn.AdaptiveMaxPool2d) as one
    (values, indices) tuple output that a prim::TupleUnpack splits. It sometimes writes the two
    outputs indices-first, so the i64 annotation, not the position, says which is which."""
    outputs = list(ctx.op.outputs)
    if len(outputs) > 2:
        raise ctx.format_error(f"expected at most 2 outputs, got {len(outputs)}")
    x = _nchw_input(ctx)
    if len(outputs) == 1 and ctx.param("return_indices", False):
        (values,) = ctx.emit(ir_op, [x], attrs, outputs=[ctx.temp("values")])
        (indices,) = ctx.emit(f"{ir_op}_indices", [x], attrs, outputs=[ctx.temp("indices")])
        ctx.alias(outputs[0], [values, indices])
        return
    if len(outputs) == 1 and ctx.annotated_dtype(outputs[0]) == "i64":
        # a module called twice for values and indices: pnnx merges the calls into one wrong op
        raise Unsupported("pnnx wrote a single i64 output used as both values and indices")
    if len(outputs) == 2 and ctx.annotated_dtype(outputs[0]) == "i64":
        outputs.reverse()
    ctx.emit(ir_op, [x], attrs, outputs=outputs[:1])
    if len(outputs) == 2:
        ctx.emit(f"{ir_op}_indices", [x], attrs, outputs=outputs[1:])


@lowers("nn.MaxPool2d", "F.max_pool2d")
def max_pool2d(ctx: OpContext) -> None:
    attrs = {**_window_attrs(ctx), "dilation": pair(ctx.param("dilation", 1), "dilation", ctx)}
    _emit_with_indices(ctx, "max_pool2d", attrs)


@lowers("nn.AvgPool2d", "F.avg_pool2d")
def avg_pool2d(ctx: OpContext) -> None:
    divisor = ctx.param("divisor_override", None)
    if divisor is not None and (not isinstance(divisor, int) or divisor <= 0):
        raise ctx.format_error(f"divisor_override={divisor!r} is not a positive int")
    ctx.emit("avg_pool2d", [_nchw_input(ctx)], {
        **_window_attrs(ctx),
        "count_include_pad": bool(ctx.param("count_include_pad", True)),
        "divisor_override": divisor,
    })


def _adaptive_size(ctx: OpContext) -> tuple[int, int]:
    """output_size as a pair; pnnx writes torch's None (keep that input dim) as 0."""
    size = ctx.param("output_size")
    if isinstance(size, tuple) and any(s is None for s in size):
        size = tuple(0 if s is None else s for s in size)
    oh, ow = pair(size, "output_size", ctx)
    x = _nchw_input(ctx)
    return oh or x.shape[2], ow or x.shape[3]


@lowers("nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d")
def adaptive_avg_pool2d(ctx: OpContext) -> None:
    ctx.emit("adaptive_avg_pool2d", [ctx.input(0)], {"output_size": _adaptive_size(ctx)})


@lowers("nn.AdaptiveMaxPool2d", "F.adaptive_max_pool2d")
def adaptive_max_pool2d(ctx: OpContext) -> None:
    _emit_with_indices(ctx, "adaptive_max_pool2d", {"output_size": _adaptive_size(ctx)})
