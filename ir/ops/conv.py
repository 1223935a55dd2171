"""2-D convolution (conv2d) and transposed convolution (conv_transpose2d), NCHW, and
explicit padding (pad, F.pad's semantics on any trailing dims).

Conv padding is (top, left, bottom, right) so asymmetric padding is one attribute.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ir.op_registry import FLOAT, INT, INTS, STR, register
from ir.ops.common import conv_out_size
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


@register("conv2d", ["x", "weight", "bias?"], _CONV_ATTRS, infer=_conv2d_type)
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


# -- transposed convolution ------------------------------------------------------------

_CONV_T_ATTRS = {
    "stride": INTS((1, 1)),
    "padding": INTS((0, 0, 0, 0)),  # cropped off the full output: (top, left, bottom, right)
    "output_padding": INTS((0, 0)),  # extra rows/columns at the bottom/right
    "dilation": INTS((1, 1)),
    "groups": INT(1),
}


def conv_transpose_out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                            output_padding: int, dilation: int) -> int:
    """Output length of a transposed convolution, as torch computes it."""
    if not 0 <= output_padding < max(stride, dilation):
        raise ValueError(f"output_padding {output_padding} must be smaller than stride {stride} or dilation {dilation}")
    out = (size - 1) * stride - pad_begin - pad_end + dilation * (kernel - 1) + output_padding + 1
    if out <= 0:
        raise ValueError(f"padding {pad_begin}+{pad_end} leaves no output for input length {size}, kernel {kernel}")
    return out


def _conv_transpose2d_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types[0], types[1]
    if x.rank != 4 or w.rank != 4:
        raise ValueError(f"conv_transpose2d expects 4-D input and weight, got {x} and {w}")
    n, c, h, wd = x.shape
    ci, og, kh, kw = w.shape
    groups = attrs["groups"]
    if c != ci or c % groups:
        raise ValueError(f"input channels {c} do not match weight {w.shape} with groups={groups}")
    if len(types) > 2 and types[2].shape != (og * groups,):
        raise ValueError(f"bias shape {types[2].shape} does not match {og * groups} output channels")
    (sh, sw), (pt, pl, pb, pr), (oph, opw), (dh, dw) = (
        attrs["stride"], attrs["padding"], attrs["output_padding"], attrs["dilation"])
    oh = conv_transpose_out_size(h, kh, sh, pt, pb, oph, dh)
    ow = conv_transpose_out_size(wd, kw, sw, pl, pr, opw, dw)
    return TensorType((n, og * groups, oh, ow), x.dtype)


@register("conv_transpose2d", ["x", "weight", "bias?"], _CONV_T_ATTRS, infer=_conv_transpose2d_type,
         )
def conv_transpose2d(x, weight, bias=None, *, stride, padding, output_padding, dilation, groups):
    """One matmul gives every (input pixel, kernel tap) product; then one strided
    scatter-add per kernel tap (KH*KW numpy adds, no loop over pixels) builds the
    full output, which padding crops."""
    n, c, h, w = x.shape
    _, og, kh, kw = weight.shape
    cg = c // groups
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = stride, padding, dilation
    oh = conv_transpose_out_size(h, kh, sh, pt, pb, output_padding[0], dh)
    ow = conv_transpose_out_size(w, kw, sw, pl, pr, output_padding[1], dw)
    xs = x.reshape(n, groups, cg, h * w).transpose(1, 0, 3, 2)  # (G, N, H*W, Cg)
    taps = np.matmul(xs, weight.reshape(groups, 1, cg, og * kh * kw))  # (G, N, H*W, Og*KH*KW)
    taps = taps.reshape(groups, n, h, w, og, kh, kw).transpose(5, 6, 1, 0, 4, 2, 3)
    taps = np.ascontiguousarray(taps).reshape(kh, kw, n, groups * og, h, w)
    # output_padding may reach past the last tap: size the buffer for both
    full = np.zeros((n, groups * og, max((h - 1) * sh + dh * (kh - 1) + 1, pt + oh),
                     max((w - 1) * sw + dw * (kw - 1) + 1, pl + ow)), dtype=taps.dtype)
    for i in range(kh):
        for j in range(kw):
            full[:, :, i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (w - 1) * sw + 1:sw] += taps[i, j]
    out = full[:, :, pt:pt + oh, pl:pl + ow]
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return np.ascontiguousarray(out, dtype=x.dtype)


# -- padding -----------------------------------------------------------------------------

# torch F.pad mode -> np.pad mode
PAD_OP_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad_pairs(rank: int, pads) -> list[tuple[int, int]]:
    """torch's flat pads (last dim first: left, right, top, bottom, ...) as one (before, after) per axis."""
    if len(pads) % 2 or len(pads) // 2 > rank:
        raise ValueError(f"pads {pads} must be pairs for at most {rank} trailing dims")
    pairs = [(0, 0)] * rank
    for k in range(len(pads) // 2):
        pairs[rank - 1 - k] = (pads[2 * k], pads[2 * k + 1])
    return pairs


def _pad_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, mode = types[0], attrs["mode"]
    if mode not in PAD_OP_MODES:
        raise ValueError(f"unknown pad mode {mode!r}; expected one of {sorted(PAD_OP_MODES)}")
    shape = []
    for axis, (size, (before, after)) in enumerate(zip(x.shape, _pad_pairs(x.rank, attrs["pads"]), strict=True)):
        kept = size - max(-before, 0) - max(-after, 0)  # negative pads crop first
        grow = max(before, 0), max(after, 0)
        if kept < 0 or (mode != "constant" and kept == 0 and any(grow)):
            raise ValueError(f"pads ({before}, {after}) leave nothing to {mode}-pad on axis {axis} of size {size}")
        if mode == "reflect" and max(grow) >= kept:
            raise ValueError(f"reflect pads ({before}, {after}) must be smaller than axis {axis} size {kept}")
        if mode == "circular" and max(grow) > kept:
            raise ValueError(f"circular pads ({before}, {after}) must not exceed axis {axis} size {kept}")
        shape.append(kept + sum(grow))
    return x.with_shape(tuple(shape))


@register("pad", ["x"], {"pads": INTS(), "mode": STR("constant"), "value": FLOAT(0.0)}, infer=_pad_type)
def pad(x, *, pads, mode, value):
    pairs = _pad_pairs(x.ndim, pads)
    cropped = x[tuple(slice(max(-b, 0), n - max(-a, 0)) for n, (b, a) in zip(x.shape, pairs, strict=True))]
    widths = [(max(b, 0), max(a, 0)) for b, a in pairs]
    if mode == "constant":
        return np.pad(cropped, widths, mode="constant", constant_values=np.asarray(value, dtype=x.dtype))
    return np.pad(cropped, widths, mode=PAD_OP_MODES[mode])
