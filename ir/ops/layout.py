"""The channel-blocked layout: a (N, C, H, W) tensor stored as (N, ceil(C / block), H, W, block), each
pixel's `block` channels of one block side by side (onnxruntime's NCHWc). The block-channels pass
(compiler/passes/block_channels.py) runs chains of convs on it, with reorders at the chains' edges,
and the pool and scale of squeeze-and-excitation blocks inside them.

Channels that are not whole blocks pad the last block: to_blocked writes zeros there, the convs' packed
weights and biases are zero in the padded channels (in and out), so a padded lane holds act(0) plus any
padded residual's lane (finite) and no real channel reads it; from_blocked drops it.

A concat joins its blocked parts block after block, so its result's channels lie in segments, one per
part, each starting a block and padded to whole blocks: Inception's 16 + 16 + 24 + 8 channels in 1 + 1 + 2
+ 1 blocks. A value's `segments` (its parts' channel counts; one segment, (C,), for any other value) say
which lane holds which channel (segment_lanes): the nodes reading a segmented value carry them (a conv's
`in_segments`, from_blocked's and a global pool's `segments`), a depthwise conv's or a window pool's result
has its input's, and a squeeze-and-excitation scale takes unsegmented whole blocks only.
"""

from __future__ import annotations

import numpy as np

from ir.op_registry import FLOAT, INT, INTS, STR, register
from ir.ops.conv import _CONV_T_ATTRS, _conv2d_type, _conv_transpose2d_type, conv_transpose2d
from ir.ops.fused import _CONV_ATTRS, _EPILOGUE_ATTRS, _PROLOGUE_ATTRS, _check_epilogue, fused_conv2d
from ir.ops.pool import _AVG_ATTRS, _MAX_ATTRS, _avg_pool2d_type, _max_pool2d_type, avg_pool2d, max_pool2d
from ir.types import TensorType


