"""Lowering of convolutions and explicit padding: nn.Conv2d, F.conv2d, nn.ConvTranspose2d,
F.conv_transpose2d, F.pad and the nn.*Pad*d modules.

pnnx folds a symmetric zero F.pad into the following conv's padding; any other
F.pad stays a separate op and lowers to `pad`.
"""

from __future__ import annotations

from compiler.lowering.core import OpContext, Unsupported, lowers
from ir.ops.conv import PAD_MODES, PAD_OP_MODES


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
        total = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
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
    inputs = functional_inputs(ctx)
    emit_conv2d(ctx, inputs, tuple(inputs[1].shape[2:]))


def functional_inputs(ctx: OpContext):
    """input, weight and (if given) bias of F.conv*: pnnx passes them in that order."""
    inputs = ctx.inputs
    if len(inputs) < 2:
        raise ctx.format_error(f"{ctx.op.type} needs input and weight operands")
    return inputs


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


@lowers("nn.ConvTranspose2d")
def conv_transpose2d_module(ctx: OpContext) -> None:
    inputs = [ctx.input(0), ctx.attr_const("weight")]
    if ctx.param("bias", False):
        inputs.append(ctx.attr_const("bias"))
    emit_conv_transpose2d(ctx, inputs)


@lowers("F.conv_transpose2d")
def conv_transpose2d_functional(ctx: OpContext) -> None:
    emit_conv_transpose2d(ctx, functional_inputs(ctx))


def emit_conv_transpose2d(ctx: OpContext, inputs) -> None:
    ph, pw = pair(ctx.param("padding", 0), "padding", ctx)
    ctx.emit("conv_transpose2d", inputs, {
        "stride": pair(ctx.param("stride", 1), "stride", ctx),
        "padding": (ph, pw, ph, pw),
        "output_padding": pair(ctx.param("output_padding", 0), "output_padding", ctx),
        "dilation": pair(ctx.param("dilation", 1), "dilation", ctx),
        "groups": ctx.param("groups", 1),
    })


# the pad modules pnnx keeps (it rewrites the others, ZeroPad1d/3d, CircularPad*d and
# ReflectionPad3d, as F.pad) and the F.pad mode each means
_PAD_MODULES = {
    "nn.ZeroPad2d": "constant",
    "nn.ConstantPad1d": "constant",
    "nn.ConstantPad2d": "constant",
    "nn.ConstantPad3d": "constant",
    "nn.ReflectionPad1d": "reflect",
    "nn.ReflectionPad2d": "reflect",
    "nn.ReplicationPad1d": "replicate",
    "nn.ReplicationPad2d": "replicate",
    "nn.ReplicationPad3d": "replicate",
}


@lowers("F.pad")
def pad_functional(ctx: OpContext) -> None:
    emit_pad(ctx, "pad", ctx.param("mode", "constant"))


@lowers(*_PAD_MODULES)
def pad_module(ctx: OpContext) -> None:
    emit_pad(ctx, "padding", _PAD_MODULES[ctx.op.type])


def emit_pad(ctx: OpContext, key: str, mode: str) -> None:
    """A pad node; the pads param (pnnx writes every pair, last dim first) is checked by the op's shape rule."""
    pads = ctx.param(key)
    if not isinstance(pads, tuple) or not all(isinstance(p, int) for p in pads):
        raise ctx.format_error(f"param {key}={pads!r} is not a tuple of ints")
    if mode not in PAD_OP_MODES:
        raise Unsupported(f"mode={mode}")
    value = ctx.param("value", 0.0)
    ctx.emit("pad", [ctx.input(0)], {"pads": pads, "mode": mode, "value": 0.0 if value is None else value})
