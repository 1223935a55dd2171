"""Lowering of convolutions: nn.Conv2d, F.conv2d."""

from __future__ import annotations

from compiler.lowering.core import OpContext, Unsupported, lowers
from ir.ops.conv import PAD_MODES


def pair(value, name: str, ctx: OpContext) -> tuple[int, int]:
    """torch's int-or-pair params as a pair."""
    if isinstance(value, int):
        return value, value
    if isinstance(value, tuple) and len(value) == 1:
        return value[0], value[0]
    if isinstance(value, tuple) and len(value) == 2:
        return value
    raise ctx.format_error(f"param {name}={value!r} is not an int or a pair")


def conv_padding(ctx: OpContext, kernel: tuple[int, int], dilation: tuple[int, int],
                 stride: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from torch's padding param: ints, a pair, 'valid' or 'same'."""
    padding = ctx.param("padding", 0)
    if padding == "valid":
        return 0, 0, 0, 0
    if padding == "same":
        if stride != (1, 1):
            raise Unsupported("padding='same' with stride > 1")
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        # torch puts the odd extra pixel at the end
        return total[0] // 2, total[1] // 2, total[0] - total[0] // 2, total[1] - total[1] // 2
    if isinstance(padding, tuple) and len(padding) == 4:
        return padding
    ph, pw = pair(padding, "padding", ctx)
    return ph, pw, ph, pw


@lowers("nn.Conv2d")
def conv2d_module(ctx: OpContext) -> None:
    weight = ctx.attr_const("weight")
    inputs = [ctx.input(0), weight]
    if ctx.param("bias", False):
        inputs.append(ctx.attr_const("bias"))
    emit_conv2d(ctx, inputs, tuple(weight.shape[2:]))


@lowers("F.conv2d")
def conv2d_functional(ctx: OpContext) -> None:
    inputs = [ctx.input(i) for i in range(len(ctx.op.inputs))]
    if len(inputs) < 2:
        raise Unsupported("F.conv2d without a weight operand")
    emit_conv2d(ctx, inputs, tuple(inputs[1].shape[2:]))


def emit_conv2d(ctx: OpContext, inputs, kernel) -> None:
    stride = pair(ctx.param("stride", 1), "stride", ctx)
    dilation = pair(ctx.param("dilation", 1), "dilation", ctx)
    mode = ctx.param("padding_mode", "zeros")
    if mode not in PAD_MODES:
        raise Unsupported(f"padding_mode={mode}")
    ctx.emit("conv2d", inputs, {
        "stride": stride,
        "padding": conv_padding(ctx, kernel, dilation, stride),
        "dilation": dilation,
        "groups": ctx.param("groups", 1),
        "padding_mode": mode,
    })
