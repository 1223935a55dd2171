"""The channel-blocked layout: a (N, C, H, W) tensor stored as (N, ceil(C / block), H, W, block), each
pixel's `block` channels of one block side by side (onnxruntime's NCHWc). The block-channels pass
(compiler/passes/block_channels.py) runs chains of convs on it, with reorders at the chains' edges,
and the pool and scale of squeeze-and-excitation blocks inside them.

Channels that are not whole blocks pad the last block: to_blocked writes zeros there, the convs' packed
weights and biases are zero in the padded channels (in and out), so a padded lane holds act(0) plus any
padded residual's lane (finite) and no real channel reads it; from_blocked drops it. Only convs and the
reorders take padded values (the pass keeps concats and squeeze-and-excitation blocks to whole blocks).
"""

from __future__ import annotations

import numpy as np

from ir.op_registry import FLOAT, INT, STR, register
from ir.ops.conv import _conv2d_type
from ir.ops.fused import _CONV_ATTRS, _EPILOGUE_ATTRS, _check_epilogue, fused_conv2d
from ir.ops.pool import _AVG_ATTRS, _MAX_ATTRS, _avg_pool2d_type, _max_pool2d_type, avg_pool2d, max_pool2d
from ir.types import TensorType


def blocked_shape(shape: tuple[int, ...], block: int) -> tuple[int, ...]:
    """The blocked shape of an NCHW shape: its channels in blocks, the last one padded."""
    n, c, h, w = shape
    if block < 1:
        raise ValueError(f"blocks of {block} channels")
    return n, -(-c // block), h, w, block


def unblocked_shape(shape: tuple[int, ...], block: int, channels: int) -> tuple[int, ...]:
    """The NCHW shape of `channels` channels whose blocked shape is `shape`."""
    if len(shape) != 5 or shape[4] != block or blocked_shape((shape[0], channels, *shape[2:4]), block) != shape:
        raise ValueError(f"{shape} is not the blocked shape of {channels} channels in blocks of {block}")
    n, _, h, w, _ = shape
    return n, channels, h, w


def _to_blocked_type(types: list[TensorType], attrs: dict) -> TensorType:
    if types[0].rank != 4:
        raise ValueError(f"to_blocked expects a 4-D input, got {types[0]}")
    return TensorType(blocked_shape(types[0].shape, attrs["block"]), types[0].dtype)


@register("to_blocked", ["x"], {"block": INT()}, infer=_to_blocked_type)
def to_blocked(x, *, block):
    n, c, h, w = x.shape
    cb = -(-c // block)
    padded = np.zeros((n, cb * block, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, cb, block, h, w).transpose(0, 1, 3, 4, 2))


@register("from_blocked", ["x"], {"block": INT(), "channels": INT()},
          infer=lambda t, a: TensorType(unblocked_shape(t[0].shape, a["block"], a["channels"]), t[0].dtype))
def from_blocked(x, *, block, channels):
    """The NCHW tensor of a blocked x's first `channels` channels (the rest pad its last block)."""
    n, cb, h, w, _ = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * block, h, w)[:, :channels])


def _blocked_conv_type(types: list[TensorType], attrs: dict) -> TensorType:
    block, groups = attrs["block"], attrs["groups"]
    if types[1].rank != 4:
        raise ValueError(f"blocked_conv2d expects a 4-D weight, got {types[1]}")
    channels = types[1].shape[1] * groups  # the input's channels but those padding its last block
    plain = [TensorType(unblocked_shape(types[0].shape, block, channels), types[0].dtype), *types[1:3]]
    out = _conv2d_type(plain, attrs)
    if groups != 1 and not (groups == channels == out.shape[1]):
        raise ValueError("blocked_conv2d: grouped convs other than depthwise ones are not blocked")
    blocked = TensorType(blocked_shape(out.shape, block), out.dtype)
    return _check_epilogue(types, attrs, blocked, 3)


@register("blocked_conv2d", ["x", "weight", "bias", "residual?"], {**_CONV_ATTRS, **_EPILOGUE_ATTRS, "block": INT()},
          infer=_blocked_conv_type)
def blocked_conv2d(x, weight, bias, residual=None, *, block, **conv_and_epilogue):
    """fused_conv2d on the blocked layout (ungrouped or depthwise): x, residual and the result (N, ceil(C /
    block), H, W, block)."""
    groups = conv_and_epilogue["groups"]
    plain = None if residual is None else from_blocked(residual, block=block, channels=weight.shape[0])
    y = fused_conv2d(from_blocked(x, block=block, channels=weight.shape[1] * groups), weight, bias, plain,
                     **conv_and_epilogue)
    return to_blocked(y, block=block)


_EXPAND_ATTRS = {"expand_activation": STR("none"), "expand_alpha": FLOAT(0.0), "expand_beta": FLOAT(0.0)}
_POINTWISE = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1, "padding_mode": "zeros",
              "post_activation": "none", "post_alpha": 0.0, "post_beta": 0.0}


def _expansion_attrs(attrs: dict) -> dict:
    """blocked_expand_depthwise's expansion as a blocked_conv2d's attributes."""
    return {**_POINTWISE, "block": attrs["block"], "activation": attrs["expand_activation"],
            "alpha": attrs["expand_alpha"], "beta": attrs["expand_beta"]}


