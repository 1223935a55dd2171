"""2-D pooling over NCHW: windowed (max_pool2d, avg_pool2d) and adaptive.

Padding is (top, left, bottom, right) as in conv2d. Window ops reduce one spatial
axis at a time (a max or a sum over a rectangle is separable), which costs
KH + KW instead of KH * KW operations per output pixel.

Torch's max pooling can also return indices (flat positions in each H*W input
plane); those are separate ops so that an unused index output is just a dead node.

1-D and 3-D pooling have no value ops of their own: the lowering runs them on these 2-D
ops (a 1-D pool over a unit height; a 3-D one, separable too, as an (H, W) pool and then a
D pool). Only their indices need ops: max_pool3d_indices and adaptive_max_pool3d_indices,
flat positions in each D*H*W input volume.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ir.op_registry import BOOL, INT, INTS, register
from ir.ops.common import conv_out_size
from ir.types import TensorType

_WINDOW_ATTRS = {
    "kernel": INTS(),
    "stride": INTS(),
    "padding": INTS((0, 0, 0, 0)),
    "ceil_mode": BOOL(False),
}
_MAX_ATTRS = {**_WINDOW_ATTRS, "dilation": INTS((1, 1))}
_AVG_ATTRS = {**_WINDOW_ATTRS, "count_include_pad": BOOL(True), "divisor_override": INT(None, optional=True)}
_ADAPTIVE_ATTRS = {"output_size": INTS()}


# -- shape rules ---------------------------------------------------------------------


def _check_nchw(op: str, t: TensorType, float_only: bool) -> None:
    if t.rank != 4:
        raise ValueError(f"{op} expects a 4-D NCHW input, got {t}")
    if float_only and not np.issubdtype(np.dtype(t.dtype), np.floating):
        raise ValueError(f"{op} expects a floating-point input, got {t}")


def _window_out_shape(op: str, t: TensorType, attrs: dict) -> tuple[int, int, int, int]:
    kernel, stride, padding = attrs["kernel"], attrs["stride"], attrs["padding"]
    dilation = attrs.get("dilation", (1, 1))
    if len(kernel) != 2 or len(stride) != 2 or len(dilation) != 2 or len(padding) != 4:
        raise ValueError(f"{op}: kernel, stride and dilation need 2 values and padding 4, got {attrs}")
    if min(kernel + stride + dilation) < 1 or min(padding) < 0:
        raise ValueError(f"{op}: kernel, stride and dilation must be positive and padding non-negative, got {attrs}")
    n, c, h, w = t.shape
    oh = conv_out_size(h, kernel[0], stride[0], padding[0], padding[2], dilation[0], attrs["ceil_mode"])
    ow = conv_out_size(w, kernel[1], stride[1], padding[1], padding[3], dilation[1], attrs["ceil_mode"])
    return n, c, oh, ow


def _max_pool2d_type(types: list[TensorType], attrs: dict) -> TensorType:
    _check_nchw("max_pool2d", types[0], float_only=False)
    return types[0].with_shape(_window_out_shape("max_pool2d", types[0], attrs))


def _max_pool2d_indices_type(types: list[TensorType], attrs: dict) -> TensorType:
    return TensorType(_max_pool2d_type(types, attrs).shape, "int64")


def _avg_pool2d_type(types: list[TensorType], attrs: dict) -> TensorType:
    _check_nchw("avg_pool2d", types[0], float_only=True)
    if attrs["divisor_override"] is not None and attrs["divisor_override"] <= 0:
        raise ValueError(f"avg_pool2d: divisor_override must be positive, got {attrs['divisor_override']}")
    return types[0].with_shape(_window_out_shape("avg_pool2d", types[0], attrs))


def _adaptive_type(op: str, float_only: bool):
    def infer(types: list[TensorType], attrs: dict) -> TensorType:
        _check_nchw(op, types[0], float_only)
        size = attrs["output_size"]
        if len(size) != 2 or min(size) < 1:
            raise ValueError(f"{op}: output_size must be two positive ints, got {size}")
        return types[0].with_shape(types[0].shape[:2] + tuple(size))

    return infer


def _adaptive_indices_type(types: list[TensorType], attrs: dict) -> TensorType:
    t = _adaptive_type("adaptive_max_pool2d_indices", float_only=False)(types, attrs)
    return TensorType(t.shape, "int64")


# -- window helpers -------------------------------------------------------------------


def _pad_for_windows(x: np.ndarray, attrs: dict, out_hw: tuple[int, int], fill) -> np.ndarray:
    """Pad H and W by `padding`, plus what ceil_mode's last window needs beyond the bottom/right padding."""
    pt, pl, pb, pr = attrs["padding"]
    dilation = attrs.get("dilation", (1, 1))
    widths = []
    for axis, (lo, hi) in ((0, (pt, pb)), (1, (pl, pr))):
        needed = (out_hw[axis] - 1) * attrs["stride"][axis] + dilation[axis] * (attrs["kernel"][axis] - 1) + 1
        widths.append((lo, max(hi, needed - x.shape[2 + axis] - lo)))
    if not any(lo or hi for lo, hi in widths):
        return x
    return np.pad(x, ((0, 0), (0, 0), *widths), constant_values=fill)


