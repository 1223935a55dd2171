"""Lowering of normalization and softmax: BatchNorm, InstanceNorm, LayerNorm, GroupNorm, (Log)Softmax, Softmin.

pnnx folds a BatchNorm that follows a conv into the conv; what reaches us is a
standalone one. The IR's batch_norm always takes weight and bias, so a missing
affine part becomes constant ones and zeros (a later constant-folding pass can
fold them away). pnnx rewrites F.batch_norm / F.layer_norm / F.group_norm /
F.instance_norm whose weights are module parameters into the nn.* form, and
torch.softmax / Tensor.softmax (and the log forms) into F.softmax.
"""

from __future__ import annotations

import numpy as np

from compiler.lowering.core import OpContext, Unsupported, lowers
from ir.graph import Value


def _ones_and_zeros(ctx: OpContext, shape: tuple[int, ...], dtype: str) -> tuple[Value, Value]:
    """Constants standing for a missing weight (ones) and bias (zeros)."""
    return ctx.const("weight", np.ones(shape, dtype)), ctx.const("bias", np.zeros(shape, dtype))


def _module_affine(ctx: OpContext, flag: str, shape: tuple[int, ...], dtype: str) -> tuple[Value, Value]:
    """weight and bias of an nn.*Norm module: its @weight/@bias when `flag` is set, else ones and zeros."""
    if ctx.param(flag, False):
        return ctx.attr_const("weight", dtype), ctx.attr_const("bias", dtype)
    return _ones_and_zeros(ctx, shape, dtype)


def _functional_affine(ctx: OpContext, shape: tuple[int, ...], dtype: str) -> list[Value]:
    """[weight, bias] of an F.*norm call, trimmed from the end; a bias without a weight gets a ones weight."""
    weight, bias = ctx.input_named("weight"), ctx.input_named("bias")
    if bias is None:
        return [] if weight is None else [weight]
    return [weight if weight is not None else _ones_and_zeros(ctx, shape, dtype)[0], bias]


def _eps(ctx: OpContext) -> float:
    return float(ctx.param("eps", 1e-5))


# -- batch norm -------------------------------------------------------------------------------


@lowers("nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d")
def batch_norm_module(ctx: OpContext) -> None:
    x = ctx.input(0)
    mean, var = ctx.attr_const("running_mean", x.dtype), ctx.attr_const("running_var", x.dtype)
    weight, bias = _module_affine(ctx, "affine", mean.shape, x.dtype)
    ctx.emit("batch_norm", [x, mean, var, weight, bias], {"eps": _eps(ctx)})


@lowers("F.batch_norm")
def batch_norm_functional(ctx: OpContext) -> None:
    x = ctx.input_named("input") or ctx.input(0)
    mean, var = ctx.input_named("running_mean"), ctx.input_named("running_var")
    if mean is None or var is None:
        raise Unsupported("batch statistics (no running_mean / running_var)")
    if ctx.param("training", False):
        raise Unsupported("training=True")
    weight, bias = ctx.input_named("weight"), ctx.input_named("bias")
    if weight is None or bias is None:
        ones, zeros = _ones_and_zeros(ctx, mean.shape, x.dtype)
        weight, bias = weight or ones, bias or zeros
    ctx.emit("batch_norm", [x, mean, var, weight, bias], {"eps": _eps(ctx)})


# -- instance norm ------------------------------------------------------------------------------


@lowers("nn.InstanceNorm1d", "nn.InstanceNorm2d", "nn.InstanceNorm3d")
def instance_norm_module(ctx: OpContext) -> None:
    """With running stats (eval mode) it is a batch_norm; otherwise a group_norm with one channel per group."""
    x = ctx.input(0)
    spatial = int(ctx.op.type[-2])
    if x.type.rank != spatial + 2:
        raise Unsupported(f"unbatched input of rank {x.type.rank}")
    channels = x.shape[1]
    if ctx.param("track_running_stats", False):
        mean, var = ctx.attr_const("running_mean", x.dtype), ctx.attr_const("running_var", x.dtype)
        weight, bias = _module_affine(ctx, "affine", (channels,), x.dtype)
        ctx.emit("batch_norm", [x, mean, var, weight, bias], {"eps": _eps(ctx)})
        return
    inputs = [x]
    if ctx.param("affine", False):
        inputs += [ctx.attr_const("weight", x.dtype), ctx.attr_const("bias", x.dtype)]
    ctx.emit("group_norm", inputs, {"groups": channels, "eps": _eps(ctx)})


