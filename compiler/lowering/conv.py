"""Lowering of convolutions and explicit padding: nn.Conv{1,2,3}d, F.conv{1,2,3}d,
nn.ConvTranspose{1,2,3}d, F.conv_transpose{1,2,3}d, F.pad and the nn.*Pad*d modules.

A 1-D convolution runs as a 2-D one over a unit height ((N, C, L) viewed as (N, C, 1, L),
its weight as (O, C, 1, K)), so it gets conv2d's kernels; 3-D ones lower to conv3d and
conv_transpose3d. torch's unbatched inputs ((C, L), (C, H, W), (C, D, H, W)) are viewed
with a batch of one. pnnx folds a BatchNorm after a conv and a symmetric zero F.pad
before it into the conv's params; any other F.pad stays a separate op and lowers to `pad`.
"""

from __future__ import annotations

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.params import reshaped
from ir.graph import Value
from ir.ops.conv import PAD_MODES, PAD_OP_MODES

# spatial dims of each pnnx conv spelling
_DIMS = {
    "nn.Conv1d": 1, "F.conv1d": 1, "nn.ConvTranspose1d": 1, "F.conv_transpose1d": 1,
    "nn.Conv2d": 2, "F.conv2d": 2, "nn.ConvTranspose2d": 2, "F.conv_transpose2d": 2,
    "nn.Conv3d": 3, "F.conv3d": 3, "nn.ConvTranspose3d": 3, "F.conv_transpose3d": 3,
}


def ntuple(value, n: int, name: str, ctx: OpContext) -> tuple[int, ...]:
    """torch's int-or-tuple params (an int, or a tuple of 1 or n ints) as n ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * n
    if isinstance(value, tuple) and all(isinstance(v, int) for v in value) and len(value) in (1, n):
        return value * n if len(value) == 1 else value
    raise ctx.format_error(f"param {name}={value!r} is not an int or {n} ints")


def pair(value, name: str, ctx: OpContext) -> tuple[int, int]:
    """torch's int-or-pair params as a pair."""
    return ntuple(value, 2, name, ctx)


def conv_padding_nd(ctx: OpContext, kernel: tuple[int, ...], dilation: tuple[int, ...],
                    stride: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pads before, pads after) per spatial axis from torch's padding param: ints, a tuple,
    'valid' or 'same'.

    For a padding_mode other than zeros, pnnx writes the pads of the F.pad that torch runs
    first when they are not the same on every axis: 2 * dims ints in F.pad's order (last
    axis first, before and after), or, for a 1-D conv, none at all (its writer keeps one value
    or nothing); a module's pads differ at both ends only for padding='same'."""
    dims = len(kernel)
    padding = ctx.param("padding", 0)
    if padding in ((), None) and ctx.param("padding_mode", "zeros") != "zeros":  # pnnx reads () as None
        padding = "same"
    if padding == "valid":
        return (0,) * dims, (0,) * dims
    if padding == "same":
        if any(s != 1 for s in stride):
            raise Unsupported("padding='same' with stride > 1")
        total = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        # torch puts the odd extra pixel at the end
        return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
    if isinstance(padding, tuple) and len(padding) == 2 * dims:
        pairs = [padding[2 * (dims - 1 - i):2 * (dims - i)] for i in range(dims)]  # F.pad order: last axis first
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    pads = ntuple(padding, dims, "padding", ctx)
    return pads, pads


def functional_inputs(ctx: OpContext):
    """input, weight and (if given) bias of F.conv*: pnnx passes them in that order."""
    inputs = ctx.inputs
    if len(inputs) < 2:
        raise ctx.format_error(f"{ctx.op.type} needs input and weight operands")
    return inputs


def _module_weights(ctx: OpContext) -> tuple[Value, Value | None]:
    """@weight (1-D: with a unit height) and, when the module has one, @bias as constants; the module's
    channel counts and kernel size must agree with them."""
    weight = ctx.attr("weight")
    dims = _DIMS[ctx.op.type]
    if weight.ndim != dims + 2:
        raise ctx.format_error(f"@weight {weight.shape} of {ctx.op.type} is not {dims + 2}-D")
    groups = ctx.param("groups", 1)
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise ctx.format_error(f"param groups={groups!r} is not a positive int")
    transposed = "Transpose" in ctx.op.type  # weight (in, out / groups, k...), else (out, in / groups, k...)
    inner = weight.shape[1] * groups
    source = f"@weight {weight.shape} (groups={groups})"
    ctx.check_param("in_channels", weight.shape[0] if transposed else inner, source)
    ctx.check_param("out_channels", inner if transposed else weight.shape[0], source)
    ctx.check_param("kernel_size", tuple(weight.shape[2:]), source)
    if ctx.param("bias", False) != ctx.has_attr("bias"):
        raise ctx.format_error(f"param bias={ctx.param('bias', False)} but the module "
                               f"{'has' if ctx.has_attr('bias') else 'has no'} @bias")
    if dims == 1:
        weight = weight.reshape(weight.shape[:2] + (1,) + weight.shape[2:])
    bias = ctx.attr_const("bias") if ctx.param("bias", False) else None
    return ctx.const("weight", weight), bias