def segment_lanes(segments, block: int) -> tuple[np.ndarray, int]:
    """(lane of each channel, lanes in all) of channels in `segments`, each segment from a block's first lane."""
    lanes, base = [], 0
    for count in segments:
        lanes.extend(range(base, base + count))
        base += -(-count // block) * block
    return np.asarray(lanes, np.int64), base


def blocked_shape(shape: tuple[int, ...], block: int, segments=None) -> tuple[int, ...]:
    """The blocked shape of an NCHW shape: its channels (in `segments`, default one) in blocks, each segment's
    last one padded."""
    n, c, h, w = shape
    if block < 1:
        raise ValueError(f"blocks of {block} channels")
    segments = (c,) if segments is None else tuple(segments)
    if sum(segments) != c or min(segments) < 1:
        raise ValueError(f"segments {segments} do not split {c} channels")
    return n, segment_lanes(segments, block)[1] // block, h, w, block


def unblocked_shape(shape: tuple[int, ...], block: int, segments) -> tuple[int, ...]:
    """The NCHW shape of the channels in `segments` whose blocked shape is `shape`."""
    n, _, h, w, *_ = shape
    if len(shape) != 5 or shape[4] != block or blocked_shape((n, sum(segments), h, w), block, segments) != shape:
        raise ValueError(f"{shape} is not the blocked shape of channels {tuple(segments)} in blocks of {block}")
    return n, sum(segments), h, w


def blocked_array(x: np.ndarray, block: int, segments=None) -> np.ndarray:
    """An NCHW array blocked (padding lanes zero)."""
    n, c, h, w = x.shape
    lanes, total = segment_lanes((c,) if segments is None else segments, block)
    padded = np.zeros((n, total, h, w), x.dtype)
    padded[:, lanes] = x
    return np.ascontiguousarray(padded.reshape(n, total // block, block, h, w).transpose(0, 1, 3, 4, 2))


def unblocked_array(x: np.ndarray, block: int, segments) -> np.ndarray:
    """The NCHW array of a blocked x's channels in `segments`."""
    n, cb, h, w, _ = x.shape
    lanes, _ = segment_lanes(segments, block)
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * block, h, w)[:, lanes])


def _to_blocked_type(types: list[TensorType], attrs: dict) -> TensorType:
    if types[0].rank != 4:
        raise ValueError(f"to_blocked expects a 4-D input, got {types[0]}")
    return TensorType(blocked_shape(types[0].shape, attrs["block"]), types[0].dtype)


@register("to_blocked", ["x"], {"block": INT()}, infer=_to_blocked_type)
def to_blocked(x, *, block):
    return blocked_array(x, block)


@register("from_blocked", ["x"], {"block": INT(), "segments": INTS()},
          infer=lambda t, a: TensorType(unblocked_shape(t[0].shape, a["block"], a["segments"]), t[0].dtype))
def from_blocked(x, *, block, segments):
    """The NCHW tensor of a blocked x's channels in `segments` (the other lanes pad them)."""
    return unblocked_array(x, block, segments)


def _in_segments(types: list[TensorType], attrs: dict) -> tuple[int, ...]:
    """A blocked conv's input channels in their segments (`in_segments`, default one)."""
    if types[1].rank != 4:
        raise ValueError(f"blocked conv expects a 4-D weight, got {types[1]}")
    channels = types[1].shape[1] * attrs["groups"]  # the input's channels but those padding its blocks
    segments = attrs.get("in_segments") or (channels,)
    if sum(segments) != channels:
        raise ValueError(f"blocked conv: in_segments {tuple(segments)} do not split its {channels} input channels")
    return tuple(segments)


def _blocked_conv_type(types: list[TensorType], attrs: dict) -> TensorType:
    block, groups = attrs["block"], attrs["groups"]
    segments = _in_segments(types, attrs)
    if types[0].rank == 4:  # an NCHW input (a stem conv's: conv2d_blocked_nchw), ungrouped, one segment
        if groups != 1 or len(segments) > 1:
            raise ValueError("blocked_conv2d: only an ungrouped conv reads an NCHW input")
        plain = list(types[:3])
    else:
        plain = [TensorType(unblocked_shape(types[0].shape, block, segments), types[0].dtype), *types[1:3]]
    out = _conv2d_type(plain, attrs)
    depthwise = groups != 1 and groups == sum(segments) == out.shape[1]
    if groups != 1 and not depthwise and not blocked_groups_fit(groups, sum(segments), out.shape[1], len(segments),
                                                                 block):
        raise ValueError("blocked_conv2d: a grouped conv is blocked only with as many input as output channels in "
                         "one segment, in groups of whole blocks or half ones")
    blocked = TensorType(blocked_shape(out.shape, block, segments if depthwise else None), out.dtype)
    return _check_epilogue(types, attrs, blocked, 3)


def is_depthwise_weight(groups: int, weight_shape: tuple[int, ...]) -> bool:
    """Whether a conv of `groups` groups and this (O, C / groups, KH, KW) weight is depthwise: one input and one
    output channel a group (a grouped conv's groups have several)."""
    return groups > 1 and weight_shape[1] == 1 and groups == weight_shape[0]


def blocked_groups_fit(groups: int, in_channels: int, out_channels: int, segments: int, block: int) -> bool:
    """Whether a grouped conv (not depthwise) runs on the layout: as many input as output channels, one segment,
    each group's channels whole blocks, half ones, whole vectors of a block or a few lanes of one
    (codegen/kernels/blocked.py: each output block reads its group's input blocks, from the same index; each half
    of a block in groups of half blocks, the same half of the input block; each vector of a block in groups of
    whole vectors, and each lane in groups of lanes, its group's lanes of the same input block)."""
    g = in_channels // groups
    return in_channels == out_channels and segments == 1 and (g % block == 0 or 2 * g == block
                                                              or vector_groups(g, block) or lane_groups(g, block))


def block_vector(block: int) -> int:
    """The floats of one vector of a block of `block` lanes (taps_width): 16 of AVX-512's 64, 8 of AVX2's 16."""
    return block // 4 if block >= 64 else block // 2


def lane_groups(g: int, block: int) -> bool:
    """Whether groups of g channels are 2 or 4 lanes of a block's vectors (ResNeXt-50 32x4d's first stage): each
    output lane over its own group's lanes, shuffled within 128 bits of the input vector (codegen/kernels/
    blocked.py's _lane_groups_out). Groups of 8 lanes (its second stage on AVX-512) stay on NCHW: their shuffle
    crosses 128 bits, which LLVM lowered as two a lane, 1.2-1.4x the NCHW kernel's time (256 channels on 28 x 28,
    batch 1 and 8, Intel Xeon); a 128-bit copy shared by 4 lanes first (kept apart by llvm.arithmetic.fence)
    brought it level, but RegNetY-400MF, whose groups of 8 run on widths of 48 to 440 channels padded to blocks
    of 64, then took 1.10x the time of its all-NCHW forward (ResNeXt-50 0.983 / 1.001 at batch 8 / 1)."""
    return g in (2, 4) and g < block_vector(block)


def vector_groups(g: int, block: int) -> bool:
    """Whether groups of g channels are whole vectors of a block, fewer than half of it, a power of two: ResNeXt-50
    32x4d's 16 on AVX-512 (four groups a block of 64 lanes)."""
    return g < block // 2 and g % block_vector(block) == 0 and g & (g - 1) == 0


_BLOCKED_CONV_ATTRS = {**_CONV_ATTRS, **_EPILOGUE_ATTRS, "block": INT(), "in_segments": INTS(None, optional=True)}


@register("blocked_conv2d", ["x", "weight", "bias", "residual?"], _BLOCKED_CONV_ATTRS, infer=_blocked_conv_type)
def blocked_conv2d(x, weight, bias, residual=None, *, block, in_segments=None, **conv_and_epilogue):
    """fused_conv2d on the blocked layout (ungrouped, depthwise, or grouped as blocked_groups_fit allows): x (its
    channels in in_segments; or NCHW, for an ungrouped conv), residual and the result (N, blocks, H, W, block); a
    depthwise conv's result in its input's segments."""
    groups = conv_and_epilogue["groups"]
    segments = in_segments or (weight.shape[1] * groups,)
    out_segments = segments if is_depthwise_weight(groups, weight.shape) else None
    plain = None if residual is None else unblocked_array(residual, block, out_segments or (weight.shape[0],))
    x = x if x.ndim == 4 else unblocked_array(x, block, segments)  # (an NCHW input: a stem conv's)
    y = fused_conv2d(x, weight, bias, plain, **conv_and_epilogue)
    return blocked_array(y, block, out_segments)


def _blocked_affine_conv_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, scale, shift = types[:3]
    channels = sum(_in_segments([x, types[3]], attrs))
    if scale.shape != (channels,) or shift.shape != (channels,) or not scale.dtype == shift.dtype == x.dtype:
        raise ValueError(f"scale {scale} and shift {shift} must be one value per input channel ({channels}) of "
                         f"dtype {x.dtype}")
    if attrs["groups"] != 1 or types[0].rank != 5:
        raise ValueError("blocked_affine_conv2d: an ungrouped conv on a blocked input only")
    return _blocked_conv_type([x, *types[3:]], attrs)


@register("blocked_affine_conv2d", ["x", "scale", "shift", "weight", "bias", "residual?"],
          {**_PROLOGUE_ATTRS, **_BLOCKED_CONV_ATTRS}, infer=_blocked_affine_conv_type)
def blocked_affine_conv2d(x, scale, shift, weight, bias, residual=None, *, in_activation, block, in_segments=None,
                          **conv_and_epilogue):
    """fused_affine_conv2d on the blocked layout: blocked_conv2d of in_activation(x * scale + shift), scale and
    shift one value per input channel (in in_segments), ungrouped."""
    segments = in_segments or (weight.shape[1],)
    plain = unblocked_array(x, block, segments) * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)
    if in_activation == "relu":
        plain = np.maximum(plain, plain.dtype.type(0))
    return blocked_conv2d(blocked_array(plain, block, segments), weight, bias, residual, block=block,
                          in_segments=in_segments, **conv_and_epilogue)


