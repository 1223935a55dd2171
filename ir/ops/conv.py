"""2-D convolution (conv2d) and transposed convolution (conv_transpose2d), NCHW, their
3-D forms (conv3d, conv_transpose3d), NCDHW, and explicit padding (pad, F.pad's semantics
on any trailing dims). 1-D convolutions have no op of their own: the lowering runs them
as 2-D ones over a unit height.

Conv padding is (top, left, bottom, right) so asymmetric padding is one attribute.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ir.op_registry import FLOAT, INT, INTS, STR, register
from ir.ops.common import check_window, conv_out_size
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


def _check_channels(types: list[TensorType], attrs: dict) -> None:
    """A convolution's input channels, weight, groups, bias and padding mode agree (2-D and 3-D)."""
    x, w = types[0], types[1]
    c, o, cg, groups = x.shape[1], w.shape[0], w.shape[1], attrs["groups"]
    if groups < 1:
        raise ValueError(f"groups={groups} must be positive")
    if c != cg * groups or o % groups:
        raise ValueError(f"input channels {c} do not match weight {w.shape} with groups={groups}")
    if len(types) > 2 and types[2].shape != (o,):
        raise ValueError(f"bias shape {types[2].shape} does not match {o} output channels")
    if attrs["padding_mode"] not in PAD_MODES:
        raise ValueError(f"unknown padding_mode {attrs['padding_mode']!r}")


