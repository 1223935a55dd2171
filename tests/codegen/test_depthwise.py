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

from codegen.kernels.depthwise import (
    CHANNEL_BLOCK_PIXELS,
    CHANNEL_BLOCKS,
    DEPTHWISE_KERNELS,
    FLAT,
    REGISTER_ROWS,
    ROW_BLOCKS,
    channel_blocks_first,
    conv_depthwise_channel_blocks,
    conv_depthwise_flat,
    conv_depthwise_register_rows,
    depthwise_path,
)
from codegen.kernels.depthwise_rows import takes_register_rows
from codegen.kernels.epilogue import ACTIVATION_CODES
from codegen.kernels.vectors import target_vector_floats
from ir.op_registry import get_op
from ir.types import TensorType
from tests.codegen.rules import check_rule, read_only, zero_bias

RNG = np.random.default_rng(0)


def run_depthwise(shape, mult, kernel, stride, padding, dilation, dtype=np.float32, bias=True, residual=False,
                  act=("clamp", 0.0, 6.0), post=("none", 0.0, 0.0), run=None):
    """Run the depthwise kernel depthwise_path picks on this machine (or `run`) on random inputs; return
    (output, IR reference)."""
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
    if run is None:
        run = DEPTHWISE_KERNELS[depthwise_path(x.dtype.name, x.shape, weight.shape, out.shape, stride, padding,
                                               dilation, target_vector_floats())]
    # the arguments' types as a forward passes them: weights read-only, no residual an empty view
    run(x, read_only(weight), b, out[:0] if res is None else res, out, *stride, padding[0], padding[1], *dilation,
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
    # on AVX2 the channel blocks come first on every plane the flat path takes, but for padded planes past
    # 8192 pixels (here 136 x 136, of which a 16 x 16 output reads the taps inside the image only)
    "flat_dilated_by_60": ((1, 3, 16, 16), 1, (3, 3), (1, 1), (60, 60, 60, 60), (60, 60)),
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
    # planes copied whole (depthwise_rows.WHOLE_PLANE_FLOATS) whose last input rows no output reads
    "rows_3x3_s2_last_row_unread": ((1, 2, 36, 40), 1, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),
    "rows_3x3_s2_top_padded_last_row_unread": ((1, 2, 39, 41), 1, (3, 3), (2, 2), (1, 1, 0, 1), (1, 1)),
    "rows_5x5_s2_odd_left_padding_dilated_columns": ((1, 2, 30, 47), 1, (5, 3), (2, 2), (2, 1, 2, 3), (1, 3)),
    # inputs over COPY_BYTES: each block's rows copied first
    "rows_copied_3x3_s1": ((2, 12, 112, 112), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "rows_copied_5x5_s2_odd": ((1, 24, 101, 111), 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    "rows_copied_7x7_s1_narrow": ((8, 96, 19, 19), 1, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),
}


def _out_size(geometry) -> tuple[int, int]:
    """The output plane (oh, ow) of a geometry."""
    (n, c, h, w), mult, kernel, stride, padding, dilation = geometry
    return ((h + padding[0] + padding[2] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1,
            (w + padding[1] + padding[3] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1)


def _row_blocks(geometry):
    """The geometry on planes large enough for the register rows or the row-block path (more than
    CHANNEL_BLOCK_PIXELS output pixels, and padded input planes too large for the channel blocks to come
    first on AVX2, 8 floats a vector, or AVX-512), where the original takes the small-plane paths,
    channels vectorised."""
    (n, c, h, w), mult, kernel, stride, padding, dilation = geometry
    while True:
        oh, ow = _out_size(((n, c, h, w), mult, kernel, stride, padding, dilation))
        hp = (oh - 1) * stride[0] + (kernel[0] - 1) * dilation[0] + 1
        wp = (ow - 1) * stride[1] + (kernel[1] - 1) * dilation[1] + 1
        strided = stride != (1, 1)
        if oh * ow > CHANNEL_BLOCK_PIXELS and not any(
                channel_blocks_first.py_func(lanes, hp, wp, oh, ow, strided, kernel[0] * kernel[1])
                for lanes in (8, 16)):
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
    """The channel blocks' kernel called directly, on every block geometry (whole and partial blocks of
    channels and of columns), with and without a residual, whichever path depthwise_path would take."""
    got, expected = run_depthwise(*geometry, residual=residual, act=("hardswish", 0.0, 0.0),
                                  run=conv_depthwise_channel_blocks)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _tall(geometry):
    """The geometry on planes 2000 rows high: past the channel blocks' planes on AVX2, its rows as narrow."""
    (n, c, h, w), mult, kernel, stride, padding, dilation = geometry
    return (1, 1, 2000, w), mult, kernel, stride, padding, dilation


def _has_register_rows(geometry) -> bool:
    """Whether the register rows have code for the geometry on this machine's vectors."""
    (n, c, h, w), mult, kernel, stride, padding, dilation = geometry
    return takes_register_rows.py_func(*kernel, *stride, dilation[0], _out_size(geometry)[1], w,
                                      target_vector_floats())


REGISTER_ROW_GEOMETRIES = {name: g for name, g in zip(GEOMETRIES, map(_row_blocks, GEOMETRIES.values()))
                           if _has_register_rows(g)}


@pytest.mark.parametrize("geometry", REGISTER_ROW_GEOMETRIES.values(), ids=REGISTER_ROW_GEOMETRIES.keys())
def test_register_rows_on_any_isa(geometry):
    """The register rows' kernel called directly on the geometries it has code for, grown past the small
    planes, whichever path depthwise_path would take (on AVX2 the row blocks take stride 1)."""
    got, expected = run_depthwise(*geometry, run=conv_depthwise_register_rows)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _path(geometry, lanes, dtype="float32"):
    (n, c, h, w), mult, kernel, stride, padding, dilation = geometry
    oh, ow = _out_size(geometry)
    return depthwise_path(dtype, (n, c, h, w), (c * mult, 1, *kernel), (n, c * mult, oh, ow), stride, padding,
                          dilation, lanes)


@pytest.mark.parametrize("lanes", [8, 16])
def test_the_geometries_take_every_depthwise_kernel(lanes):
    """Each way a depthwise conv runs is a kernel of its own, which the emit rule picks by the shapes
    (depthwise_path), so that a model compiles only the ways its convs take: the geometries here (on
    small planes and grown past them, _row_blocks) run each of them, where vectors hold 8 floats (AVX2)
    and 16 (AVX-512); float64 takes the channel blocks and the row blocks only."""
    geometries = [*GEOMETRIES.values(), *map(_row_blocks, GEOMETRIES.values())]
    paths = {_path(g, lanes) for g in geometries}
    # on AVX2 the register rows take only stride 2 on narrow rows, which come first to the channel blocks
    # unless the planes are very tall (_tall): stride 1 takes the row blocks there (AVX2_LARGE_BLOCK_FLOATS)
    assert paths == set(DEPTHWISE_KERNELS) - ({REGISTER_ROWS} if lanes == 8 else set())
    if lanes == 8:
        assert {_path(_tall(g), lanes) for g in geometries if g[3] == (2, 2)} >= {REGISTER_ROWS, ROW_BLOCKS}
        assert REGISTER_ROWS not in {_path(_tall(g), lanes) for g in geometries if g[3] == (1, 1)}
    assert {_path(g, lanes, "float64") for g in geometries} == set(DEPTHWISE_KERNELS) - {REGISTER_ROWS, FLAT}


@pytest.mark.parametrize("kernel", [3, 5])
def test_on_avx512_strided_convs_from_up_to_56_x_56_take_the_channel_blocks(kernel):
    """On AVX-512 a stride-2 conv reads its input a vector of channels at a time in the channel blocks for
    padded input planes under 64 x 64 (WIDE_STRIDED_BLOCK_FLOATS: MobileNets' 56 x 56, 28 x 28 and 14 x 14),
    where the register rows' stride-2 taps took 1.1-2.5x their time; from 112 x 112, and at stride 1, the
    register rows."""
    pad = kernel // 2
    for size, stride, path in [(56, 2, CHANNEL_BLOCKS), (28, 2, CHANNEL_BLOCKS), (14, 2, CHANNEL_BLOCKS),
                               (112, 2, REGISTER_ROWS), (80, 2, REGISTER_ROWS), (56, 1, REGISTER_ROWS)]:
        geometry = ((1, 144, size, size), 1, (kernel, kernel), (stride, stride), (pad,) * 4, (1, 1))
        assert _path(geometry, 16) == path, (size, stride)
    assert _path(((8, 144, 56, 56), 1, (3, 3), (2, 2), (1,) * 4, (1, 1)), 8) == CHANNEL_BLOCKS  # AVX2: as before


def test_the_register_rows_and_the_flat_path_refuse_convs_they_have_no_code_for():
    """A conv the register rows (or the flat path) has no code for raises, rather than run nothing: the
    emit rule never sends one there (depthwise_path), and a direct caller learns it."""
    with pytest.raises(ValueError, match="no register rows"):  # stride 3
        run_depthwise(*GEOMETRIES["3x3_s3"], run=conv_depthwise_register_rows)
    with pytest.raises(ValueError, match="no flat path"):  # float64
        run_depthwise(*GEOMETRIES["3x3_s1_7x7"], dtype=np.float64, run=conv_depthwise_flat)


@pytest.mark.parametrize("name", ["3x3_s1", "3x3_row_blocks_s1", "blocks_3x3_s2_7x7_and_a_tail", "3x3_s3"])
def test_a_depthwise_conv_calls_the_kernel_of_its_path(name):
    """Through the emit rule, whatever its weights (constant or computed by the model): the kernel
    depthwise_path names for this machine, and no other."""
    (n, c, h, w), mult, kernel, stride, padding, dilation = GEOMETRIES[name]
    x = RNG.normal(size=(n, c, h, w)).astype(np.float32)
    weight = (RNG.normal(size=(c * mult, 1, *kernel)) / kernel[0]).astype(np.float32)
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": c, "padding_mode": "zeros"}
    path = _path(GEOMETRIES[name], target_vector_floats())
    for weights in ((1,), ()):
        lines = check_rule("conv2d", [x, weight], attrs, weights=weights, rtol=1e-5, atol=1e-5)
        called = [p for p, k in DEPTHWISE_KERNELS.items() if f"_{k.py_func.__name__}(" in lines[-1]]
        assert called == [path], lines


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
