"""2-D convolution (conv2d) and transposed convolution (conv_transpose2d), NCHW.

Padding is (top, left, bottom, right) so asymmetric padding is one attribute.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ir.ops.common import conv_out_size
from ir.registry import INT, INTS, STR, Trait, register
from ir.types import TensorType

# torch padding_mode -> np.pad mode
PAD_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}

_CONV_ATTRS = {
    "stride": INTS((1, 1)),
    "padding": INTS((0, 0, 0, 0)),
    "dilation": INTS((1, 1)),
    "groups": INT(1),
    "padding_mode": STR("zeros"),
}


def _conv2d_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types[0], types[1]
    if x.rank != 4 or w.rank != 4:
        raise ValueError(f"conv2d expects 4-D input and weight, got {x} and {w}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    groups = attrs["groups"]
    if c != cg * groups or o % groups:
        raise ValueError(f"input channels {c} do not match weight {w.shape} with groups={groups}")
    if len(types) > 2 and types[2].shape != (o,):
        raise ValueError(f"bias shape {types[2].shape} does not match {o} output channels")
    if attrs["padding_mode"] not in PAD_MODES:
        raise ValueError(f"unknown padding_mode {attrs['padding_mode']!r}")
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = attrs["stride"], attrs["padding"], attrs["dilation"]
    oh = conv_out_size(h, kh, sh, pt, pb, dh)
    ow = conv_out_size(wd, kw, sw, pl, pr, dw)
    return TensorType((n, o, oh, ow), x.dtype)


def pad_nchw(x: np.ndarray, padding, mode: str = "zeros") -> np.ndarray:
    pt, pl, pb, pr = padding
    if not any(padding):
        return x
    return np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), mode=PAD_MODES[mode])


def im2col(x: np.ndarray, kh: int, kw: int, stride, dilation) -> np.ndarray:
    """Windows of a padded NCHW input as (N, C, OH, OW, KH, KW), a strided view (no copy)."""
    (sh, sw), (dh, dw) = stride, dilation
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    win = sliding_window_view(x, (span_h, span_w), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw]


@register("conv2d", ["x", "weight", "bias?"], _CONV_ATTRS, infer=_conv2d_type, traits=[Trait.EXPENSIVE])
def conv2d(x, weight, bias=None, *, stride, padding, dilation, groups, padding_mode):
    n = x.shape[0]
    o, cg, kh, kw = weight.shape
    cols = im2col(pad_nchw(x, padding, padding_mode), kh, kw, stride, dilation)
    oh, ow = cols.shape[2], cols.shape[3]
    # (N, G, Cg, OH, OW, KH, KW) -> (G, N*OH*OW, Cg*KH*KW): one matmul per group, batched
    cols = cols.reshape(n, groups, cg, oh, ow, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    cols = cols.reshape(groups, n * oh * ow, cg * kh * kw)
    w = weight.reshape(groups, o // groups, cg * kh * kw).transpose(0, 2, 1)
    out = np.matmul(cols, w)  # (G, N*OH*OW, Og)
    out = out.reshape(groups, n, oh, ow, o // groups).transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow)
    if bias is not None:
        out = out + bias.reshape(1, o, 1, 1)
    return np.ascontiguousarray(out, dtype=x.dtype)