_EXPAND_ATTRS = {"expand_activation": STR("none"), "expand_alpha": FLOAT(0.0), "expand_beta": FLOAT(0.0)}
_POINTWISE = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1, "padding_mode": "zeros",
              "post_activation": "none", "post_alpha": 0.0, "post_beta": 0.0}


def _expansion_attrs(attrs: dict) -> dict:
    """blocked_expand_depthwise's expansion as a blocked_conv2d's attributes."""
    return {**_POINTWISE, "block": attrs["block"], "activation": attrs["expand_activation"],
            "alpha": attrs["expand_alpha"], "beta": attrs["expand_beta"], "in_segments": attrs.get("in_segments")}


def _depthwise_attrs(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if k not in _EXPAND_ATTRS and k != "in_segments"}


def _expand_depthwise_type(types: list[TensorType], attrs: dict) -> TensorType:
    expanded = _blocked_conv_type(types[:3], _expansion_attrs(attrs))
    if types[3].rank != 4 or not is_depthwise_weight(attrs["groups"], types[3].shape):
        raise ValueError("blocked_expand_depthwise: the second conv is not a depthwise one")
    return _blocked_conv_type([expanded, *types[3:]], _depthwise_attrs(attrs))


@register("blocked_expand_depthwise", ["x", "expand_weight", "expand_bias", "weight", "bias", "residual?"],
          {**_BLOCKED_CONV_ATTRS, **_EXPAND_ATTRS}, infer=_expand_depthwise_type)