def _reduce_windows(x: np.ndarray, axis: int, kernel: int, stride: int, dilation: int, out: int, reduce) -> np.ndarray:
    """reduce() over `out` windows along one axis (x is already padded)."""
    span = dilation * (kernel - 1) + 1
    win = sliding_window_view(x, span, axis=axis)  # the window becomes the last axis
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, (out - 1) * stride + 1, stride)
    return reduce(win[tuple(index)][..., ::dilation], axis=-1)


def _lowest(dtype: np.dtype):
    """The padding value that never wins a max: -inf for floats, the minimum for integers."""
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


# -- max_pool2d -------------------------------------------------------------------------


@register("max_pool2d", ["x"], _MAX_ATTRS, infer=_max_pool2d_type)
def max_pool2d(x, *, kernel, stride, padding, dilation, ceil_mode):
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    _, _, oh, ow = _window_out_shape("max_pool2d", TensorType.of(x), attrs)
    padded = _pad_for_windows(x, attrs, (oh, ow), _lowest(x.dtype))
    rows = _reduce_windows(padded, 2, kernel[0], stride[0], dilation[0], oh, np.max)
    return _reduce_windows(rows, 3, kernel[1], stride[1], dilation[1], ow, np.max)


@register("max_pool2d_indices", ["x"], _MAX_ATTRS, infer=_max_pool2d_indices_type)
def max_pool2d_indices(x, *, kernel, stride, padding, dilation, ceil_mode):
    """Flat index (row * W + col) of each window's first maximum, in torch's row-major scan order."""
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    n, c, oh, ow = _window_out_shape("max_pool2d_indices", TensorType.of(x), attrs)
    padded = _pad_for_windows(x, attrs, (oh, ow), _lowest(x.dtype))
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    win = sliding_window_view(padded, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw, ::dh, ::dw]
    tap_row, tap_col = np.divmod(win.reshape(n, c, oh, ow, kh * kw).argmax(axis=-1), kw)
    rows = np.arange(oh).reshape(oh, 1) * sh - padding[0] + tap_row * dh
    cols = np.arange(ow) * sw - padding[1] + tap_col * dw
    return (rows * x.shape[3] + cols).astype(np.int64)


# -- avg_pool2d -------------------------------------------------------------------------


def _avg_divisors(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, out: int,
                  count_include_pad: bool) -> np.ndarray:
    """Per-output window length along one axis, as torch counts it: windows are clipped to the
    padded input (never to ceil_mode's overhang), and to the real input when padding is not counted."""
    start = np.arange(out) * stride - pad_begin
    end = np.minimum(start + kernel, size + pad_end)
    if not count_include_pad:
        start, end = np.maximum(start, 0), np.minimum(end, size)
    return end - start


@register("avg_pool2d", ["x"], _AVG_ATTRS, infer=_avg_pool2d_type)
def avg_pool2d(x, *, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode}
    _, _, oh, ow = _window_out_shape("avg_pool2d", TensorType.of(x), attrs)
    padded = _pad_for_windows(x, attrs, (oh, ow), 0)
    rows = _reduce_windows(padded, 2, kernel[0], stride[0], 1, oh, np.sum)
    sums = _reduce_windows(rows, 3, kernel[1], stride[1], 1, ow, np.sum)
    if divisor_override is not None:
        return (sums / np.asarray(divisor_override, x.dtype)).astype(x.dtype, copy=False)
    h, w = x.shape[2:]
    div_h = _avg_divisors(h, kernel[0], stride[0], padding[0], padding[2], oh, count_include_pad)
    div_w = _avg_divisors(w, kernel[1], stride[1], padding[1], padding[3], ow, count_include_pad)
    return (sums / np.outer(div_h, div_w).astype(x.dtype)).astype(x.dtype, copy=False)