@lowers("F.instance_norm")
def instance_norm_functional(ctx: OpContext) -> None:
    x = ctx.input_named("input") or ctx.input(0)
    if not ctx.param("use_input_stats", True):
        raise Unsupported("use_input_stats=False")
    if x.type.rank < 3:
        raise Unsupported(f"input of rank {x.type.rank}")
    inputs = [x, *_functional_affine(ctx, (x.shape[1],), x.dtype)]
    ctx.emit("group_norm", inputs, {"groups": x.shape[1], "eps": _eps(ctx)})


# -- layer norm and group norm ----------------------------------------------------------------------


def _normalized_shape(ctx: OpContext) -> tuple[int, ...]:
    shape = ctx.param("normalized_shape")
    return (shape,) if isinstance(shape, int) else tuple(shape)


@lowers("nn.LayerNorm")
def layer_norm_module(ctx: OpContext) -> None:
    inputs = [ctx.input(0)]
    if ctx.param("elementwise_affine", False):
        inputs += [ctx.attr_const("weight", ctx.input(0).dtype)]
        if ctx.has_attr("bias"):
            inputs += [ctx.attr_const("bias", ctx.input(0).dtype)]
    ctx.emit("layer_norm", inputs, {"normalized_shape": _normalized_shape(ctx), "eps": _eps(ctx)})


@lowers("F.layer_norm")
def layer_norm_functional(ctx: OpContext) -> None:
    x, shape = ctx.input_named("input") or ctx.input(0), _normalized_shape(ctx)
    inputs = [x, *_functional_affine(ctx, shape, x.dtype)]
    ctx.emit("layer_norm", inputs, {"normalized_shape": shape, "eps": _eps(ctx)})


@lowers("nn.GroupNorm")
def group_norm_module(ctx: OpContext) -> None:
    inputs = [ctx.input(0)]
    if ctx.param("affine", False):
        inputs += [ctx.attr_const("weight", ctx.input(0).dtype), ctx.attr_const("bias", ctx.input(0).dtype)]
    ctx.emit("group_norm", inputs, {"groups": ctx.param("num_groups"), "eps": _eps(ctx)})


@lowers("F.group_norm")
def group_norm_functional(ctx: OpContext) -> None:
    x = ctx.input_named("input") or ctx.input(0)
    if x.type.rank < 2:
        raise Unsupported(f"input of rank {x.type.rank}")
    inputs = [x, *_functional_affine(ctx, (x.shape[1],), x.dtype)]
    ctx.emit("group_norm", inputs, {"groups": ctx.param("num_groups"), "eps": _eps(ctx)})


# -- softmax ------------------------------------------------------------------------------------------


def _softmax_dim(ctx: OpContext) -> int:
    """The dim param; None is torch's legacy implicit choice (0 for rank 0, 1 or 3, else 1)."""
    dim = ctx.param("dim", None)
    if dim is None:
        return 0 if ctx.input(0).type.rank in (0, 1, 3) else 1
    return dim


@lowers("nn.Softmax", "F.softmax")
def softmax(ctx: OpContext) -> None:
    ctx.emit("softmax", [ctx.input(0)], {"dim": _softmax_dim(ctx)})


@lowers("nn.LogSoftmax", "F.log_softmax")
def log_softmax(ctx: OpContext) -> None:
    ctx.emit("log_softmax", [ctx.input(0)], {"dim": _softmax_dim(ctx)})


@lowers("nn.Softmax2d")
def softmax2d(ctx: OpContext) -> None:
    """Softmax over the channels of a (N, C, H, W) or (C, H, W) input."""
    ctx.emit("softmax", [ctx.input(0)], {"dim": -3})


@lowers("nn.Softmin", "F.softmin")
def softmin(ctx: OpContext) -> None:
    (negated,) = ctx.emit("neg", [ctx.input(0)], outputs=[ctx.temp("neg")])
    ctx.emit("softmax", [negated], {"dim": _softmax_dim(ctx)})
