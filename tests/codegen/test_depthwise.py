"""The depthwise conv kernel (codegen/kernels/depthwise.py), called directly, against the IR
reference of fused_conv2d. Float32 convs with kernel height 3, 5 or 7, equal strides 1 or 2 and no
row dilation take the register rows (depthwise_rows.py: blocks of 7, 4, 2 and 1 rows, taps read in
place or, for inputs over COPY_BYTES, from a copy of each block's rows; stride 2 split in
registers); the others, and float64, every path of its scratch copy (stride 1, 2, other; either
parity of the left padding; odd widths; rows and columns in the padding; unread columns),
of its sums (3x3 in registers, Kx5 a kernel row at a time, any other kernel tap by tap), of its
epilogue (the clamp written in place, the rest through epilogue_run over the block or, with a
residual, row by row), row blocks, float64; and the same geometries on the small-plane paths:
convs whose output rows are as long as the input's phase rows read their taps under masks
(_plane_taps): straight from the input at stride 1 when the output is the input's size, from phase
planes of the output's pitch otherwise (strides 2, 3, 1x2, 2x1, wider padding, a multiplier); the
others (and float64) vectorise channels in blocks of a vector's floats, with a partial last block; so
do, before any other path, strided convs on output planes up to 8 x 8 and others up to 4 x 4 (their
input rows transposed a vector of channels at a time). The channel blocks also run directly on their
geometries."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.kernels.depthwise import CHANNEL_BLOCK_PIXELS, channel_blocks_first, conv_depthwise
from codegen.kernels.epilogue import ACTIVATION_CODES
from ir.op_registry import get_op
from ir.types import TensorType
from tests.codegen.rules import read_only, zero_bias

RNG = np.random.default_rng(0)


def run_depthwise(shape, mult, kernel, stride, padding, dilation, dtype=np.float32, bias=True, residual=False,
                  act=("clamp", 0.0, 6.0), post=("none", 0.0, 0.0)):
    """Run conv_depthwise on random inputs; return (output, IR reference)."""
    n, c, h, w = shape
    x = RNG.normal(size=shape).astype(dtype)
    weight = (RNG.normal(size=(c * mult, 1, *kernel)) / kernel[0]).astype(dtype)
    b = read_only(RNG.normal(size=c * mult).astype(dtype)) if bias else zero_bias(c * mult, dtype)  # as a forward
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": c, "padding_mode": "zeros",
             "activation": act[0], "alpha": act[1], "beta": act[2],
             "post_activation": post[0], "post_alpha": post[1], "post_beta": post[2]}
    op = get_op("fused_conv2d")
    attrs = op.normalize_attrs(attrs)
    types = [TensorType(a.shape, a.dtype.name) for a in (x, weight, b)]
    out_type = op.infer_types(types, attrs)[0]
    res = RNG.normal(size=out_type.shape).astype(dtype) if residual else None
    out = np.full(out_type.shape, np.nan, dtype)
    # the arguments' types as conv2d passes them in a forward: weights read-only, no residual an empty view
    conv_depthwise(x, read_only(weight), b, out[:0] if res is None else res, out, *stride,
                   padding[0], padding[1], *dilation,
                   ACTIVATION_CODES[act[0]], act[1], act[2], ACTIVATION_CODES[post[0]], post[1], post[2])
    return out, op.compute(x, weight, b, res, **attrs)


# (n, c, h, w), multiplier, kernel, stride, padding (t, l, b, r), dilation
GEOMETRIES = {
    "3x3_s1": ((2, 8, 14, 14), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "3x3_s1_7x7": ((1, 16, 7, 7), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "3x3_s2": ((2, 6, 16, 16), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "3x3_s2_odd": ((1, 4, 15, 13), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "3x3_s2_no_padding_last_column_unread": ((1, 4, 9, 8), 1, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),
    "3x3_s2_even_left_padding": ((1, 4, 11, 11), 1, (3, 3), (2, 2), (2, 2, 2, 2), (1, 1)),
    "3x3_s2_odd_width_no_padding": ((1, 3, 9, 11), 1, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),
    "3x3_s3": ((1, 5, 13, 14), 1, (3, 3), (3, 3), (1, 1, 1, 1), (1, 1)),
    "3x3_s1x2": ((1, 4, 10, 12), 1, (3, 3), (1, 2), (1, 1, 1, 1), (1, 1)),
    "3x3_s2x1": ((1, 4, 12, 10), 1, (3, 3), (2, 1), (1, 1, 1, 1), (1, 1)),
    "3x3_dilated": ((2, 8, 9, 9), 1, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    "3x3_s2_dilated": ((1, 4, 13, 12), 1, (3, 3), (2, 2), (2, 2, 2, 2), (2, 2)),
    "3x3_multiplier_3": ((1, 4, 8, 9), 3, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "3x3_asymmetric_padding": ((1, 4, 8, 9), 1, (3, 3), (1, 1), (0, 1, 2, 0), (1, 1)),
    "3x3_padding_wider_than_kernel": ((1, 3, 6, 7), 1, (3, 3), (1, 1), (4, 3, 4, 3), (1, 1)),
    "3x3_row_blocks_s1": ((1, 2, 112, 112), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "3x3_row_blocks_s2": ((1, 3, 57, 57), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "5x5_s1": ((1, 6, 12, 11), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "5x5_s2": ((2, 6, 14, 13), 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    "7x7_s1": ((1, 4, 14, 14), 1, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),
    "5x5_dilated_multiplier_2": ((1, 3, 13, 14), 2, (5, 5), (1, 1), (4, 4, 4, 4), (2, 2)),
    "3x5_s1x2_dilated": ((1, 4, 12, 15), 1, (3, 5), (1, 2), (1, 2, 1, 2), (1, 2)),
    "5x5_row_blocks": ((1, 2, 96, 96), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "5x3_everything": ((1, 6, 11, 9), 2, (5, 3), (2, 1), (2, 0, 1, 2), (1, 2)),
    "5x5_one_output_pixel": ((1, 3, 5, 5), 1, (5, 5), (1, 1), (0, 0, 0, 0), (1, 1)),
    "1x1": ((2, 5, 6, 7), 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    "channel_blocks_and_a_tail": ((2, 40, 7, 7), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "channel_blocks_multiplier_2": ((1, 20, 9, 8), 2, (3, 3), (2, 1), (1, 0, 2, 1), (1, 1)),
    "channel_blocks_valid": ((2, 40, 9, 9), 1, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),  # 7 x 7 out of 9 x 9
    "flat_asymmetric_same_size": ((1, 5, 9, 10), 1, (3, 3), (1, 1), (0, 0, 2, 2), (1, 1)),
    "flat_16x16_vectors_exactly": ((1, 3, 16, 16), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "flat_s1_output_wider_than_input": ((1, 3, 5, 6), 1, (3, 3), (1, 1), (2, 2, 2, 2), (1, 1)),  # copied, pitch 8
    "flat_s3_multiplier_2": ((2, 4, 30, 30), 2, (5, 5), (3, 3), (2, 2, 2, 2), (1, 1)),  # one split per input plane
    "flat_s1x2_5x5": ((1, 4, 10, 20), 1, (5, 5), (1, 2), (2, 2, 2, 2), (1, 1)),
    # strided output planes up to STRIDED_BLOCK_PIXELS, others up to BLOCK_FIRST_PIXELS: channel blocks
    # first, each input row of a vector of channels transposed (inputs wider than a vector in chunks)
    "blocks_3x3_s2_7x7_and_a_tail": ((2, 40, 14, 14), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "blocks_5x5_s2_4x4": ((3, 33, 8, 8), 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    "blocks_5x5_s1_4x4": ((2, 20, 4, 4), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "blocks_s3_column_chunks": ((1, 17, 9, 33), 1, (3, 3), (3, 3), (1, 1, 1, 1), (1, 1)),
    "blocks_s2_multiplier_2": ((2, 4, 10, 10), 2, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "blocks_s2_16_channels_no_padding": ((1, 16, 13, 13), 1, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),
    "blocks_s2_rows_of_10": ((1, 20, 12, 20), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # two groups of 8 a row
    # on AVX2 larger planes too (channel_blocks_first): up to 8192 padded pixels, 16384 strided
    "blocks_avx2_large_s1_and_a_tail": ((1, 12, 56, 57), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "blocks_avx2_large_s2_odd": ((2, 9, 101, 99), 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    "rows_7x7_s2_odd": ((1, 3, 23, 21), 1, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    "rows_5x5_s2_copied_odd_width": ((2, 2, 37, 65), 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    "rows_3x3_s1_blocks_7_4_2": ((1, 3, 13, 40), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "rows_5x5_s1_blocks_7_1": ((1, 3, 8, 20), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "rows_3x3_s2_no_padding_copied": ((1, 2, 35, 34), 1, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),
    "rows_3x5_multiplier_2_dilated_columns": ((1, 2, 11, 33), 2, (3, 5), (1, 1), (1, 4, 1, 4), (1, 2)),
    "rows_asymmetric_padding_wide": ((1, 2, 9, 50), 1, (5, 3), (1, 1), (0, 2, 4, 0), (1, 1)),
    # inputs over COPY_BYTES: each block's rows copied first
    "rows_copied_3x3_s1": ((2, 12, 112, 112), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "rows_copied_5x5_s2_odd": ((1, 24, 101, 111), 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    "rows_copied_7x7_s1_narrow": ((8, 96, 19, 19), 1, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),
}


def _row_blocks(geometry):
    """The geometry on planes large enough for the register rows or the row-block path (more than
    CHANNEL_BLOCK_PIXELS output pixels, and padded input planes too large for the channel blocks to come
    first on AVX2, 8 floats a vector, or AVX-512), where the original takes the small-plane paths,
    channels vectorised."""
    (n, c, h, w), mult, kernel, stride, padding, dilation = geometry
    while True:
        oh = (h + padding[0] + padding[2] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
        ow = (w + padding[1] + padding[3] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
        hp = (oh - 1) * stride[0] + (kernel[0] - 1) * dilation[0] + 1
        wp = (ow - 1) * stride[1] + (kernel[1] - 1) * dilation[1] + 1
        strided = stride != (1, 1)
        if oh * ow > CHANNEL_BLOCK_PIXELS and not any(
                channel_blocks_first.py_func(lanes, hp, wp, oh, ow, strided) for lanes in (8, 16)):
            return (n, c, h, w), mult, kernel, stride, padding, dilation
        h, w = h + 8, w + 8


@pytest.mark.parametrize("geometry", GEOMETRIES.values(), ids=GEOMETRIES.keys())
def test_depthwise_geometry(geometry):
    got, expected = run_depthwise(*geometry)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


BLOCK_GEOMETRIES = {name: g for name, g in GEOMETRIES.items() if name.startswith(("blocks_", "channel_blocks_"))}


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("geometry", BLOCK_GEOMETRIES.values(), ids=BLOCK_GEOMETRIES.keys())
def test_channel_blocks_on_any_isa(geometry, residual):
    """The channel blocks called directly, on every block geometry (whole and partial blocks of
    channels and of columns), with and without a residual, whichever path conv_depthwise would take."""
    from codegen.kernels.depthwise import _run_channel_blocks

    (n, c, h, w), mult, kernel, stride, padding, dilation = geometry
    x = RNG.normal(size=(n, c, h, w)).astype(np.float32)
    weight = (RNG.normal(size=(c * mult, 1, *kernel)) / kernel[0]).astype(np.float32)
    b = RNG.normal(size=c * mult).astype(np.float32)
    attrs = get_op("fused_conv2d").normalize_attrs(
        {"stride": stride, "padding": padding, "dilation": dilation, "groups": c, "padding_mode": "zeros",
         "activation": "hardswish", "post_activation": "none"})
    types = [TensorType(a.shape, "float32") for a in (x, weight, b)]
    oh, ow = get_op("fused_conv2d").infer_types(types, attrs)[0].shape[2:]
    res = RNG.normal(size=(n, c * mult, oh, ow)).astype(np.float32) if residual else None
    out = np.full((n, c * mult, oh, ow), np.nan, np.float32)
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    planes = ((oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1)
    rf = (res if residual else np.empty(0, np.float32)).reshape(-1)
    _run_channel_blocks(n, x.reshape(-1), read_only(weight).reshape(-1), out.reshape(-1), rf, read_only(b),
                        (n, c, h, w, c * mult, oh, ow, mult, kh, kw), (sh, sw, padding[0], padding[1], dh, dw), planes,
                        (ACTIVATION_CODES["hardswish"], 0), (0.0, 0.0, 0.0, 0.0))
    expected = get_op("fused_conv2d").compute(x, weight, b, *([res] if residual else []), **attrs)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("geometry", GEOMETRIES.values(), ids=GEOMETRIES.keys())
def test_depthwise_geometry_on_row_blocks(geometry):
    got, expected = run_depthwise(*_row_blocks(geometry))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


EPILOGUES = {  # activation, post-activation, residual, bias
    "none_no_bias": (("none", 0.0, 0.0), ("none", 0.0, 0.0), False, False),
    "relu": (("relu", 0.0, 0.0), ("none", 0.0, 0.0), False, True),
    "silu": (("silu", 0.0, 0.0), ("none", 0.0, 0.0), False, True),
    "residual": (("none", 0.0, 0.0), ("none", 0.0, 0.0), True, True),
    "clamp_residual_relu": (("clamp", -0.5, 0.75), ("relu", 0.0, 0.0), True, True),
    "hardswish_residual": (("hardswish", 0.0, 0.0), ("none", 0.0, 0.0), True, False),
}


@pytest.mark.parametrize("row_blocks", [False, True], ids=["small_planes", "row_blocks"])
@pytest.mark.parametrize("geometry", ["3x3_s1", "3x3_s2", "5x5_s1", "channel_blocks_and_a_tail",
                                      "channel_blocks_valid", "blocks_3x3_s2_7x7_and_a_tail"])
@pytest.mark.parametrize("epilogue", EPILOGUES.values(), ids=EPILOGUES.keys())
def test_depthwise_epilogue(geometry, epilogue, row_blocks):
    act, post, residual, bias = epilogue
    shape = _row_blocks(GEOMETRIES[geometry]) if row_blocks else GEOMETRIES[geometry]
    got, expected = run_depthwise(*shape, act=act, post=post, residual=residual, bias=bias)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("row_blocks", [False, True], ids=["small_planes", "row_blocks"])
@pytest.mark.parametrize("geometry", ["3x3_s1", "3x3_s2_odd", "3x3_s3", "5x3_everything", "channel_blocks_and_a_tail",
                                      "blocks_s3_column_chunks"])
def test_depthwise_float64(geometry, row_blocks):
    shape = _row_blocks(GEOMETRIES[geometry]) if row_blocks else GEOMETRIES[geometry]
    got, expected = run_depthwise(*shape, dtype=np.float64, residual=True)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
