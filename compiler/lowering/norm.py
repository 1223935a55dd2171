"""Lowering of normalization and softmax: BatchNorm, InstanceNorm, LayerNorm, GroupNorm, (Log)Softmax, Softmin;
RMSNorm, F.normalize, LocalResponseNorm, GLU and F.pairwise_distance, composed of ops with kernels.

pnnx folds a BatchNorm that follows a conv into the conv; what reaches us is a
standalone one. The IR's batch_norm always takes weight and bias, so a missing
affine part becomes constant ones and zeros (a later constant-folding pass can
fold them away). pnnx rewrites F.batch_norm / F.layer_norm / F.group_norm /
F.instance_norm whose weights are module parameters into the nn.* form, and
torch.softmax / Tensor.softmax (and the log forms) into F.softmax.
"""

from __future__ import annotations

import math

import numpy as np

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.params import axis_of
from compiler.lowering.reduce import scalar, vector_norm
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
    ctx.check_param("num_features", mean.shape[0] if mean.type.rank == 1 else mean.shape, f"@running_mean {mean.shape}")
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
    ctx.check_param("num_features", channels, f"input {x.type}")
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
        weight = ctx.attr("weight")
        if tuple(weight.shape) != _normalized_shape(ctx):
            raise ctx.format_error(f"@weight {weight.shape} disagrees with normalized_shape {_normalized_shape(ctx)}")
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
    x = ctx.input(0)
    if x.type.rank >= 2:
        ctx.check_param("num_channels", x.shape[1], f"input {x.type}")
    inputs = [x]
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


# -- RMSNorm ------------------------------------------------------------------------------------------


def _rms_norm(ctx: OpContext, x: Value, shape: tuple[int, ...], weight: Value | None) -> None:
    """x * rsqrt(mean(x^2 over the trailing `shape` dims) + eps) [* weight]; eps None is the
    dtype's machine epsilon, as torch."""
    if not shape or len(shape) > x.type.rank or x.shape[x.type.rank - len(shape):] != shape:
        raise ctx.format_error(f"normalized_shape {shape} does not match the trailing dims of {x.type}")
    eps = ctx.param("eps", None)
    eps = float(np.finfo(x.dtype).eps) if eps is None else float(eps)
    dims = tuple(range(x.type.rank - len(shape), x.type.rank))
    squares = ctx.intermediate("square", [x])
    mean = ctx.intermediate("reduce_mean", [squares], {"dims": dims, "keepdim": True}, "mean_square")
    shifted = ctx.intermediate("add", [mean, scalar(ctx, "eps", eps, x.dtype)], name="plus_eps")
    inverse = ctx.intermediate("rsqrt", [shifted])
    if weight is None:
        ctx.emit("mul", [x, inverse])
        return
    ctx.emit("mul", [ctx.intermediate("mul", [x, inverse], name="normalized"), weight])


@lowers("nn.RMSNorm")
def rms_norm_module(ctx: OpContext) -> None:
    x = ctx.input(0)
    weight = ctx.attr_const("weight", x.dtype) if ctx.param("elementwise_affine", True) else None
    _rms_norm(ctx, x, _normalized_shape(ctx), weight)


@lowers("F.rms_norm")
def rms_norm_functional(ctx: OpContext) -> None:
    _rms_norm(ctx, ctx.input_named("input") or ctx.input(0), _normalized_shape(ctx), ctx.input_named("weight"))


# -- F.normalize, F.pairwise_distance -------------------------------------------------------------------


def _p(ctx: OpContext, default: float) -> float:
    p = ctx.param("p", default)
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise Unsupported(f"p={p!r}")
    return float(p)


@lowers("F.normalize")
def normalize(ctx: OpContext) -> None:
    """x / max(||x||_p over dim, eps)."""
    x = ctx.input_named("input") or ctx.input(0)
    dim = axis_of(ctx, ctx.param("dim", 1), x.type.rank)
    length = vector_norm(ctx, x, _p(ctx, 2.0), (dim,), True)
    denominator = ctx.intermediate("maximum", [length, scalar(ctx, "eps", ctx.param("eps", 1e-12), x.dtype)],
                            name="clamped_norm")
    ctx.emit("div", [x, denominator])


@lowers("F.pairwise_distance", "nn.PairwiseDistance")
def pairwise_distance(ctx: OpContext) -> None:
    """||x1 - x2 + eps||_p over the last dim (of the broadcast shape), as torch."""
    x1, x2 = ctx.input_named("x1") or ctx.input(0), ctx.input_named("x2") or ctx.input(1)
    rank = max(x1.type.rank, x2.type.rank)
    if rank == 0:
        raise Unsupported("0-d inputs")
    difference = ctx.intermediate("sub", [x1, x2], name="difference")
    shifted = ctx.intermediate("add", [difference, scalar(ctx, "eps", ctx.param("eps", 1e-6), difference.dtype)],
                        name="plus_eps")
    distance = vector_norm(ctx, shifted, _p(ctx, 2.0), (rank - 1,), bool(ctx.param("keepdim", False)))
    ctx.alias(ctx.op.outputs[0], distance)


# -- LocalResponseNorm -----------------------------------------------------------------------------------


@lowers("nn.LocalResponseNorm", "F.local_response_norm")
def local_response_norm(ctx: OpContext) -> None:
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta. As torch, the mean is
    an average pool over (N, 1, C, rest) with the channels zero-padded by size // 2 before and
    (size - 1) // 2 after, always divided by size."""
    x = ctx.input_named("input") or ctx.input(0)
    if x.type.rank < 3:
        raise ctx.format_error(f"local_response_norm needs an input of rank >= 3, got {x.type}")
    size = ctx.param("size")
    alpha, beta, k = float(ctx.param("alpha", 1e-4)), float(ctx.param("beta", 0.75)), float(ctx.param("k", 1.0))
    n, c, rest = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    squares = ctx.intermediate("square", [x])
    planes = ctx.intermediate("reshape", [squares], {"shape": (n, 1, c, rest)}, "square_planes")
    pool = {"kernel": (size, 1), "stride": (1, 1), "padding": (size // 2, 0, (size - 1) // 2, 0)}
    mean = ctx.intermediate("reshape", [ctx.intermediate("avg_pool2d", [planes], pool, "window_sums")],
                     {"shape": x.shape}, "window_mean")
    scaled = ctx.intermediate("mul", [mean, scalar(ctx, "alpha", alpha, x.dtype)], name="scaled")
    base = ctx.intermediate("add", [scaled, scalar(ctx, "k", k, x.dtype)], name="base")
    ctx.emit("div", [x, ctx.intermediate("pow", [base, scalar(ctx, "beta", beta, x.dtype)], name="divisor")])


# -- GLU --------------------------------------------------------------------------------------------------


@lowers("nn.GLU", "F.glu")
def glu(ctx: OpContext) -> None:
    """a * sigmoid(b), with a and b the two halves of x along dim."""
    x = ctx.input_named("input") or ctx.input(0)
    dim = axis_of(ctx, ctx.param("dim", -1), x.type.rank)
    size = x.shape[dim]
    if size % 2:
        raise ctx.format_error(f"GLU halves dim {dim} of {x.type}, whose size {size} is odd")
    first, second = ctx.emit("split", [x], {"dim": dim, "sizes": (size // 2, size // 2)},
                             outputs=[ctx.temp("first_half"), ctx.temp("second_half")])
    ctx.emit("mul", [first, ctx.intermediate("sigmoid", [second], name="gate")])