def blocked_expand_depthwise(x, expand_weight, expand_bias, weight, bias, residual=None, **attrs):
    """A MobileNet block's 1x1 expansion (its bias, expand_activation, and in_segments: x's) and the depthwise
    conv of its result (the other attributes), on the blocked layout, the expansion never stored whole (the
    fuse-expand-depthwise pass)."""
    e = blocked_conv2d(x, expand_weight, expand_bias, **_expansion_attrs(attrs))
    return blocked_conv2d(e, weight, bias, residual, **_depthwise_attrs(attrs))


def expand_depthwise_macs(node) -> int:
    """The multiply-adds of a blocked_expand_depthwise node: its expansion's and its depthwise conv's."""
    x, we, wd, y = node.inputs[0], node.inputs[1], node.inputs[3], node.outputs[0]
    (n, _, h, w, _), (_, _, oh, ow, _) = x.shape, y.shape
    return n * h * w * we.shape[0] * we.shape[1] + n * oh * ow * wd.shape[0] * wd.shape[2] * wd.shape[3]


def _blocked_window_pool_type(plain_type):
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


@register("blocked_max_pool2d", ["x"], {**_MAX_ATTRS, "block": INT()},
          infer=_blocked_window_pool_type(_max_pool2d_type))
def blocked_max_pool2d(x, **attrs):
    """max_pool2d of a blocked x, blocked (a pool between blocked convs: block-channels)."""
    return _on_lanes(max_pool2d, x, attrs)


@register("blocked_avg_pool2d", ["x"], {**_AVG_ATTRS, "block": INT()},
          infer=_blocked_window_pool_type(_avg_pool2d_type))
def blocked_avg_pool2d(x, **attrs):
    """avg_pool2d of a blocked x, blocked."""
    return _on_lanes(avg_pool2d, x, attrs)


def _blocked_dims(t: TensorType, block: int, op: str) -> tuple[int, ...]:
    if t.rank != 5 or t.shape[4] != block:
        raise ValueError(f"{op} expects a blocked input with blocks of {block}, got {t}")
    return t.shape


