"""Pooling kernels, run through their emit rules, match the IR reference."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.kernels.pool import (
    AVG_POOL_KERNELS,
    BLOCKS,
    INSIDE,
    MAX_POOL_KERNELS,
    ROWS,
    ROWS_3X3S2,
    SAME,
    TWO_BY_TWO,
    window_path,
)
from ir.op_registry import get_op
from ir.types import TensorType
from tests.codegen.rules import check_rule

RNG = np.random.default_rng(0)


def check(op, x, attrs, jit=False, rtol=1e-5, atol=1e-6):
    return check_rule(op, [x], attrs, jit=jit, rtol=rtol, atol=atol)


def rand(*shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-20, 20, size=shape).astype(dtype)
    return RNG.normal(size=shape).astype(dtype)


WINDOWS = [  # shape, kernel, stride, padding (t, l, b, r), ceil_mode
    ((1, 3, 11, 13), (3, 3), (2, 2), (1, 1, 1, 1), False),  # ResNet stem
    ((4, 5, 9, 9), (5, 5), (1, 1), (2, 2, 2, 2), False),  # YOLOv5 SPPF
    ((2, 3, 10, 7), (2, 2), (2, 2), (0, 0, 0, 0), True),
    ((1, 2, 12, 15), (3, 2), (2, 3), (1, 0, 1, 1), True),
    ((4, 2, 7, 8), (1, 3), (1, 2), (0, 1, 0, 1), False),
    ((1, 64, 30, 30), (3, 3), (2, 2), (1, 1, 1, 1), False),  # parallel
    ((1, 4, 13, 11), (2, 3), (3, 1), (0, 1, 0, 1), True),  # strided height only: max pools row by row
    ((2, 3, 10, 7), (2, 2), (2, 2), (0, 0, 0, 0), False),  # 2x2 stride 2 in one pass (an odd last column left)
    ((1, 16, 130, 128), (2, 2), (2, 2), (0, 0, 0, 0), False),  # the same on the threads
    ((1, 2, 12, 15), (3, 3), (2, 2), (0, 0, 0, 0), True),  # 3x3 stride 2, ceil mode: a last window past the input
    ((2, 3, 9, 10), (3, 3), (2, 2), (1, 0, 1, 0), True),  # 3x3 stride 2, padding above only, ceil mode
    # stride 1 keeping the input's size: flat passes over all planes, then the windows at the edges
    ((1, 6, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), False),  # Inception's average pools
    ((1, 40, 40, 40), (3, 3), (1, 1), (1, 1, 1, 1), False),  # the same on the threads
    ((2, 3, 3, 4), (5, 5), (1, 1), (2, 2, 2, 2), False),  # windows wider than the plane: every one at an edge
    ((1, 3, 6, 9), (2, 4), (1, 1), (1, 2, 0, 1), False),  # even windows, padding on one side more
    ((1, 2, 5, 6), (7, 1), (1, 1), (3, 0, 3, 0), False),  # 7 taps (a pass each) down, 1 across
    ((3, 2, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), False),  # one pixel
    # one input row a window, unpadded (MaxPool1d, AvgPool1d): windows inside the input, below
    ((2, 3, 1, 59), (1, 4), (1, 4), (0, 0, 0, 0), False),  # M5's: a last column left over
    ((2, 3, 4, 20), (1, 3), (1, 2), (0, 0, 0, 0), False),  # rows of several planes
    ((1, 2, 1, 10), (1, 4), (1, 4), (0, 0, 0, 0), True),  # ceil mode, a last window past the row: not this way
    # unpadded windows inside the input: along the width over all planes at once, then down each window
    ((2, 5, 15, 15), (3, 3), (2, 2), (0, 0, 0, 0), False),  # Inception's max pools
    ((1, 3, 11, 14), (2, 4), (3, 2), (0, 0, 0, 0), False),  # 2 rows, 4 columns, strides 3 and 2
    ((1, 2, 13, 9), (5, 3), (2, 3), (0, 0, 0, 0), True),  # 5 rows (a loop of taps), ceil mode inside
    ((1, 40, 31, 31), (3, 3), (2, 2), (0, 0, 0, 0), False),  # the same on the threads
    ((1, 2, 60, 60), (3, 3), (2, 2), (0, 0, 0, 0), False),  # rows of 29: row by row (_max3x3s2_chunk)
    ((1, 3, 35, 35), (3, 3), (2, 2), (0, 0, 0, 0), False),  # rows of 17 (ROWS_3X3S2_WIDTH): row by row too
]


@pytest.mark.parametrize("shape, kernel, stride, padding, ceil_mode", WINDOWS)
@pytest.mark.parametrize("dilation", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("op", ["max_pool2d", "max_pool2d_indices"])
def test_max_pool(op, shape, kernel, stride, padding, ceil_mode, dilation):
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode, "dilation": dilation}
    try:
        get_op(op).infer_types([TensorType(shape)], get_op(op).normalize_attrs(attrs))
    except ValueError:
        pytest.skip("window larger than the input")
    check(op, rand(*shape), attrs, rtol=0, atol=0)


def _out_shape(op, shape, attrs):
    return get_op(op).infer_types([TensorType(shape)], get_op(op).normalize_attrs(attrs))[0].shape


def test_windows_take_every_path_of_the_window_kernels():
    """Each way window pooling runs (window_path) is a kernel of its own, which the emit rule picks by the
    shapes, so that a model compiles only the ways its pools take: WINDOWS (above, below) run each of
    them, for max and average pools."""
    for op, kernels in (("max_pool2d", MAX_POOL_KERNELS), ("avg_pool2d", AVG_POOL_KERNELS)):
        taken = set()
        for shape, kernel, stride, padding, ceil_mode in WINDOWS:
            attrs = {"kernel": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode}
            taken.add(window_path(shape, _out_shape(op, shape, attrs), kernel, stride, padding, (1, 1),
                                  op == "max_pool2d"))
        assert taken == set(kernels), (op, taken)


@pytest.mark.parametrize("shape, kernel, stride, padding, ceil_mode, max_path, avg_path", [
    ((1, 64, 112, 112), (3, 3), (2, 2), (1, 1, 1, 1), False, ROWS_3X3S2, ROWS),  # ResNet's stem
    ((1, 64, 111, 111), (3, 3), (2, 2), (0, 0, 0, 0), False, ROWS_3X3S2, INSIDE),  # AlexNet's: rows of 55
    ((1, 288, 35, 35), (3, 3), (2, 2), (0, 0, 0, 0), False, ROWS_3X3S2, INSIDE),  # Inception-v3's: rows of 17
    ((1, 64, 31, 31), (3, 3), (2, 2), (0, 0, 0, 0), False, INSIDE, INSIDE),  # rows of 15
    ((1, 64, 27, 27), (3, 3), (2, 2), (0, 0, 0, 0), False, INSIDE, INSIDE),  # rows of 13
    ((1, 16, 64, 64), (2, 2), (2, 2), (0, 0, 0, 0), False, TWO_BY_TWO, TWO_BY_TWO),  # UNet's
    ((1, 16, 7, 7), (2, 2), (2, 2), (0, 0, 0, 0), True, ROWS, ROWS),  # ceil mode: a last window past the input
    ((1, 4, 9, 9), (3, 3), (1, 2), (1, 1, 1, 1), False, BLOCKS, BLOCKS),  # stride 1 down the height
    ((1, 256, 20, 20), (5, 5), (1, 1), (2, 2, 2, 2), False, SAME, SAME),  # YOLOv5's SPPF
    ((1, 8, 20, 20), (3, 3), (1, 1), (1, 1, 1, 1), True, SAME, SAME),
    ((1, 4, 13, 11), (2, 3), (3, 1), (0, 1, 0, 1), True, ROWS, ROWS),
])
def test_window_path_and_the_kernel_each_pool_calls(shape, kernel, stride, padding, ceil_mode, max_path, avg_path):
    """The path of some well-known pools, and the kernel their emitted line calls (only that one)."""
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode}
    for op, path, kernels in (("max_pool2d", max_path, MAX_POOL_KERNELS), ("avg_pool2d", avg_path, AVG_POOL_KERNELS)):
        assert window_path(shape, _out_shape(op, shape, attrs), kernel, stride, padding, (1, 1),
                           op == "max_pool2d") == path
        if np.prod(shape) <= 1 << 16:
            lines = check(op, rand(*shape), attrs, rtol=0 if op == "max_pool2d" else 1e-5)
            called = [name for name, k in kernels.items() if f"_{k.py_func.__name__}(" in lines[0]]
            assert called == [path], (lines[0], called)


@pytest.mark.parametrize("op", ["max_pool2d", "max_pool2d_indices"])
# (kernel, padding, stride): at stride 2, 2x2 takes the one-pass path; at stride 1, the flat passes
@pytest.mark.parametrize("window", [(3, 1, 2), (2, 0, 2), (3, 1, 1), (5, 2, 1)])
def test_max_pool_ints_nan_and_jit(op, window):
    k, pad, stride = window
    attrs = {"kernel": (k, k), "stride": (stride, stride), "padding": (pad,) * 4}
    check(op, rand(2, 3, 9, 8, dtype=np.int32), attrs, jit=True, rtol=0, atol=0)
    x = rand(2, 3, 9, 8)
    x[0, 1, 4, 4] = np.nan
    x[1, 2, :, :] = -np.inf
    check(op, x, attrs, rtol=0, atol=0)


@pytest.mark.parametrize("shape, kernel, stride, padding, ceil_mode", WINDOWS)
@pytest.mark.parametrize("count_include_pad, divisor", [(True, None), (False, None), (True, 3)])
def test_avg_pool(shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode,
             "count_include_pad": count_include_pad, "divisor_override": divisor}
    check("avg_pool2d", rand(*shape), attrs)


@pytest.mark.parametrize("op", ["adaptive_avg_pool2d", "adaptive_max_pool2d", "adaptive_max_pool2d_indices"])
@pytest.mark.parametrize("shape, size", [((1, 512, 7, 7), (1, 1)), ((4, 3, 10, 13), (3, 5)), ((2, 2, 5, 4), (7, 6)),
                                         ((1, 64, 33, 33), (7, 7)), ((4, 1, 9, 9), (9, 1)),
                                         ((1, 256, 6, 6), (6, 6))])  # every bin one pixel: a copy
def test_adaptive(op, shape, size):
    check(op, rand(*shape), {"output_size": size}, rtol=0 if "max" in op else 1e-5)


def test_adaptive_jit_ints_and_nan():
    check("adaptive_max_pool2d_indices", rand(2, 3, 8, 9, dtype=np.int64), {"output_size": (3, 4)}, jit=True)
    x = rand(1, 2, 8, 9)
    x[0, 0, 2, 3] = np.nan
    for op in ("adaptive_max_pool2d", "adaptive_max_pool2d_indices"):
        check(op, x, {"output_size": (3, 4)}, rtol=0, atol=0)