def _conv2d_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types[0], types[1]
    if x.rank != 4 or w.rank != 4:
        raise ValueError(f"conv2d expects 4-D input and weight, got {x} and {w}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    _check_channels(types, attrs)
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
    check_window(kernel, stride, pad_begin, pad_end, dilation)
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
    if groups < 1:
        raise ValueError(f"groups={groups} must be positive")
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


# -- 3-D convolution (NCDHW) ---------------------------------------------------------------
#
# padding is (front, top, left, back, bottom, right): the three leading pads, then the three
# trailing ones, as conv2d's (top, left, bottom, right). The references loop over the kernel's
# taps (KD*KH*KW matmuls over every output voxel at once), never over voxels, and hold one
# tap's window at a time: an im2col matrix of a real video clip would not fit.

_CONV3D_ATTRS = {
    "stride": INTS((1, 1, 1)),
    "padding": INTS((0,) * 6),
    "dilation": INTS((1, 1, 1)),
    "groups": INT(1),
    "padding_mode": STR("zeros"),
}


def _check_rank5(op: str, x: TensorType, w: TensorType, attrs: dict, names: tuple[str, ...]) -> None:
    if x.rank != 5 or w.rank != 5:
        raise ValueError(f"{op} expects 5-D input and weight, got {x} and {w}")
    for name in names:
        if len(attrs[name]) != (6 if name == "padding" else 3):
            raise ValueError(f"{op}: {name} needs {6 if name == 'padding' else 3} values, got {attrs[name]}")
    if min(attrs["stride"] + attrs["dilation"]) < 1 or min(attrs["padding"]) < 0 or attrs["groups"] < 1:
        raise ValueError(f"{op}: stride, dilation and groups must be positive and padding non-negative, got {attrs}")


def _conv3d_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types[0], types[1]
    _check_rank5("conv3d", x, w, attrs, ("stride", "padding", "dilation"))
    n, c, *size = x.shape
    o, cg, *kernel = w.shape
    _check_channels(types, attrs)
    pads = attrs["padding"]
    out = [conv_out_size(size[i], kernel[i], attrs["stride"][i], pads[i], pads[3 + i], attrs["dilation"][i])
           for i in range(3)]
    return TensorType((n, o, *out), x.dtype)


def _tap_slice(tap: int, dilation: int, stride: int, count: int) -> slice:
    """The positions one kernel tap meets over `count` strided windows (in the padded input)."""
    start = tap * dilation
    return slice(start, start + (count - 1) * stride + 1, stride)


def _by_tap(w: np.ndarray) -> np.ndarray:
    """(G, Og, Cg, KD, KH, KW) weights as (KD, KH, KW, G, Og, Cg), contiguous: numpy's matmul
    calls BLAS only on contiguous operands."""
    return np.ascontiguousarray(np.moveaxis(w, (3, 4, 5), (0, 1, 2)))


def _grouped_matmul(w: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """(G, Og, Cg) x (G, Cg, M) -> (G, Og, M): one BLAS call per group (numpy's broadcast batched
    matmul measured several times slower); with one channel per group, a broadcast product."""
    if w.shape[2] == 1:
        return w * cols
    return np.stack([w[g] @ cols[g] for g in range(w.shape[0])])


@register("conv3d", ["x", "weight", "bias?"], _CONV3D_ATTRS, infer=_conv3d_type)
def conv3d(x, weight, bias=None, *, stride, padding, dilation, groups, padding_mode):
    """out[n, o] = bias[o] + sum over the group's channels and the taps of w[o, c, tap] * x[n, c, at + tap]:
    per tap, one (Og, Cg) x (Cg, N * voxels) matmul per group."""
    n = x.shape[0]
    o, cg, *kernel = weight.shape
    pairs = [(padding[i], padding[3 + i]) for i in range(3)]
    if any(any(p) for p in pairs):
        x = np.pad(x, ((0, 0), (0, 0), *pairs), mode=PAD_MODES[padding_mode])
    out_size = [conv_out_size(x.shape[2 + i], kernel[i], stride[i], 0, 0, dilation[i]) for i in range(3)]
    xs = x.reshape(n, groups, cg, *x.shape[2:]).transpose(1, 2, 0, 3, 4, 5)  # (G, Cg, N, D, H, W)
    w = _by_tap(weight.reshape(groups, o // groups, cg, *kernel))
    out = np.zeros((groups, o // groups, n * int(np.prod(out_size))), dtype=np.result_type(x, weight))
    for tap in np.ndindex(*kernel):
        window = xs[(..., *(_tap_slice(tap[i], dilation[i], stride[i], out_size[i]) for i in range(3)))]
        out += _grouped_matmul(w[tap], window.reshape(groups, cg, -1))
    out = out.reshape(o, n, *out_size).swapaxes(0, 1)
    if bias is not None:
        out = out + bias.reshape(1, o, 1, 1, 1)
    return np.ascontiguousarray(out, dtype=x.dtype)


_CONV_T3D_ATTRS = {
    "stride": INTS((1, 1, 1)),
    "padding": INTS((0,) * 6),  # cropped off the full output: (front, top, left, back, bottom, right)
    "output_padding": INTS((0, 0, 0)),  # extra planes/rows/columns at the back/bottom/right
    "dilation": INTS((1, 1, 1)),
    "groups": INT(1),
}


def _conv_transpose3d_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types[0], types[1]
    _check_rank5("conv_transpose3d", x, w, attrs, ("stride", "padding", "output_padding", "dilation"))
    n, c, *size = x.shape
    ci, og, *kernel = w.shape
    groups = attrs["groups"]
    if groups < 1:
        raise ValueError(f"groups={groups} must be positive")
    if c != ci or c % groups:
        raise ValueError(f"input channels {c} do not match weight {w.shape} with groups={groups}")
    if len(types) > 2 and types[2].shape != (og * groups,):
        raise ValueError(f"bias shape {types[2].shape} does not match {og * groups} output channels")
    pads = attrs["padding"]
    out = [conv_transpose_out_size(size[i], kernel[i], attrs["stride"][i], pads[i], pads[3 + i],
                                   attrs["output_padding"][i], attrs["dilation"][i]) for i in range(3)]
    return TensorType((n, og * groups, *out), x.dtype)


@register("conv_transpose3d", ["x", "weight", "bias?"], _CONV_T3D_ATTRS, infer=_conv_transpose3d_type)
def conv_transpose3d(x, weight, bias=None, *, stride, padding, output_padding, dilation, groups):
    """Each input voxel scatters w[c, :, tap] * x[n, c] to (its position * stride + tap * dilation):
    per tap, one (Og, Cg) x (Cg, N * voxels) matmul per group and one strided add build the full
    output, which padding crops (output_padding extends it at the end)."""
    n, c, *size = x.shape
    _, og, *kernel = weight.shape
    cg = c // groups
    out_size = [conv_transpose_out_size(size[i], kernel[i], stride[i], padding[i], padding[3 + i],
                                        output_padding[i], dilation[i]) for i in range(3)]
    # output_padding may reach past the last tap: size the buffer for both
    full = [max((size[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1, padding[i] + out_size[i])
            for i in range(3)]
    out = np.zeros((groups, og, n, *full), dtype=np.result_type(x, weight))
    xs = np.ascontiguousarray(x.reshape(n, groups, cg, -1).transpose(1, 2, 0, 3)).reshape(groups, cg, -1)
    w = _by_tap(weight.reshape(groups, cg, og, *kernel).swapaxes(1, 2))  # (*kernel, G, Og, Cg)
    for tap in np.ndindex(*kernel):
        spread = _grouped_matmul(w[tap], xs).reshape(groups, og, n, *size)
        out[(..., *(_tap_slice(tap[i], dilation[i], stride[i], size[i]) for i in range(3)))] += spread
    out = out.reshape(groups * og, n, *full).swapaxes(0, 1)
    out = out[(..., *(slice(padding[i], padding[i] + out_size[i]) for i in range(3)))]
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1, 1)
    return np.ascontiguousarray(out, dtype=x.dtype)
