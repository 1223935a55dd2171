"""Convolution, pad, linear and matmul kernels, run through their emit rules, match the IR
reference; a few cases also run the emitted lines inside @njit, as the forward does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import codegen.emit.conv as emit_conv
from codegen.kernels.vectors import target_vector_floats
from ir.graph import Value, make_node
from ir.op_registry import get_op
from ir.ops.fused import epilogue_activations
from ir.types import TensorType
from tests.codegen.rules import check_rule, read_only, zero_bias

RNG = np.random.default_rng(0)
EPILOGUE_ACTIVATIONS = list(epilogue_activations())  # "none" first


def check(op, arrays, attrs, weights=(), rtol=1e-4, atol=1e-4, jit=False, over_input=None):
    """Run op's emit rule and compare with the IR reference; return the emitted lines."""
    return check_rule(op, arrays, attrs, weights=weights, jit=jit, rtol=rtol, atol=atol, over_input=over_input)


def rand(*shape, scale=1.0, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-9, 9, size=shape).astype(dtype)
    return (RNG.normal(size=shape) * scale).astype(dtype)


def conv_arrays(n, c, h, w, o, kernel, groups, bias=True):
    kh, kw = kernel
    arrays = [rand(n, c, h, w), rand(o, c // groups, kh, kw, scale=(c // groups * kh * kw) ** -0.5)]
    return arrays + [rand(o)] if bias else arrays


# (n, c, h, w), o, kernel, stride, padding (t, l, b, r), dilation, groups
CONVS = [
    ((1, 8, 9, 11), 6, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 1x1: direct GEMM
    ((4, 6, 7, 5), 10, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),  # 1x1 stride 2
    ((1, 5, 9, 11), 7, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((4, 16, 13, 12), 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 32, 30, 30), 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 5, 15, 14), 8, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),
    ((2, 3, 23, 21), 16, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),  # ResNet stem
    ((1, 3, 20, 19), 8, (6, 6), (2, 2), (2, 2, 2, 2), (1, 1), 1),  # YOLOv5 stem
    ((1, 4, 10, 13), 6, (2, 3), (2, 1), (0, 1, 2, 0), (2, 1), 1),  # asymmetric everything
    ((2, 4, 11, 9), 4, (3, 3), (1, 3), (2, 0, 1, 3), (2, 2), 1),
    ((1, 3, 6, 7), 5, (3, 3), (1, 1), (4, 3, 4, 3), (1, 1), 1),  # padding wider than the kernel
    ((1, 3, 5, 5), 4, (5, 5), (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 1x1 output
    ((4, 8, 9, 10), 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),  # groups
    ((1, 12, 8, 7), 8, (3, 1), (2, 1), (1, 0, 1, 0), (1, 1), 4),
    ((1, 8, 6, 6), 8, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 2),  # grouped 1x1 direct
    ((4, 16, 12, 11), 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 16),  # depthwise
    ((1, 24, 15, 16), 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 24),  # depthwise stride 2
    ((1, 6, 11, 9), 12, (5, 3), (2, 1), (2, 0, 1, 2), (1, 2), 6),  # depthwise, multiplier 2
    ((2, 8, 9, 9), 8, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 8),  # depthwise dilated
    ((1, 16, 64, 61), 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),  # few channel panels: rows split
    ((1, 24, 40, 39), 12, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),  # the same, 1x1: pixels split
]


def conv_attrs(kernel, stride, padding, dilation, groups, mode="zeros"):
    return {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups, "padding_mode": mode}


@pytest.mark.parametrize("shape, o, kernel, stride, padding, dilation, groups", CONVS)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(shape, o, kernel, stride, padding, dilation, groups, bias):
    check("conv2d", conv_arrays(*shape, o, kernel, groups, bias), conv_attrs(kernel, stride, padding, dilation, groups),
          weights=(1, 2) if bias else (1,))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, o, kernel, stride, padding, groups", [
    ((1, 4, 9, 8), 6, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    ((2, 3, 10, 11), 5, (3, 2), (2, 1), (2, 1, 0, 1), 1),
    ((1, 6, 7, 7), 6, (3, 3), (2, 2), (1, 1, 1, 1), 6),
])
def test_conv2d_padding_modes(mode, shape, o, kernel, stride, padding, groups):
    check("conv2d", conv_arrays(*shape, o, kernel, groups), conv_attrs(kernel, stride, padding, (1, 1), groups, mode),
          weights=(1, 2))


def epilogue_attrs(act, post="none", alpha=None, beta=None):
    params = {"clamp": (-0.5, 0.75), "leaky_relu": (0.1, 0.0), "elu": (0.8, 0.0)}
    a, b = params.get(act, (0.0, 0.0))
    pa, pb = params.get(post, (0.0, 0.0))
    return {"activation": act, "alpha": a, "beta": b, "post_activation": post, "post_alpha": pa, "post_beta": pb}


FUSED_SHAPES = [  # one of each kernel path: im2col, direct 1x1, depthwise, 3x3 stride 1, 1x1 on 1x1 images
    ((2, 6, 9, 7), 5, (3, 3), (2, 2), (1, 1, 1, 1), 1),
    ((1, 8, 5, 6), 12, (1, 1), (1, 1), (0, 0, 0, 0), 1),
    ((2, 8, 7, 9), 8, (3, 3), (1, 1), (1, 1, 1, 1), 8),
    ((1, 16, 10, 11), 16, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    ((1, 24, 1, 1), 40, (1, 1), (1, 1), (0, 0, 0, 0), 1),
]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("weights", [(1, 2), ()])
@pytest.mark.parametrize("stride", [(1, 1), (2, 2)])
def test_1x1_conv_on_1x1_images_is_a_linear_layer(n, weights, stride):
    """The squeeze-and-excitation convs: the linear kernel (dot products at batch 1; above, the
    microkernel with weights known at compile time, BLAS with computed ones)."""
    attrs = conv_attrs((1, 1), stride, (0, 0, 0, 0), (1, 1), 1)
    lines = check("conv2d", conv_arrays(n, 48, 1, 1, 20, (1, 1), 1), attrs, weights=weights)
    # (weights known at compile time and more than 2 rows: on the microkernel, linear_packed)
    assert ("gemm_linear_packed(" if weights and n > 2 else "gemm_linear(") in lines[0], lines[0]


@pytest.mark.parametrize("act", EPILOGUE_ACTIVATIONS)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("shape, o, kernel, stride, padding, groups", FUSED_SHAPES)
def test_fused_conv2d(act, residual, shape, o, kernel, stride, padding, groups):
    attrs = {**conv_attrs(kernel, stride, padding, (1, 1), groups),
             **epilogue_attrs(act, "relu" if residual and act == "none" else "none")}
    arrays = conv_arrays(*shape, o, kernel, groups)
    if residual:
        out = get_op("conv2d").infer_types([TensorType(a.shape) for a in arrays],
                                           get_op("conv2d").normalize_attrs(conv_attrs(kernel, stride, padding, (1, 1),
                                                                                      groups)))[0]
        arrays.append(rand(*out.shape))
    check("fused_conv2d", arrays, attrs, weights=(1, 2))


@pytest.mark.parametrize("post", [a for a in EPILOGUE_ACTIVATIONS if a != "none"])
def test_fused_conv2d_post_activation(post):
    arrays = conv_arrays(1, 4, 6, 7, 6, (3, 3), 1)
    arrays.append(rand(1, 6, 6, 7))
    attrs = {**conv_attrs((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1), **epilogue_attrs("leaky_relu", post)}
    check("fused_conv2d", arrays, attrs, weights=(1, 2))


WINOGRAD_CONVS = [  # (n, c, h, w), o, padding (t, l, b, r)
    ((1, 32, 12, 12), 32, (1, 1, 1, 1)),
    ((2, 32, 13, 15), 40, (1, 1, 1, 1)),  # odd sizes: the last tiles hang over
    ((1, 40, 14, 17), 32, (0, 0, 0, 0)),  # valid conv
    ((1, 32, 15, 13), 36, (2, 0, 1, 2)),  # asymmetric padding
    ((3, 32, 12, 16), 48, (1, 1, 1, 1)),
    ((7, 64, 40, 40), 32, (1, 1, 1, 1)),  # images run 5 at a time (RUN_BYTES), then the last 2
    ((1, 256, 64, 63), 32, (1, 1, 1, 1)),  # an image in runs of tile rows
]


@pytest.fixture
def no_channel_taps(monkeypatch):
    """conv2d_packed for every conv it can take, even those conv2d_by_channels takes on its own
    (tests/codegen/test_conv_channels.py)."""
    monkeypatch.setattr(emit_conv, "CHANNEL_TAPS_MIN_STEPS", 1 << 62)
    monkeypatch.setattr(emit_conv, "CHANNEL_TAPS_SMALL_MAX_PIXELS", 0)
    monkeypatch.setattr(emit_conv, "GROUPED_CHANNEL_TAPS_MAX_PIXELS", 0)
    monkeypatch.setattr(emit_conv, "GROUPED_CHANNEL_TAPS_MAX_PIXELS_ONE", 0)


@pytest.fixture
def any_winograd(monkeypatch):
    """Winograd for every conv it can take, however small: its kernel's edges, apart from the
    rule that chooses it for the convs where it gains."""
    monkeypatch.setattr(emit_conv, "WINOGRAD_MIN_TILES", 1)
    monkeypatch.setattr(emit_conv, "WINOGRAD_AVX2_MIN_TILES", 1)
    monkeypatch.setattr(emit_conv, "WINOGRAD_MIN_FILLED_TILES", 0)
    monkeypatch.setattr(emit_conv, "WINOGRAD_MIN_PRODUCT_MACS", 0)
    monkeypatch.setattr(emit_conv, "WINOGRAD_MIN_CHANNEL_MACS", 0)
    monkeypatch.setattr(emit_conv, "WINOGRAD_MIN_OUT_CHANNELS", 0)
    monkeypatch.setattr(emit_conv, "WINOGRAD_AVX2_MIN_PRODUCT_MACS", 0)
    monkeypatch.setattr(emit_conv, "WINOGRAD_AVX2_MIN_CHANNEL_MACS", 0)


@pytest.mark.usefixtures("any_winograd")
@pytest.mark.parametrize("shape, o, padding", WINOGRAD_CONVS)
@pytest.mark.parametrize("act, residual", [("none", False), ("relu", False), ("silu", True), ("none", True)])
def test_winograd_conv2d(shape, o, padding, act, residual):
    attrs = {**conv_attrs((3, 3), (1, 1), padding, (1, 1), 1), **epilogue_attrs(act, "relu" if residual else "none")}
    arrays = conv_arrays(*shape, o, (3, 3), 1)
    if residual:
        out = get_op("conv2d").infer_types([TensorType(a.shape) for a in arrays[:3]],
                                           get_op("conv2d").normalize_attrs(conv_attrs((3, 3), (1, 1), padding,
                                                                                      (1, 1), 1)))[0]
        arrays.append(rand(*out.shape))
    lines = check("fused_conv2d", arrays, attrs, weights=(1, 2), rtol=1e-5, atol=1e-5)
    assert "winograd_conv2d" in lines[0] and "__winograd" in lines[0]


def _with_residual(shape, o, kernel, stride, padding, groups=1):
    arrays = conv_arrays(*shape, o, kernel, groups)
    out = get_op("conv2d").infer_types([TensorType(a.shape) for a in arrays],
                                       get_op("conv2d").normalize_attrs(conv_attrs(kernel, stride, padding, (1, 1),
                                                                                  groups)))[0]
    return arrays + [rand(*out.shape)]


def _fused_node(arrays, attrs):
    """The fused_conv2d node of arrays (weight and bias constants), as writes_over_residual sees it."""
    values = [Value(f"x{i}", TensorType(a.shape, a.dtype.name), a if i in (1, 2) else None)
              for i, a in enumerate(arrays)]
    return make_node("fused_conv2d", "n", values, ["y"], attrs)


# (n, c, h, w), o, kernel, stride, padding, activation, post-activation
OVER_RESIDUAL = [
    ((1, 24, 40, 39), 12, (1, 1), (1, 1), (0, 0, 0, 0), "none", "relu"),  # 1x1: pixels split between tasks
    ((4, 16, 20, 20), 40, (1, 1), (1, 1), (0, 0, 0, 0), "relu", "none"),  # a batch, channels in blocks
    ((2, 16, 40, 38), 24, (1, 1), (2, 2), (0, 0, 0, 0), "none", "relu"),  # subsampled first (a downsample)
    ((1, 16, 64, 61), 16, (3, 3), (1, 1), (1, 1, 1, 1), "silu", "relu"),  # phase planes, rows split; silu blocked
    ((4, 16, 13, 12), 24, (3, 3), (1, 1), (1, 1, 1, 1), "clamp", "none"),
    ((2, 6, 9, 7), 5, (3, 3), (2, 2), (1, 1, 1, 1), "none", "relu"),
]


@pytest.mark.usefixtures("no_channel_taps")
@pytest.mark.parametrize("shape, o, kernel, stride, padding, act, post", OVER_RESIDUAL)
def test_fused_conv2d_writes_its_output_over_its_residual(shape, o, kernel, stride, padding, act, post):
    """The memory plan may give a residual conv's output its residual's buffer (writes_over_residual):
    the kernel then reads each residual element where it writes the output, and must still be right."""
    attrs = {**conv_attrs(kernel, stride, padding, (1, 1), 1), **epilogue_attrs(act, post)}
    arrays = _with_residual(shape, o, kernel, stride, padding)
    assert emit_conv.writes_over_residual(_fused_node(arrays, attrs)) == 3
    lines = check("fused_conv2d", arrays, attrs, weights=(1, 2), over_input=3)
    assert ("conv1x1_packed" if kernel == (1, 1) else "conv2d_packed") in lines[-1]


@pytest.mark.usefixtures("any_winograd")
@pytest.mark.parametrize("shape, o, padding", WINOGRAD_CONVS[:2] + WINOGRAD_CONVS[-2:])
def test_winograd_writes_its_output_over_its_residual(shape, o, padding):
    attrs = {**conv_attrs((3, 3), (1, 1), padding, (1, 1), 1), **epilogue_attrs("relu", "relu")}
    arrays = _with_residual(shape, o, (3, 3), (1, 1), padding)
    assert emit_conv.writes_over_residual(_fused_node(arrays, attrs)) == 3
    lines = check("fused_conv2d", arrays, attrs, weights=(1, 2), rtol=1e-5, atol=1e-5, over_input=3)
    assert "winograd_conv2d" in lines[0]


@pytest.mark.usefixtures("any_winograd")
@pytest.mark.parametrize("shape, o, kernel, groups, act, post", [
    ((1, 8, 9, 11), 6, (3, 3), 1, "none", "sigmoid"),  # a post-activation beyond relu: a copy per run
    ((1, 16, 12, 12), 16, (3, 3), 1, "silu", "relu"),  # Winograd, an activation beyond a clamp: the same
    ((2, 8, 7, 9), 8, (3, 3), 8, "none", "relu"),  # depthwise: its flat path writes the output first
])
def test_residuals_the_kernel_would_write_over_too_soon_or_slowly_keep_their_buffer(shape, o, kernel, groups, act,
                                                                                    post):
    attrs = {**conv_attrs(kernel, (1, 1), (1, 1, 1, 1), (1, 1), groups), **epilogue_attrs(act, post)}
    arrays = _with_residual(shape, o, kernel, (1, 1), (1, 1, 1, 1), groups)
    assert emit_conv.writes_over_residual(_fused_node(arrays, attrs)) is None
    if groups == 1:  # epilogue_run keeps the residual of a run before its general passes: still right
        check("fused_conv2d", arrays, attrs, weights=(1, 2), rtol=1e-5, atol=1e-5, over_input=3)


@pytest.mark.parametrize("act, post, expected", [("none", "relu", 3), ("clamp", "none", 3), ("silu", "none", None)])
def test_1x1_convs_with_channels_in_the_vectors_write_over_a_residual_after_a_one_pass_activation(monkeypatch, act,
                                                                                                   post, expected):
    """conv1x1_by_channels adds the residual on the way out of its block after ReLU or a clamp; after
    another activation it writes the output first and adds the residual to it in place."""
    monkeypatch.setattr(emit_conv, "target_vector_floats", lambda: 16)
    attrs = {**conv_attrs((1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1), **epilogue_attrs(act, post)}
    node = _fused_node(_with_residual((1, 32, 7, 7), 64, (1, 1), (1, 1), (0, 0, 0, 0)), attrs)
    assert emit_conv.uses_channel_vectors(node, 16) and emit_conv.writes_over_residual(node) == expected


@pytest.mark.usefixtures("any_winograd")
@pytest.mark.parametrize("shape, o, kernel, stride, dilation, groups, mode", [
    ((1, 32, 12, 12), 32, (3, 3), (1, 1), (1, 1), 1, "reflect"),  # padding mode
    ((1, 32, 12, 12), 32, (3, 3), (2, 2), (1, 1), 1, "zeros"),  # stride
    ((1, 32, 14, 14), 32, (3, 3), (1, 1), (2, 2), 1, "zeros"),  # dilation
    ((1, 32, 12, 12), 32, (3, 3), (1, 1), (1, 1), 2, "zeros"),  # groups
])
def test_convs_winograd_cannot_take(shape, o, kernel, stride, dilation, groups, mode):
    lines = check("conv2d", conv_arrays(*shape, o, kernel, groups), conv_attrs(kernel, stride, (1, 1, 1, 1), dilation,
                                                                           groups, mode), weights=(1, 2))
    assert "winograd" not in lines[0]


@pytest.mark.parametrize("shape, o", [
    ((1, 32, 6, 6), 32),  # 9 tiles: too few to gain
    ((1, 256, 5, 5), 256),  # one 5 x 5 image: 9 tiles, its weights' traffic decides (WINOGRAD_AVX2_MIN_TILES)
    ((1, 128, 14, 14), 32),  # products of 128 x 32 x 49 multiply-adds: too few (WINOGRAD_MIN_PRODUCT_MACS)
    ((8, 128, 14, 14), 32),  # 128 x 32 x 49 an image: too few, whatever the batch
    ((1, 32, 64, 64), 32),  # 32 x 32 channels: the transforms outweigh the products (WINOGRAD_MIN_CHANNEL_MACS)
])
def test_convs_too_small_for_winograd_run_direct(shape, o):
    lines = check("conv2d", conv_arrays(*shape, o, (3, 3), 1), conv_attrs((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
                  weights=(1, 2), rtol=1e-4, atol=1e-4)
    assert "winograd" not in lines[0] and ("conv2d_packed" in lines[0] or "conv2d_by_channels" in lines[0])


@pytest.mark.parametrize("shape, o", [
    ((1, 64, 32, 32), 64),  # 256 tiles: products of 64 x 64 x 256 multiply-adds (WINOGRAD_MIN_PRODUCT_MACS)
    ((2, 256, 8, 8), 256),  # two 8 x 8 images: 32 tiles (WINOGRAD_MIN_TILES)
    ((1, 128, 64, 64), 64),  # 128 x 64 channels (WINOGRAD_MIN_CHANNEL_MACS), 1024 tiles
])
def test_winograd_takes_convs_large_enough_to_gain(shape, o):
    lines = check("conv2d", conv_arrays(*shape, o, (3, 3), 1), conv_attrs((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
                  weights=(1, 2), rtol=1e-4, atol=1e-4)
    assert "winograd_conv2d" in lines[0]


@pytest.mark.parametrize("width, n, side, expected", [
    (16, 1, 14, True),  # 49 tiles, all filled
    (16, 1, 13, False),  # 49 tiles, 169 pixels in 196: direct on AVX-512 (WINOGRAD_MIN_TILE_FILL)
    (8, 1, 13, True),  # with AVX2's vectors, Winograd
    (16, 2, 7, False),  # 32 tiles, 98 pixels in 128
    (16, 4, 7, True),  # 64 tiles: Winograd whatever their fill (WINOGRAD_MIN_FILLED_TILES)
    (16, 1, 8, False),  # 16 tiles: too few on AVX-512 (WINOGRAD_MIN_TILES)
    (16, 1, 7, False),
    (8, 1, 7, True),  # on AVX2, enough for products of 256 x 256 x 16 multiply-adds (WINOGRAD_AVX2_MIN_TILES)
    (8, 1, 5, False),  # 9 tiles: too few on any machine
])
def test_winograd_on_few_tiles_needs_sides_that_fill_them_on_avx512(monkeypatch, width, n, side, expected):
    """With few tiles, odd sides (a row and a column of tiles half past the image) run direct where
    numba targets AVX-512; with AVX2's vectors the direct kernels reach half the FLOP/s, and they do not."""
    monkeypatch.setattr(emit_conv, "target_vector_floats", lambda: width)
    assert emit_conv.uses_winograd(_conv3x3_node(n, 256, 256, side)) == expected


def _conv3x3_node(n, c, o, side):
    weight = rand(o, c, 3, 3)
    return make_node("conv2d", "c", [Value("x", TensorType((n, c, side, side))),
                                     Value("w", TensorType(weight.shape), weight)], ["y"],
                     conv_attrs((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1))


@pytest.mark.parametrize("width, n, c, o, side, expected", [
    (16, 8, 128, 32, 28, False),  # 128 x 32 x 196 an image: too few on AVX-512, whatever the batch
    (8, 8, 128, 32, 28, True),  # on AVX2 products from 0.26M multiply-adds gain (WINOGRAD_AVX2_MIN_PRODUCT_MACS)
    (8, 1, 128, 32, 28, True),
    (8, 1, 64, 64, 16, True),  # 64 x 64 x 64: the smallest product AVX2 takes
    (16, 1, 64, 64, 16, False),
    (8, 4, 128, 32, 14, False),  # 128 x 32 x 49: too few on AVX2 too
    (8, 1, 32, 32, 32, False),  # 32 x 32 channels: too few pairs on AVX2 (WINOGRAD_AVX2_MIN_CHANNEL_MACS)
    (8, 1, 64, 32, 32, True),  # 64 x 32 channels
    (16, 1, 64, 32, 32, False),  # (WINOGRAD_MIN_CHANNEL_MACS)
    (16, 1, 128, 32, 56, False),  # 32 output channels: direct on AVX-512 (WINOGRAD_MIN_OUT_CHANNELS)
    (16, 8, 128, 32, 56, False),
    (8, 1, 128, 32, 56, True),  # on AVX2 Winograd
    (16, 1, 128, 64, 56, True),  # 64 output channels
    (8, 1, 256, 256, 7, True),  # 16 tiles: enough on AVX2 for products of 1M multiply-adds (WINOGRAD_AVX2_MIN_TILES)
    (8, 1, 256, 128, 7, False),  # 256 x 128 x 16: too small a product for so few tiles
    (8, 1, 512, 512, 5, False),  # 9 tiles: too few
    (8, 2, 512, 512, 5, False),  # 18 tiles of 25 pixels in 36: too empty (WINOGRAD_AVX2_FEW_TILES_MIN_FILL)
    (8, 4, 512, 512, 4, True),  # 16 full tiles
])
def test_winograd_takes_smaller_convs_on_avx2(monkeypatch, width, n, c, o, side, expected):
    """With AVX2's vectors Winograd takes products 4x smaller, and fewer channel pairs, than on AVX-512."""
    monkeypatch.setattr(emit_conv, "target_vector_floats", lambda: width)
    assert emit_conv.uses_winograd(_conv3x3_node(n, c, o, side)) == expected


@pytest.mark.usefixtures("any_winograd")
def test_winograd_needs_constant_weights():
    arrays = conv_arrays(1, 32, 12, 12, 32, (3, 3), 1)
    lines = check("conv2d", arrays, conv_attrs((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1), weights=(2,))
    assert "winograd" not in lines[0]


@pytest.mark.parametrize("shape, og, kernel, stride, padding, output_padding, dilation, groups", [
    ((1, 8, 5, 6), 4, (2, 2), (2, 2), (0, 0, 0, 0), (0, 0), (1, 1), 1),  # UNet up-sampling
    ((4, 6, 7, 5), 3, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 5, 5), 3, (4, 3), (1, 2), (0, 2, 1, 0), (0, 1), (1, 1), 2),
    ((1, 3, 4, 6), 5, (3, 3), (3, 2), (2, 1, 2, 1), (2, 0), (2, 1), 1),
    ((1, 6, 3, 3), 2, (5, 5), (1, 1), (0, 0, 0, 0), (0, 0), (1, 1), 3),
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose2d(shape, og, kernel, stride, padding, output_padding, dilation, groups, bias):
    n, c = shape[:2]
    arrays = [rand(*shape), rand(c, og, *kernel, scale=0.3)] + ([rand(og * groups)] if bias else [])
    attrs = {"stride": stride, "padding": padding, "output_padding": output_padding, "dilation": dilation,
             "groups": groups}
    check("conv_transpose2d", arrays, attrs, weights=(1, 2) if bias else (1,))


@pytest.mark.parametrize("shape, og, kernel", [
    ((1, 8, 5, 6), 4, (2, 2)),  # UNet's 2x2 stride-2 upsampling
    ((3, 5, 4, 3), 6, (3, 2)),  # a batch; taps of their own per dim
    ((1, 4, 6, 5), 3, (1, 3)),  # three taps across: the general interleave
    ((2, 64, 8, 8), 40, (2, 2)),  # channels past whole panels, on the threads
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose2d_with_the_kernel_as_stride_runs_as_a_1x1_conv_and_an_interleave(shape, og, kernel, bias):
    """A transposed conv whose kernel is its stride (no padding) with weights known at compile
    time: conv2d_packed's 1x1 conv into a channel per (output channel, tap), then one strided copy
    into the output; against the reference. A weight computed by the model keeps the GEMM path."""
    c = shape[1]
    arrays = [rand(*shape), rand(c, og, *kernel, scale=0.3)] + ([rand(og)] if bias else [])
    attrs = {"stride": kernel, "padding": (0, 0, 0, 0), "output_padding": (0, 0), "dilation": (1, 1), "groups": 1}
    lines = check("conv_transpose2d", arrays, attrs, weights=(1, 2) if bias else (1,), rtol=1e-5, atol=1e-5)
    assert "_taps = np.empty" in lines[0] and "conv1x1_packed" in lines[1] and "interleave_taps" in lines[2], lines
    lines = check("conv_transpose2d", arrays, attrs, weights=(), rtol=1e-5, atol=1e-5)
    assert "conv_conv_transpose2d" in lines[0], lines


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pads", [
    ((2, 3, 7, 6), (1, 2, 3, 0)),
    ((3, 9), (2, 4)),
    ((5,), (3, 1)),
    ((2, 4, 5, 6), (1, 1, 2, 2, 1, 0)),
    ((2, 3, 4, 5, 6), (2, 1, 0, 3)),
    ((2, 3, 4, 5, 6), (1, 1, 1, 1, 1, 1, 1, 1)),
    ((1, 3, 8, 9), (-1, 2, 1, -2)),  # negative pads crop
])
def test_pad(mode, shape, pads):
    try:
        get_op("pad").infer_types([TensorType(shape)], {"pads": pads, "mode": mode, "value": 0.0})
    except ValueError:
        pytest.skip("pads too wide for this mode")
    check("pad", [rand(*shape)], {"pads": pads, "mode": mode, "value": 1.5}, rtol=0, atol=0)


def test_pad_ints():
    check("pad", [rand(2, 5, 4, dtype=np.int32)], {"pads": (1, 2, 0, 1), "mode": "constant", "value": 3.0},
          rtol=0, atol=0)


@pytest.mark.parametrize("x_shape", [(7,), (3, 7), (2, 3, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(x_shape, bias):
    arrays = [rand(*x_shape), rand(5, 7)] + ([rand(5)] if bias else [])
    check("linear", arrays, {}, weights=(1, 2) if bias else (1,))


@pytest.mark.parametrize("rows, k, o", [(1, 1280, 1000), (2, 300, 70), (3, 300, 70), (1, 5, 3), (2, 2048, 600)])
@pytest.mark.parametrize("act, residual", [("none", False), ("relu", True), ("gelu", False)])
def test_linear_few_rows(rows, k, o, act, residual):
    """Products of one or two rows (dot products per feature, in blocks) and of three (the
    microkernel, linear_packed), small and large enough to run in parallel, against float64."""
    arrays = [rand(rows, k), rand(o, k, scale=k ** -0.5), rand(o)] + ([rand(rows, o)] if residual else [])
    check("fused_linear", arrays, epilogue_attrs(act, "clamp" if residual else "none"), weights=(1, 2),
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows, k, o", [
    (3, 9, 5),  # one group of rows, padded from 3 to MR; one half panel of features
    (49, 3072, 70),  # ConvNeXt's last stage: 9 groups (the last of 1 row), 24 reduction chunks
    (200, 96, 385),  # 3 tiles of rows (72, 72, 56), features past whole panels (385 = 12 * 32 + 1)
    (128, 64, 70),  # 2 equal tiles of rows (66, 62: a partial last group), in parallel
    (13, 40, 48),  # 48 features: a whole panel and a half one on AVX-512
])
@pytest.mark.parametrize("act, residual", [("none", False), ("relu", True), ("gelu", False)])
def test_linear_on_the_microkernel(rows, k, o, act, residual):
    """A float32 linear with its weight known at compile time and more than two rows runs on
    linear_packed (the microkernel, the weight in panels), and matches float64."""
    arrays = [rand(rows, k), rand(o, k, scale=k ** -0.5), rand(o)] + ([rand(rows, o)] if residual else [])
    lines = check("fused_linear", arrays, epilogue_attrs(act, "clamp" if residual else "none"), weights=(1, 2),
                  rtol=1e-5, atol=1e-5)
    assert "gemm_linear_packed(" in lines[0], lines[0]


@pytest.mark.parametrize("n, c, o, h, w", [
    (1, 320, 70, 7, 7),  # 49 pixels: 8 groups of MR and a partial one; channels past whole panels
    (3, 7, 13, 5, 3),  # batch, a half panel of channels, one partial group per image
    (2, 40, 48, 10, 11),  # 110 pixels: two tiles (PACKED_ROWS), the second of 14
    (1, 300, 33, 6, 6),  # 300 input channels: 3 reduction chunks (PACKED_K_CHUNK)
])
@pytest.mark.parametrize("act, post, residual, bias, over", [
    ("none", "none", False, True, False), ("clamp", "none", True, False, False), ("silu", "none", True, True, False),
    ("none", "relu", True, True, True),  # ResNet's residual then ReLU, the output written over the residual
    ("clamp", "none", True, False, True),
])
def test_1x1_conv_by_channels_matches_float64(n, c, o, h, w, act, post, residual, bias, over):
    """conv1x1_by_channels (the output channels in the vectors), called directly whatever this
    machine's choice between it and conv2d_packed, against a float64 product; over: the output is
    the residual's array (codegen/emit/conv.py, writes_over_residual)."""
    import codegen.runtime  # noqa: F401 - numba's target before the kernels compile
    from codegen.kernels.conv import conv1x1_by_channels
    from codegen.kernels.epilogue import ACTIVATION_CODES
    from codegen.kernels.gemm import transpose_padded

    x, weight, b = rand(n, c, h, w), rand(o, c, scale=c ** -0.5), rand(o)
    res = rand(n, o, h, w) if residual else None
    alpha, beta = (-0.5, 0.75) if act == "clamp" else (0.0, 0.0)
    out = res.copy() if over else np.full((n, o, h, w), np.nan, np.float32)
    # a forward's arguments: read-only weights, zeros for no bias, an empty view of out for no residual
    conv1x1_by_channels(x, read_only(transpose_padded(weight)), read_only(b) if bias else zero_bias(o),
                        out if over else out[:0] if res is None else res, out,
                        ACTIVATION_CODES[act], alpha, beta, ACTIVATION_CODES[post], 0.0, 0.0)
    ref = np.einsum("oc,nchw->nohw", weight.astype(np.float64), x.astype(np.float64))
    ref = ref + (b[:, None, None] if bias else 0)
    ref = {"none": ref, "clamp": np.clip(ref, alpha, beta), "silu": ref / (1 + np.exp(-ref))}[act]
    ref = ref + (res if residual else 0)
    np.testing.assert_allclose(out, np.maximum(ref, 0) if post == "relu" else ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("hw, width, expected", [(7, 16, True), (7, 8, False), (14, 16, False), (3, 16, True),
                                                  (4, 16, False)])
def test_1x1_convs_take_the_channel_vectors_where_pixels_pad_less(hw, width, expected):
    """7 x 7 images pad to 64 columns of AVX-512 half panels but 54 MR-pixel rows: those (and 3 x 3)
    take conv1x1_by_channels; on AVX2 (8-float vectors: 56 columns), or at 14 x 14, they do not."""
    from codegen.emit.conv import uses_channel_vectors
    from ir.graph import Node, Value

    x, y = Value("x", TensorType((1, 32, hw, hw))), Value("y", TensorType((1, 48, hw, hw)))
    weight = rand(48, 32, 1, 1)
    node = Node("conv2d", "conv", [x, Value("w", TensorType(weight.shape), weight)], [y],
                conv_attrs((1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1))
    assert uses_channel_vectors(node, width) == expected


def test_the_emitted_1x1_conv_on_7x7_images_matches_the_reference():
    from codegen.kernels.vectors import target_vector_floats

    arrays = conv_arrays(2, 64, 7, 7, 40, (1, 1), 1) + [rand(2, 40, 7, 7)]
    lines = check("fused_conv2d", arrays, {**conv_attrs((1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
                                           **epilogue_attrs("relu", "relu")}, weights=(1, 2), rtol=1e-5, atol=1e-5)
    assert ("conv1x1_by_channels(" in lines[0]) == (target_vector_floats() == 16), lines[0]


@pytest.mark.parametrize("act", EPILOGUE_ACTIVATIONS)
@pytest.mark.parametrize("residual", [False, True])
def test_fused_linear(act, residual):
    arrays = [rand(2, 3, 9), rand(6, 9, scale=0.3), rand(6)] + ([rand(2, 3, 6)] if residual else [])
    check("fused_linear", arrays, epilogue_attrs(act, "clamp" if residual else "none"), weights=(1, 2))


@pytest.mark.parametrize("a_shape, b_shape", [
    ((3, 4), (4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4, 5)),  # x @ W: one GEMM
    ((3, 4), (2, 4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (1, 5, 4, 6)),
    ((6,), (2, 3, 6, 2)),
    ((2, 3, 5, 4), (4,)),
    ((2, 1, 2, 1, 2, 3, 4), (2, 1, 2, 1, 4, 2)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_matmul(a_shape, b_shape, dtype):
    check("matmul", [rand(*a_shape, dtype=dtype), rand(*b_shape, dtype=dtype)], {})


# matmul_small's edges: rows past whole groups of MR, columns past whole panels (the microkernel's, and
# transpose_padded's 32), a reduction longer than a chunk (PACKED_K_CHUNK), enough work for parallel tasks, a
# broadcast batch dim, an empty reduction or output
@pytest.mark.parametrize("a_shape, b_shape", [
    ((40, 17, 16), (40, 16, 17)),  # ViT-mini's attention at batch 10: parallel tasks of several matrices
    ((3, 7, 150), (3, 150, 33)),
    ((2, 4, 12, 5), (1, 4, 5, 70)),
    ((4, 3, 5, 6), (4, 1, 6, 7)),  # b broadcast over the inner batch dim: laid out once for 3 matrices
    ((64, 6, 1), (64, 1, 8)),  # whole groups and a half panel, one reduction step
    ((5, 3, 0), (5, 0, 4)),
    ((2, 0, 3), (2, 3, 4)),
])
def test_small_float32_matmuls_run_on_the_microkernel(a_shape, b_shape):
    lines = check("matmul", [rand(*a_shape), rand(*b_shape)], {}, rtol=1e-5, atol=1e-5)
    assert "matmul_small(" in lines[0]


def test_a_matmul_of_larger_matrices_stays_on_blas():
    """Past SMALL_MATMUL_MACS a matrix (or in float64) a BLAS call's fixed cost is small beside the product."""
    for dtype in (np.float32, np.float64):
        lines = check("matmul", [rand(3, 64, 48, dtype=dtype), rand(3, 48, 64, dtype=dtype)], {}, rtol=1e-5, atol=1e-5)
        assert "matmul(" in lines[0] and "matmul_small(" not in lines[0]
    lines = check("matmul", [rand(2, 5, 4, dtype=np.float64), rand(2, 4, 3, dtype=np.float64)], {})
    assert "matmul_small(" not in lines[0]


@pytest.mark.parametrize("op, arrays, attrs, weights", [
    ("conv2d", conv_arrays(1, 4, 7, 6, 5, (3, 3), 1), conv_attrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1), (1, 2)),
    ("conv2d", conv_arrays(1, 4, 7, 6, 5, (3, 3), 1, bias=False),
     conv_attrs((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "reflect"), (1,)),
    ("fused_conv2d", conv_arrays(2, 4, 5, 6, 4, (3, 3), 4) + [rand(2, 4, 5, 6)],
     {**conv_attrs((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4), **epilogue_attrs("silu", "relu")}, (1, 2)),
    ("conv_transpose2d", [rand(1, 4, 3, 5), rand(4, 2, 2, 2), rand(2)],
     {"stride": (2, 2), "padding": (0, 0, 0, 0), "output_padding": (0, 0), "dilation": (1, 1), "groups": 1}, (1, 2)),
    ("pad", [rand(2, 3, 4, 5)], {"pads": (1, 2, 2, 1), "mode": "reflect", "value": 0.0}, ()),
    ("fused_linear", [rand(3, 4), rand(5, 4), rand(5), rand(3, 5)], epilogue_attrs("gelu"), (1, 2)),
    ("linear", [rand(4), rand(5, 4)], {}, (1,)),
    ("matmul", [rand(2, 3, 4), rand(4, 5)], {}, ()),
    ("matmul", [rand(2, 1, 3, 4), rand(3, 4, 2)], {}, (1,)),
    ("matmul", [rand(3, 4, dtype=np.int64), rand(2, 4, 3, dtype=np.int64)], {}, ()),
])
def test_emitted_lines_compile_in_njit(op, arrays, attrs, weights):
    check(op, arrays, attrs, weights=weights, jit=True)


# convs that exercise the packed kernel's edges: output channels not a multiple of MR (6), pixels
# not a multiple of NR (16 or 32), reduction longer than one chunk (256), several tiles, blocks
# of channels split between tasks, batches, groups
PACKED_CONVS = [
    ((1, 3, 17, 19), 7, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    ((2, 40, 9, 9), 13, (3, 3), (2, 2), (1, 1, 1, 1), 1),  # k = 360: two reduction chunks
    ((1, 300, 10, 11), 50, (1, 1), (1, 1), (0, 0, 0, 0), 1),  # 1x1 read in place, 110 pixels: a tail panel
    ((3, 24, 11, 13), 37, (1, 1), (1, 1), (0, 0, 0, 0), 1),
    ((1, 8, 70, 66), 12, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    ((1, 64, 121, 119), 16, (3, 3), (2, 2), (1, 0, 2, 1), 1),  # several row tiles of phase planes, the last short
    ((1, 16, 150, 150), 8, (1, 1), (1, 1), (0, 0, 0, 0), 1),  # several pixel tiles of a 1x1 conv
    ((1, 64, 14, 14), 16, (1, 1), (1, 1), (0, 0, 0, 0), 1),  # pixels split between threads in half panels
    ((1, 20, 9, 10), 12, (1, 1), (1, 1), (1, 0, 1, 2), 1),  # 1x1 padded: phase planes (conv2d_packed)
    ((2, 12, 10, 10), 18, (3, 3), (1, 1), (1, 1, 1, 1), 3),
    ((1, 130, 3, 3), 200, (3, 3), (1, 1), (1, 1, 1, 1), 1),  # many channel panels, 9 pixels
    ((1, 3, 47, 45), 16, (11, 11), (4, 4), (2, 2, 2, 2), 1),  # AlexNet's stem: 16 phase planes a channel
    ((1, 4, 20, 22), 8, (3, 5), (3, 1), (1, 0, 2, 3), 1),  # stride 3 down, 1 across, uneven padding
    # blocks of many channel panels pack their pixels (_panels_by_pixels): a 1x1 conv with a partial
    # last half panel and packed columns in two passes (SUB_BYTES), a strided conv over two reduction
    # chunks, and groups
    ((1, 96, 20, 21), 200, (1, 1), (1, 1), (0, 0, 0, 0), 1),
    ((1, 40, 30, 29), 193, (3, 3), (2, 2), (1, 1, 1, 1), 1),
    ((2, 64, 8, 8), 384, (3, 3), (1, 1), (1, 1, 1, 1), 2),
]


@pytest.mark.usefixtures("no_channel_taps")
@pytest.mark.parametrize("shape, o, kernel, stride, padding, groups", PACKED_CONVS)
@pytest.mark.parametrize("act, residual", [("none", False), ("relu", True), ("silu", False)])
def test_conv2d_on_packed_weights(shape, o, kernel, stride, padding, groups, act, residual):
    """Float32 convs with constant weights run on the microkernel, and match: 1x1 stride-1 unpadded convs
    on conv1x1_packed (their input read in place), the others on conv2d_packed (phase planes)."""
    arrays = conv_arrays(*shape, o, kernel, groups)
    attrs = {**conv_attrs(kernel, stride, padding, (1, 1), groups), **epilogue_attrs(act)}
    if residual:
        (n, _, h, w), (t, left, b, r) = shape, padding
        arrays.append(rand(n, o, (h + t + b - kernel[0]) // stride[0] + 1, (w + left + r - kernel[1]) // stride[1] + 1))
    lines = check("fused_conv2d", arrays, attrs, weights=(1, 2), rtol=1e-4, atol=1e-4)
    pointwise = kernel == (1, 1) and stride == (1, 1) and not any(padding)
    assert ("conv1x1_packed" if pointwise else "conv2d_packed") in lines[0], lines


def _silu(v):
    return v / (1.0 + np.exp(-v))


@pytest.mark.parametrize("n, c, o, side", [
    (8, 96, 200, 7),  # 49 pixels an image: AVX2's panels of 16 cross from image to image
    (5, 64, 100, 3),  # 9 an image: a panel holds parts of three images; the last tile short
    (3, 130, 97, 2),  # 4 an image, a partial last channel panel
    (40, 400, 96, 5),  # four tiles of the batch's 1000 pixels, cut inside images
])
@pytest.mark.parametrize("act, post, residual", [
    ("relu", "none", "none"),  # the one-pass epilogue
    ("silu", "none", "separate"),  # activate_block over the whole tile once, then each image's run
    ("hardswish", "silu", "separate"),  # a second activation: epilogue_run per channel and image
    ("clamp", "relu", "output"),  # the residual in the output's own buffer
])
def test_1x1_convs_on_a_batch_of_small_images_tile_across_images(n, c, o, side, act, post, residual):
    """conv1x1_packed on a batch of small images whose pixels leave their last half panel partly empty
    cuts the batch's pixels as one row (spans_images, on AVX2): tiles and panels cross from image to image
    (_pack_columns) and each image's run goes out through the epilogue (_spanned_out). Matches float64."""
    from codegen.kernels.conv_packed import conv1x1_packed, spans_images
    from codegen.kernels.epilogue import ACTIVATION_CODES
    from codegen.kernels.microkernel import pack_weights

    rng = np.random.default_rng(n * side)
    x = rng.standard_normal((n, c, side, side)).astype(np.float32)
    wt = (rng.standard_normal((o, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    res = rng.standard_normal((n, o, side, side)).astype(np.float32)
    v = np.einsum("oc,nchw->nohw", wt[:, :, 0, 0].astype(np.float64), x.astype(np.float64)) + bias[:, None, None]
    first = {"relu": lambda a: np.maximum(a, 0), "silu": _silu, "clamp": lambda a: np.clip(a, -0.5, 0.75),
             "hardswish": lambda a: a * np.clip(a + 3, 0, 6) / 6}[act]
    then = {"none": lambda a: a, "relu": lambda a: np.maximum(a, 0), "silu": _silu}[post]
    ref = then(first(v) + res.astype(np.float64))
    out = res.copy() if residual == "output" else np.full(res.shape, np.nan, np.float32)
    alpha, beta = (-0.5, 0.75) if act == "clamp" else (0.0, 0.0)
    conv1x1_packed(x, read_only(pack_weights(wt, 1)), read_only(bias), out if residual == "output" else res, out,
                   (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), ACTIVATION_CODES[act], alpha, beta, ACTIVATION_CODES[post],
                   0.0, 0.0, None)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    if target_vector_floats() == 8:  # (AVX-512 reads two panels a call in place: no packing, no spanned tiles)
        assert spans_images(n, 1, side * side, c, -(-o // 6), True, 0)


def test_only_batches_of_small_images_that_waste_columns_span_images():
    """spans_images: not for one image, whole half panels of pixels (8 x 8), groups, a prologue, images
    that are not one tile each, or a block of too few channel panels or steps to pack."""
    from codegen.kernels.conv_packed import spans_images

    if target_vector_floats() != 8:
        assert not spans_images(8, 1, 49, 192, 32, True, 0)  # AVX-512: two panels a call, in place
        return
    assert spans_images(8, 1, 49, 192, 32, True, 0)
    assert spans_images(2, 1, 4, 512, 86, True, 0)
    for case in [(1, 1, 49, 192, 32, True, 0), (8, 1, 64, 192, 32, True, 0), (8, 1, 196, 192, 32, True, 0),
                 (8, 2, 49, 192, 32, True, 0), (8, 1, 49, 192, 32, False, 0), (8, 1, 49, 192, 32, True, 192),
                 (8, 1, 49, 192, 7, True, 0), (8, 1, 49, 32, 32, True, 0)]:
        assert not spans_images(*case), case


@pytest.mark.parametrize("n, o, act, residual", [
    (1, 64, "relu", False),  # 11 channel panels, the last full
    (1, 45, "silu", True),  # 8 panels, the last partial (3 of 6 channels)
    (2, 64, "silu", False),
])
def test_strided_convs_with_large_phase_planes_pack_their_pixels(n, o, act, residual):
    """conv2d_packed on a 3x3 stride-2 conv from 160 x 160 with 32 input channels (tiles of 456 KiB of phase
    planes) and 8-15 channel panels: on AVX2 its blocks pack their pixels (packs_pixels), the same sums as
    read in place. Matches float64, with the epilogue (bias, activation, residual)."""
    from codegen.kernels.conv_packed import conv2d_packed, packs_pixels
    from codegen.kernels.epilogue import ACTIVATION_CODES
    from codegen.kernels.microkernel import pack_weights

    c, side = 32, 160
    rng = np.random.default_rng(o + n)
    x = rng.standard_normal((n, c, side, side)).astype(np.float32)
    wt = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    res = rng.standard_normal((n, o, side // 2, side // 2)).astype(np.float32)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    v = np.einsum("ncyxij,ocij->noyx", windows, wt.astype(np.float64)) + bias[:, None, None]
    ref = {"relu": lambda a: np.maximum(a, 0), "silu": _silu}[act](v) + (res if residual else 0)
    out = np.full(ref.shape, np.nan, np.float32)
    conv2d_packed(x, read_only(pack_weights(wt, 1)), read_only(bias), res if residual else out[:0], out, (3, 3), (2, 2),
                  (1, 1, 1, 1), (1, 1), ACTIVATION_CODES[act], 0.0, 0.0, 0, 0.0, 0.0, None)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    if target_vector_floats() == 8:  # (AVX-512 reads two panels a call in place: no packing)
        assert packs_pixels(-(-o // 6), 9 * c, 4 * c * 4 * 11 * 81, 9, 4)  # a tile of 10 output rows


def test_only_many_panels_or_large_planes_of_few_taps_pack_their_pixels():
    """packs_pixels: PACK_MIN_PANELS panels; or 8-15 over phase planes above LARGE_PLANES_BYTES whose taps
    fall on few rows of each plane (3x3 stride 2); never under PACK_MIN_STEPS steps, nor on AVX-512."""
    from codegen.kernels.conv_packed import packs_pixels

    large, small = 456 << 10, 200 << 10
    if target_vector_floats() != 8:
        assert not packs_pixels(32, 288, large, 9, 4)  # AVX-512: two panels a call, in place
        return
    for case in [(16, 64, 0, 1, 1), (32, 288, small, 9, 1), (11, 288, large, 9, 4), (8, 288, large, 9, 4),
                 (8, 64, large, 4, 4)]:
        assert packs_pixels(*case), case
    for case in [(15, 64, 0, 1, 1), (11, 288, small, 9, 4), (11, 288, large, 9, 1), (11, 600, large, 25, 4),
                 (11, 147, large, 49, 4), (7, 288, large, 9, 4), (32, 63, large, 9, 4)]:
        assert not packs_pixels(*case), case


@pytest.mark.parametrize("shape, o, stride, kernel_called", [
    ((1, 24, 28, 27), 40, (2, 2), "conv1x1_packed"),  # odd width: the last column is read
    ((2, 16, 25, 27), 8, (2, 3), "conv1x1_packed"),  # strides of their own per dim
    # a 7 x 7 output: channels in the vectors on AVX-512 (uses_channel_vectors), pixel panels on AVX2
    ((1, 64, 14, 14), 96, (2, 2), "conv1x1_by_channels"),
])
@pytest.mark.parametrize("residual", [False, True])
def test_a_strided_1x1_conv_runs_on_its_input_subsampled_first(shape, o, stride, kernel_called, residual):
    """A ResNet's downsample (1x1, a stride, no padding): every stride-th pixel copied into scratch,
    then a stride-1 conv, matching the reference, with or without a residual."""
    arrays = conv_arrays(*shape, o, (1, 1), 1)
    (n, _, h, w), (sh, sw) = shape, stride
    if residual:
        arrays.append(rand(n, o, (h - 1) // sh + 1, (w - 1) // sw + 1))
    attrs = {**conv_attrs((1, 1), stride, (0, 0, 0, 0), (1, 1), 1), **epilogue_attrs("relu")}
    lines = check("fused_conv2d", arrays, attrs, weights=(1, 2), rtol=1e-4, atol=1e-4)
    if kernel_called == "conv1x1_by_channels" and target_vector_floats() != 16:
        kernel_called = "conv1x1_packed"
    assert "_subsampled = np.empty" in lines[0] and "strided_copy" in lines[1], lines
    assert kernel_called in lines[2] and "y0_subsampled" in lines[2], lines


@pytest.mark.parametrize("halves", [1, 2, 3, 6])
def test_gemm_panels_whole_and_half(halves):
    """gemm_panels over n = halves * NR / 2 columns (whole panels, then a half one on
    micro_gemm_half) matches numpy's float64 product, overwriting and then accumulating, and
    writes no column past n."""
    import numba

    from codegen.kernels.microkernel import MR, gemm_panels, half_panels, panel_width

    run = numba.njit(lambda kc, a, b, c, ldb, ldc, n, add: gemm_panels(kc, a, 0, b, 0, ldb, c, 0, ldc, n, add))
    nr = numba.njit(lambda: panel_width())()
    n, ldc, kc = halves * nr // 2, halves * nr // 2 + 5, 37
    assert numba.njit(lambda m: half_panels(m))(n - 1) == n
    rng = np.random.default_rng(halves)
    a, b = rng.standard_normal(kc * MR).astype(np.float32), rng.standard_normal(kc * n).astype(np.float32)
    c = np.full(MR * ldc, 7.0, np.float32)
    product = a.reshape(kc, MR).T.astype(np.float64) @ b.reshape(kc, n)
    run(kc, a, b, c, n, ldc, n, False)
    np.testing.assert_allclose(c.reshape(MR, ldc)[:, :n], product, rtol=1e-5, atol=1e-5)
    assert (c.reshape(MR, ldc)[:, n:] == 7.0).all()
    run(kc, a, b, c, n, ldc, n, True)
    np.testing.assert_allclose(c.reshape(MR, ldc)[:, :n], 2 * product, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("halves", [1, 3])
def test_two_panels_a_call_match_numpy(halves):
    """gemm_panels2 and gemm_panels2_rows (micro_gemm2: two weight panels ps apart, 2 MR rows of c)
    match numpy's float64 product, overwriting and then accumulating, b's rows read in order or
    at any offsets, and write no column past n."""
    import numba

    from codegen.kernels.microkernel import MR, gemm_panels2, gemm_panels2_rows, panel_width

    nr = numba.njit(lambda: panel_width())()
    n, ldc, kc, ps = halves * nr // 2, halves * nr // 2 + 3, 41, 41 * MR + 12  # a gap between the panels
    rng = np.random.default_rng(halves)
    a = rng.standard_normal(ps + kc * MR).astype(np.float32)
    b = rng.standard_normal(kc * (n + 5) + 7).astype(np.float32)
    rows = (np.arange(kc) * (n + 5) + 7 - np.arange(kc) % 4).astype(np.int64)  # rows off vector alignment
    weights = np.concatenate([a[:kc * MR].reshape(kc, MR), a[ps:].reshape(kc, MR)], axis=1).T.astype(np.float64)
    direct = numba.njit(lambda c, add: gemm_panels2(kc, a, 0, ps, b, 0, n + 5, c, 0, ldc, n, add))
    indirect = numba.njit(lambda c, add: gemm_panels2_rows(kc, a, 0, ps, b, 0, rows, 0, c, 0, ldc, n, add))
    for run, pixels in [(direct, b[:kc * (n + 5)].reshape(kc, n + 5)[:, :n]),
                        (indirect, np.stack([b[r:r + n] for r in rows]))]:
        product = weights @ pixels.astype(np.float64)
        c = np.full(2 * MR * ldc, 7.0, np.float32)
        run(c, False)
        np.testing.assert_allclose(c.reshape(2 * MR, ldc)[:, :n], product, rtol=1e-5, atol=1e-5)
        assert (c.reshape(2 * MR, ldc)[:, n:] == 7.0).all()
        run(c, True)
        np.testing.assert_allclose(c.reshape(2 * MR, ldc)[:, :n], 2 * product, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, weights", [(np.float32, (2,)), (np.float64, (1, 2))])
def test_conv2d_without_packed_weights(dtype, weights):
    """A weight computed by the model, or float64, runs im2col + OpenBLAS (conv2d), and matches."""
    arrays = [a.astype(dtype) for a in conv_arrays(2, 9, 12, 11, 14, (3, 3), 1)]
    lines = check("conv2d", arrays, conv_attrs((3, 3), (2, 1), (1, 1, 1, 1), (1, 1), 1), weights=weights,
                  rtol=1e-5, atol=1e-5)
    assert "conv2d_packed" not in lines[0] and "conv_conv2d(" in lines[0]


@pytest.mark.parametrize("width", [w for w in (16, 8) if w != target_vector_floats()])
def test_packed_convs_with_the_other_machines_panels(width, tmp_path):
    """The microkernels of the other vector width than this machine's, forced on it (LLVM splits the
    vectors where it must), in a fresh process with a numba cache of its own (the kernels of the machine's
    own width are those of every other test; run here too, they took 14 s of CI's time): AVX-512's 6 x 32
    panels, two at a call (micro_gemm2), and AVX2's 6 x 16, one at a call, whose blocks of many
    channel panels pack their pixels (_panels_by_pixels). conv2d_packed (conv1x1_packed on the 1x1
    convs too) and Winograd on them match float64 references, so do conv2d_by_channels and
    conv1x1_by_channels (their blocks of sums out through transpose_out: 16 x 16 or 8 x 8 blocks) with a
    bias, ReLU and a residual, and split_pairs (stride-2 depthwise rows) splits a vector of pairs a step
    and the rest in one masked load and a partial store (masked at 16 lanes, 4 + 2 + 1 at 8)."""
    script = f"""
import numpy as np, torch
from codegen.kernels.conv import conv1x1_packed, conv2d_packed
from codegen.kernels.conv_channels import conv1x1_by_channels, conv2d_by_channels, pack_channel_panels
from codegen.kernels.gemm import transpose_padded
from codegen.kernels.microkernel import pack_weights, panel_width, panels_per_call
from codegen.kernels.vectors import split_pairs
from codegen.kernels.winograd import pack_transformed, winograd_conv2d
from numba import njit
from tests.codegen.rules import read_only, zero_bias
assert njit(lambda: panel_width())() == {2 * width}
assert njit(lambda: panels_per_call())() == {2 if width == 16 else 1}
src, even, odd = np.arange(80, dtype=np.float32), np.zeros(40, np.float32), np.zeros(40, np.float32)
assert njit(lambda *a: split_pairs(*a))(src, 3, 37, even, 1, odd, 2) == 37
assert (even[1:38] == src[3:77:2]).all() and (odd[2:39] == src[4:78:2]).all() and even[38] == odd[39] == 0
rng = np.random.default_rng(0)
for n, c, o, h, w, k, s, p in [(1, 13, 20, 23, 17, 3, 2, 1), (2, 40, 7, 9, 9, 1, 1, 0), (1, 300, 8, 5, 5, 3, 1, 1),
                               (2, 16, 16, 40, 37, 3, 1, 1),  # Winograd's transforms: 16 tiles at once
                               (1, 40, 13, 12, 12, 3, 1, 1),  # Winograd with an odd panel left (micro_gemm)
                               (1, 64, 200, 9, 11, 3, 2, 1), (1, 96, 200, 7, 9, 1, 1, 0),  # AVX2: packed pixels
                               (6, 96, 120, 7, 7, 1, 1, 0)]:  # AVX2: the batch's pixels in tiles across images
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, k, k)).astype(np.float32) / np.sqrt(c * k * k)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(), None, s, p).numpy()
    out = np.empty(ref.shape, np.float32)
    conv2d_packed(x, read_only(pack_weights(wt, 1)), zero_bias(o), out[:0], out, (k, k), (s, s), (p, p, p, p), (1, 1),
                  0, 0.0, 0.0, 0, 0.0, 0.0, None)
    assert np.abs(out - ref).max() < 1e-4, np.abs(out - ref).max()
    if k == 1 and s == 1 and p == 0:  # the 1x1 convs' own kernel too, reading their input in place
        out[:] = np.nan
        conv1x1_packed(x, read_only(pack_weights(wt, 1)), zero_bias(o), out[:0], out, (1, 1), (1, 1), (0, 0, 0, 0),
                       (1, 1), 0, 0.0, 0.0, 0, 0.0, 0.0, None)
        assert np.abs(out - ref).max() < 1e-4, np.abs(out - ref).max()
    if k == 3 and s == 1:
        winograd_conv2d(x, read_only(pack_transformed(wt)), zero_bias(o), out[:0], out, p, p, 0, 0.0, 0.0, 0, 0.0, 0.0)
        assert np.abs(out - ref).max() < 1e-4, np.abs(out - ref).max()
    bias = rng.standard_normal(o).astype(np.float32)
    res = rng.standard_normal(ref.shape).astype(np.float32)
    ref_act = np.maximum(ref + bias[:, None, None].astype(np.float64), 0.0) + res
    out[:] = np.nan
    conv2d_by_channels(x, read_only(pack_channel_panels(wt)), bias, res, out, (k, k), (s, s), (p, p, p, p), (1, 1),
                       1, 0.0, 0.0, 0, 0.0, 0.0)
    assert np.abs(out - ref_act).max() < 1e-4, np.abs(out - ref_act).max()
    if k == 1 and s == 1 and p == 0:
        out[:] = np.nan
        conv1x1_by_channels(x, read_only(transpose_padded(wt.reshape(o, c))), bias, res, out, 1, 0.0, 0.0, 0, 0.0, 0.0)
        assert np.abs(out - ref_act).max() < 1e-4, np.abs(out - ref_act).max()
print("ok")
"""
    # code numba's cache would not tell from this machine's own: a cache of its own
    env = {**os.environ, "PNNX_JIT_VECTOR_WIDTH": str(width), "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=1500,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_packed_conv_inside_another_parallel_loop_matches_float64():
    """conv2d_packed called from tasks of another run_tasks loop (a nested loop runs its tasks on the
    calling thread): each call's scratch is taken by thread id, and a caller's id past the nested
    loop's parts falls back to part 0, so every output is right whichever thread ran it."""
    import numba

    import codegen.runtime  # noqa: F401 - numba's target before the kernels compile
    from codegen.kernels.conv import conv2d_packed
    from codegen.kernels.microkernel import pack_weights
    from codegen.kernels.tasks import run_tasks

    @numba.njit
    def one(t, xs, wp, bias, outs):
        conv2d_packed(xs[t], wp, bias, outs[t, :0], outs[t], (3, 3), (1, 1), (1, 1, 1, 1), (1, 1),
                      0, 0.0, 0.0, 0, 0.0, 0.0, None)

    @numba.njit
    def all_of(xs, wp, bias, outs):
        run_tasks(one, xs.shape[0], (xs, wp, bias, outs))

    rng = np.random.default_rng(3)
    xs = rng.standard_normal((8, 1, 5, 4, 4)).astype(np.float32)  # 8 tiny convs: one task each
    w = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    outs = np.full((8, 1, 6, 4, 4), np.nan, np.float32)
    all_of(xs, read_only(pack_weights(w, 1)), zero_bias(6), outs)
    padded = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros((8, 1, 6, 4, 4))
    for i in range(3):
        for j in range(3):
            expected += np.einsum("tnchw,oc->tnohw", padded[..., i:i + 4, j:j + 4], w[:, :, i, j])
    np.testing.assert_allclose(outs, expected, rtol=1e-5, atol=1e-5)