def _blocked_pool_type(types: list[TensorType], attrs: dict) -> TensorType:
    n, cb, h, w, b = _blocked_dims(types[0], attrs["block"], "blocked_global_avg_pool")
    segments = attrs.get("segments") or (cb * b,)
    return TensorType((unblocked_shape(types[0].shape, b, segments)[0], sum(segments), 1, 1), types[0].dtype)


@register("blocked_global_avg_pool", ["x"], {"block": INT(), "segments": INTS(None, optional=True)},
          infer=_blocked_pool_type)
def blocked_global_avg_pool(x, *, block, segments=None):
    """adaptive_avg_pool2d to 1 x 1 of a blocked x (its channels in `segments`, default every lane): the (N, C,
    1, 1) means, on NCHW (a squeeze-and-excitation block's pool, or a classifier's)."""
    n, cb, _, _, b = x.shape
    plain = unblocked_array(x, block, segments or (cb * b,))
    return plain.mean(axis=(2, 3), dtype=x.dtype).reshape(n, -1, 1, 1)


def _blocked_scale_type(types: list[TensorType], attrs: dict) -> TensorType:
    n, cb, _, _, b = _blocked_dims(types[0], attrs["block"], "blocked_channel_scale")
    s = types[1].shape
    if (len(s) != 4 or s[0] != n or not (cb - 1) * b < s[1] <= cb * b or s[2:] != (1, 1)
            or types[1].dtype != types[0].dtype):
        raise ValueError(f"blocked_channel_scale: the scale {types[1]} is not one per image and channel of {types[0]}")
    return types[0]


@register("blocked_channel_scale", ["x", "scale"], {"block": INT()}, infer=_blocked_scale_type)
def blocked_channel_scale(x, scale, *, block):
    """x * scale of a blocked x by a (N, C, 1, 1) scale (a squeeze-and-excitation block's), blocked; the lanes
    past the C channels (padding of the last block) zero."""
    n, cb, _, _, b = x.shape
    padded = np.zeros((n, cb * b), x.dtype)
    padded[:, :scale.shape[1]] = scale.reshape(n, -1)
    return x * padded.reshape(n, cb, 1, 1, b)


def _blocked_transpose_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types[0], types[1]
    if x.rank != 5 or w.rank != 4:
        raise ValueError(f"blocked_conv_transpose2d expects a blocked input and a 4-D weight, got {x} and {w}")
    kernel, segments = tuple(w.shape[2:]), tuple(attrs.get("in_segments") or (w.shape[0],))
    if (tuple(attrs["stride"]) != kernel or any(attrs["padding"]) or any(attrs["output_padding"])
            or tuple(attrs["dilation"]) != (1, 1) or attrs["groups"] != 1):
        raise ValueError("blocked_conv_transpose2d: only a kernel equal to its stride, without padding, output "
                         "padding, dilation or groups, runs blocked")
    if sum(segments) != w.shape[0]:
        raise ValueError(f"blocked_conv_transpose2d: in_segments {segments} do not split the weight's {w.shape[0]} "
                         "input channels")
    plain = [TensorType(unblocked_shape(x.shape, attrs["block"], segments), x.dtype), *types[1:]]
    out = _conv_transpose2d_type(plain, attrs)
    return TensorType(blocked_shape(out.shape, attrs["block"]), out.dtype)


@register("blocked_conv_transpose2d", ["x", "weight", "bias"],
          {**_CONV_T_ATTRS, "block": INT(), "in_segments": INTS(None, optional=True)}, infer=_blocked_transpose_type)
def blocked_conv_transpose2d(x, weight, bias, *, block, in_segments=None, **conv):
    """conv_transpose2d on the blocked layout, its kernel equal to its stride (a UNet's upsampling): x (its
    channels in in_segments) and the result (N, blocks, H, W, block)."""
    plain = unblocked_array(x, block, in_segments or (weight.shape[0],))
    return blocked_array(conv_transpose2d(plain, weight, bias, **conv), block)