def _functional_weights(ctx: OpContext) -> tuple[Value, Value | None]:
    """The weight operand (1-D: viewed with a unit height) and the bias operand, if any."""
    _, weight, *bias = functional_inputs(ctx)
    if _DIMS[ctx.op.type] == 1:
        if weight.type.rank != 3:
            raise ctx.format_error(f"weight {weight.type} of {ctx.op.type} is not 3-D")
        weight = reshaped(ctx, weight, weight.shape[:2] + (1,) + weight.shape[2:], "weight")
    return weight, (bias[0] if bias else None)


def emit_spatial(ctx: OpContext, ir_op: str, x: Value, operands: list, attrs: dict, dims: int) -> Value:
    """ir_op (a 2-D or 3-D conv) on x, whose last `dims` axes are spatial: an unbatched x gets a
    batch of one, a 1-D x a unit height; the result is viewed back to x's layout."""
    if x.type.rank not in (dims + 1, dims + 2):
        raise Unsupported(f"input of rank {x.type.rank} (expected {dims + 1} or {dims + 2})")
    unbatched = x.type.rank == dims + 1
    view = ((1,) if unbatched else ()) + x.shape
    if dims == 1:
        view = view[:2] + (1,) + view[2:]
    inputs = [x, *(v for v in operands if v is not None)]
    if view == x.shape:
        return ctx.emit(ir_op, inputs, attrs)[0]
    inputs[0] = reshaped(ctx, x, view, "input")
    (y,) = ctx.emit(ir_op, inputs, attrs, outputs=[ctx.temp(ir_op)])
    shape = y.shape[:2] + y.shape[3:] if dims == 1 else y.shape
    return ctx.emit("reshape", [y], {"shape": shape[1:] if unbatched else shape})[0]


# -- convolution -------------------------------------------------------------------------------


@lowers("nn.Conv1d", "nn.Conv2d", "nn.Conv3d")
def conv_module(ctx: OpContext) -> None:
    emit_conv(ctx, *_module_weights(ctx))


@lowers("F.conv1d", "F.conv2d", "F.conv3d")
def conv_functional(ctx: OpContext) -> None:
    emit_conv(ctx, *_functional_weights(ctx))


def emit_conv(ctx: OpContext, weight: Value, bias: Value | None) -> None:
    """conv2d (1-D and 2-D) or conv3d of input 0 by weight (already in the op's rank)."""
    dims = _DIMS[ctx.op.type]
    kernel = tuple(weight.shape[-dims:])
    stride = ntuple(ctx.param("stride", 1), dims, "stride", ctx)
    dilation = ntuple(ctx.param("dilation", 1), dims, "dilation", ctx)
    mode = ctx.param("padding_mode", "zeros")
    if mode not in PAD_MODES:
        raise Unsupported(f"padding_mode={mode}")
    before, after = conv_padding_nd(ctx, kernel, dilation, stride)
    if dims == 1:  # the unit height: kernel 1, no padding
        stride, dilation, before, after = (1, *stride), (1, *dilation), (0, *before), (0, *after)
    attrs = {"stride": stride, "padding": before + after, "dilation": dilation,
             "groups": ctx.param("groups", 1), "padding_mode": mode}
    emit_spatial(ctx, "conv3d" if dims == 3 else "conv2d", ctx.input(0), [weight, bias], attrs, dims)


# -- transposed convolution ----------------------------------------------------------------------


@lowers("nn.ConvTranspose1d", "nn.ConvTranspose2d", "nn.ConvTranspose3d")
def conv_transpose_module(ctx: OpContext) -> None:
    emit_conv_transpose(ctx, *_module_weights(ctx))


@lowers("F.conv_transpose1d", "F.conv_transpose2d", "F.conv_transpose3d")
def conv_transpose_functional(ctx: OpContext) -> None:
    emit_conv_transpose(ctx, *_functional_weights(ctx))


def emit_conv_transpose(ctx: OpContext, weight: Value, bias: Value | None) -> None:
    """conv_transpose2d (1-D and 2-D) or conv_transpose3d of input 0 by weight (already in the op's
    rank). pnnx turns a module call's output_size into output_padding."""
    dims = _DIMS[ctx.op.type]
    stride = ntuple(ctx.param("stride", 1), dims, "stride", ctx)
    padding = ntuple(ctx.param("padding", 0), dims, "padding", ctx)
    output_padding = ntuple(ctx.param("output_padding", 0), dims, "output_padding", ctx)
    dilation = ntuple(ctx.param("dilation", 1), dims, "dilation", ctx)
    if dims == 1:  # the unit height
        stride, padding, output_padding, dilation = (1, *stride), (0, *padding), (0, *output_padding), (1, *dilation)
    attrs = {"stride": stride, "padding": padding + padding, "output_padding": output_padding,
             "dilation": dilation, "groups": ctx.param("groups", 1)}
    emit_spatial(ctx, "conv_transpose3d" if dims == 3 else "conv_transpose2d", ctx.input(0), [weight, bias],
                 attrs, dims)


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