def _depthwise_attrs(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if k not in _EXPAND_ATTRS}


def _expand_depthwise_type(types: list[TensorType], attrs: dict) -> TensorType:
    expanded = _blocked_conv_type(types[:3], _expansion_attrs(attrs))
    if attrs["groups"] == 1:
        raise ValueError("blocked_expand_depthwise: the second conv is not a depthwise one")
    return _blocked_conv_type([expanded, *types[3:]], _depthwise_attrs(attrs))


@register("blocked_expand_depthwise", ["x", "expand_weight", "expand_bias", "weight", "bias", "residual?"],
          {**_CONV_ATTRS, **_EPILOGUE_ATTRS, **_EXPAND_ATTRS, "block": INT()}, infer=_expand_depthwise_type)
def blocked_expand_depthwise(x, expand_weight, expand_bias, weight, bias, residual=None, **attrs):
    """A MobileNet block's 1x1 expansion (its bias and expand_activation) and the depthwise conv of its result
    (the other attributes), on the blocked layout, the expansion never stored whole (the fuse-expand-depthwise
    pass)."""
    e = blocked_conv2d(x, expand_weight, expand_bias, **_expansion_attrs(attrs))
    return blocked_conv2d(e, weight, bias, residual, **_depthwise_attrs(attrs))


def expand_depthwise_macs(node) -> int:
    """The multiply-adds of a blocked_expand_depthwise node: its expansion's and its depthwise conv's."""
    x, we, wd, y = node.inputs[0], node.inputs[1], node.inputs[3], node.outputs[0]
    (n, _, h, w, _), (_, _, oh, ow, _) = x.shape, y.shape
    return n * h * w * we.shape[0] * we.shape[1] + n * oh * ow * wd.shape[0] * wd.shape[2] * wd.shape[3]


def _blocked_pool_type(plain_type):
    def infer(types: list[TensorType], attrs: dict) -> TensorType:
        n, cb, h, w, b = _blocked_dims(types[0], attrs["block"], "a blocked pool")
        plain = plain_type([TensorType((n, cb * b, h, w), types[0].dtype)], attrs)
        return TensorType(blocked_shape(plain.shape, b), plain.dtype)

    return infer


def _on_lanes(pool, x, attrs: dict):
    """pool over every lane of a blocked x (padding lanes too: a pool keeps each channel to itself)."""
    n, cb, h, w, b = x.shape
    plain = np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w))
    y = pool(plain, **{k: v for k, v in attrs.items() if k != "block"})
    return np.ascontiguousarray(y.reshape(n, cb, b, *y.shape[2:]).transpose(0, 1, 3, 4, 2))


@register("blocked_max_pool2d", ["x"], {**_MAX_ATTRS, "block": INT()}, infer=_blocked_pool_type(_max_pool2d_type))
def blocked_max_pool2d(x, **attrs):
    """max_pool2d of a blocked x, blocked (a pool between blocked convs: block-channels)."""
    return _on_lanes(max_pool2d, x, attrs)


@register("blocked_avg_pool2d", ["x"], {**_AVG_ATTRS, "block": INT()}, infer=_blocked_pool_type(_avg_pool2d_type))
def blocked_avg_pool2d(x, **attrs):
    """avg_pool2d of a blocked x, blocked."""
    return _on_lanes(avg_pool2d, x, attrs)


def _blocked_dims(t: TensorType, block: int, op: str) -> tuple[int, ...]:
    if t.rank != 5 or t.shape[4] != block:
        raise ValueError(f"{op} expects a blocked input with blocks of {block}, got {t}")
    return t.shape


def _blocked_pool_type(types: list[TensorType], attrs: dict) -> TensorType:
    n, cb, _, _, b = _blocked_dims(types[0], attrs["block"], "blocked_global_avg_pool")
    return TensorType((n, cb * b, 1, 1), types[0].dtype)


@register("blocked_global_avg_pool", ["x"], {"block": INT()}, infer=_blocked_pool_type)
def blocked_global_avg_pool(x, *, block):
    """adaptive_avg_pool2d to 1 x 1 of a blocked x: the (N, C, 1, 1) means, on NCHW (a squeeze-and-excitation
    block's pool: its result's bytes are the same in either layout)."""
    n, cb, _, _, b = x.shape
    return x.mean(axis=(2, 3), dtype=x.dtype).reshape(n, cb * b, 1, 1)


def _blocked_scale_type(types: list[TensorType], attrs: dict) -> TensorType:
    n, cb, _, _, b = _blocked_dims(types[0], attrs["block"], "blocked_channel_scale")
    if types[1].shape != (n, cb * b, 1, 1) or types[1].dtype != types[0].dtype:
        raise ValueError(f"blocked_channel_scale: the scale {types[1]} is not one per image and channel of {types[0]}")
    return types[0]


@register("blocked_channel_scale", ["x", "scale"], {"block": INT()}, infer=_blocked_scale_type)
def blocked_channel_scale(x, scale, *, block):
    """x * scale of a blocked x by a (N, C, 1, 1) scale (a squeeze-and-excitation block's), blocked."""
    n, cb, _, _, b = x.shape
    return x * scale.reshape(n, cb, 1, 1, b)