# -- adaptive pooling -----------------------------------------------------------------------


def adaptive_bins(size: int, out: int) -> list[tuple[int, int]]:
    """torch's bins: [floor(i*size/out), ceil((i+1)*size/out)); they overlap when out does not divide size."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _bin_means(size: int, out: int, dtype) -> np.ndarray:
    """(out, size) matrix whose row i averages bin i, so adaptive average pooling is two matmuls."""
    m = np.zeros((out, size), dtype=np.float64)
    for i, (start, end) in enumerate(adaptive_bins(size, out)):
        m[i, start:end] = 1.0 / (end - start)
    return m.astype(dtype)


@register("adaptive_avg_pool2d", ["x"], _ADAPTIVE_ATTRS, infer=_adaptive_type("adaptive_avg_pool2d", True))
def adaptive_avg_pool2d(x, *, output_size):
    (oh, ow), (h, w) = output_size, x.shape[2:]
    if (oh, ow) == (1, 1):
        return x.mean(axis=(2, 3), keepdims=True, dtype=x.dtype)
    rows = np.matmul(_bin_means(h, oh, x.dtype), x)  # (N, C, OH, W)
    return np.matmul(rows, _bin_means(w, ow, x.dtype).T)


def _max_over_bins(x: np.ndarray, axis: int, out: int) -> np.ndarray:
    index: list[slice] = [slice(None)] * x.ndim
    maxima = []
    for start, end in adaptive_bins(x.shape[axis], out):
        index[axis] = slice(start, end)
        maxima.append(x[tuple(index)].max(axis=axis))
    return np.stack(maxima, axis=axis)


@register("adaptive_max_pool2d", ["x"], _ADAPTIVE_ATTRS, infer=_adaptive_type("adaptive_max_pool2d", False))
def adaptive_max_pool2d(x, *, output_size):
    return _max_over_bins(_max_over_bins(x, 3, output_size[1]), 2, output_size[0])


@register("adaptive_max_pool2d_indices", ["x"], _ADAPTIVE_ATTRS, infer=_adaptive_indices_type)
def adaptive_max_pool2d_indices(x, *, output_size):
    """Flat index (row * W + col) of each bin's first maximum in row-major order, as torch.

    Columns are reduced first (first max within each row), then rows (first row holding the max),
    which picks the same element as a row-major scan of the whole bin."""
    (oh, ow), w = output_size, x.shape[3]
    col_max, col_arg = [], []
    for start, end in adaptive_bins(w, ow):
        col_max.append(x[..., start:end].max(axis=-1))
        col_arg.append(x[..., start:end].argmax(axis=-1) + start)
    col_max, col_arg = np.stack(col_max, axis=-1), np.stack(col_arg, axis=-1)  # (N, C, H, OW)
    indices = []
    for start, end in adaptive_bins(x.shape[2], oh):
        best = col_max[:, :, start:end].argmax(axis=2)[:, :, None]  # (N, C, 1, OW)
        col = np.take_along_axis(col_arg[:, :, start:end], best, axis=2)[:, :, 0]
        indices.append((best[:, :, 0] + start) * w + col)
    return np.stack(indices, axis=2).astype(np.int64)


# -- 3-D max pooling indices ---------------------------------------------------------------------
#
# Found one axis at a time, last axis first, as the values are: the first maximum of each window
# row, then the first row holding the window's maximum, then the first plane. That is the element
# torch's row-major scan of the window keeps (it replaces the maximum only on a greater value).

_MAX3D_ATTRS = {"kernel": INTS(), "stride": INTS(), "padding": INTS((0,) * 6), "dilation": INTS((1, 1, 1)),
                "ceil_mode": BOOL(False)}


def _window_out_shape_3d(op: str, t: TensorType, attrs: dict) -> tuple[int, ...]:
    kernel, stride, padding, dilation = attrs["kernel"], attrs["stride"], attrs["padding"], attrs["dilation"]
    if t.rank != 5:
        raise ValueError(f"{op} expects a 5-D NCDHW input, got {t}")
    if len(kernel) != 3 or len(stride) != 3 or len(dilation) != 3 or len(padding) != 6:
        raise ValueError(f"{op}: kernel, stride and dilation need 3 values and padding 6, got {attrs}")
    if min(kernel + stride + dilation) < 1 or min(padding) < 0:
        raise ValueError(f"{op}: kernel, stride and dilation must be positive and padding non-negative, got {attrs}")
    out = [conv_out_size(t.shape[2 + i], kernel[i], stride[i], padding[i], padding[3 + i], dilation[i],
                         attrs["ceil_mode"]) for i in range(3)]
    return (*t.shape[:2], *out)


def _max_pool3d_indices_type(types: list[TensorType], attrs: dict) -> TensorType:
    return TensorType(_window_out_shape_3d("max_pool3d_indices", types[0], attrs), "int64")


def _strided_windows(a: np.ndarray, axis: int, kernel: int, stride: int, dilation: int, out: int) -> np.ndarray:
    """The `out` windows of a (padded) array along one axis, the window as a new last axis (a view)."""
    win = sliding_window_view(a, dilation * (kernel - 1) + 1, axis=axis)
    index = [slice(None)] * a.ndim
    index[axis] = slice(0, (out - 1) * stride + 1, stride)
    return win[tuple(index)][..., ::dilation]


@register("max_pool3d_indices", ["x"], _MAX3D_ATTRS, infer=_max_pool3d_indices_type)
def max_pool3d_indices(x, *, kernel, stride, padding, dilation, ceil_mode):
    """Flat index ((d * H + h) * W + w) of each window's first maximum, in torch's scan order.

    `flat` holds, for each element left, the flat index of the maximum it stands for over the
    axes already reduced; each axis adds its own position times the size of the axes after it."""
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    out = _window_out_shape_3d("max_pool3d_indices", TensorType.of(x), attrs)[2:]
    widths = [(0, 0), (0, 0)]
    for i in range(3):  # ceil_mode's last window may need more than the end padding
        needed = (out[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1
        widths.append((padding[i], max(padding[3 + i], needed - x.shape[2 + i] - padding[i])))
    values = np.pad(x, widths, constant_values=_lowest(x.dtype))
    flat = np.zeros(values.shape, dtype=np.int64)
    scale = 1
    for i in (2, 1, 0):
        axis, window = 2 + i, (kernel[i], stride[i], dilation[i], out[i])
        win = _strided_windows(values, axis, *window)
        tap = win.argmax(axis=-1)[..., None]
        values = np.take_along_axis(win, tap, axis=-1)[..., 0]
        flat = np.take_along_axis(_strided_windows(flat, axis, *window), tap, axis=-1)[..., 0]
        start = (np.arange(out[i]) * stride[i] - padding[i]).reshape((-1,) + (1,) * (2 - i))
        flat += (start + tap[..., 0] * dilation[i]) * scale
        scale *= x.shape[axis]
    return flat


# -- 3-D adaptive max pooling indices --------------------------------------------------------------


def _adaptive_max3d_indices_type(types: list[TensorType], attrs: dict) -> TensorType:
    t, size = types[0], attrs["output_size"]
    if t.rank != 5:
        raise ValueError(f"adaptive_max_pool3d_indices expects a 5-D NCDHW input, got {t}")
    if len(size) != 3 or min(size) < 1:
        raise ValueError(f"adaptive_max_pool3d_indices: output_size must be three positive ints, got {size}")
    return TensorType(t.shape[:2] + tuple(size), "int64")


@register("adaptive_max_pool3d_indices", ["x"], _ADAPTIVE_ATTRS, infer=_adaptive_max3d_indices_type)
def adaptive_max_pool3d_indices(x, *, output_size):
    """Flat index ((d * H + h) * W + w) of each bin's first maximum in row-major order, as torch:
    one axis at a time, last first, a loop over each axis's bins (not over voxels)."""
    values, flat, scale = x, np.zeros(x.shape, dtype=np.int64), 1
    for i in (2, 1, 0):
        axis = 2 + i
        best, kept = [], []
        for start, end in adaptive_bins(x.shape[axis], output_size[i]):
            index = [slice(None)] * x.ndim
            index[axis] = slice(start, end)
            segment = values[tuple(index)]
            tap = segment.argmax(axis=axis)
            tap = np.expand_dims(tap, axis)
            best.append(np.take_along_axis(segment, tap, axis=axis))
            kept.append(np.take_along_axis(flat[tuple(index)], tap, axis=axis) + (tap + start) * scale)
        values, flat = np.concatenate(best, axis=axis), np.concatenate(kept, axis=axis)
        scale *= x.shape[axis]
    return flat
