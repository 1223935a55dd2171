"""The channel-blocked layout's kernels (codegen/kernels/blocked.py) against float64 sums on NCHW:
the reorders both ways, 1x1 convs, Winograd 3x3 convs, depthwise convs and other convs (kernel, stride,
dilation, asymmetric padding) with each kind of epilogue (bias or none, a one-pass clamp, a residual, a
residual that is the output's own buffer, a post ReLU, an activation of more than one pass), images whose pixels end in
a partial group of MR, reductions of one chunk and of several, work small enough for one task in
the calling thread and large enough for many. Channel counts are multiples of the block, whatever
the CPU (16 on AVX2, 64 on AVX-512), and, for the reorders and each conv kernel, counts that pad the
last block (zero weights in the padding channels, which stay zero)."""

import numba
import numpy as np
import pytest

from codegen.kernels import winograd
from codegen.kernels.blocked import (
    DEPTHWISE_GROUP,
    FEW_PIXELS,
    STRIDED_COMPACT_MIN_K,
    WINDOW_WEIGHT_BYTES,
    channel_scale_blocked,
    conv1x1_blocked,
    conv1x1_blocked_prologue,
    conv2d_blocked,
    conv2d_blocked_nchw,
    conv_transpose_blocked,
    depthwise_blocked,
    expand_depthwise_blocked,
    from_blocked,
    global_avg_pool_blocked,
    group_lanes,
    pack_depthwise_blocked,
    pack_grouped_blocked,
    pack_transpose_blocked,
    pack_winograd_blocked,
    pad_bias,
    pad_to_blocks,
    pool_blocked,
    to_blocked,
    winograd_blocked,
)
from codegen.kernels.conv_channels import pack_channel_panels
from codegen.kernels.epilogue import ACTIVATION_CODES
from codegen.kernels.gemm import PACKED_K_CHUNK
from codegen.kernels.microkernel import (
    MR,
    micro_gemm_taps_out_grouped_row,
    micro_gemm_taps_out_grouped_row_half,
    micro_gemm_taps_pixel,
    micro_gemm_taps_pixel_half,
    taps_width,
)
from codegen.kernels.winograd import weight_transform
from ir.ops.conv import conv_transpose2d
from ir.ops.layout import blocked_array, lane_groups, vector_groups
from tests.codegen.rules import read_only, zero_bias

B = numba.njit(lambda: taps_width())()
ACTS = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0),
        "clamp": lambda v: np.clip(v, -0.5, 0.75), "silu": lambda v: v / (1 + np.exp(-v)),
        "hardswish": lambda v: v * np.clip(v + 3, 0, 6) / 6}


def blocks(channels: int) -> int:
    return -(-channels // B)


def blocked(a: np.ndarray) -> np.ndarray:
    out = np.full((a.shape[0], blocks(a.shape[1]), *a.shape[2:], B), np.nan, np.float32)
    to_blocked(a, out)
    return out


def unblocked(a: np.ndarray, channels: int | None = None) -> np.ndarray:
    channels = a.shape[1] * B if channels is None else channels
    out = np.full((a.shape[0], channels, *a.shape[2:4]), np.nan, np.float32)
    from_blocked(a, out, (channels,))
    return out


def block_bias(bias: np.ndarray | None, o: int) -> np.ndarray:
    """A blocked conv's bias as the forward passes it: read-only, zeros in the channels padding its last block."""
    padded = np.zeros(blocks(o) * B, np.float32)
    if bias is not None:
        padded[:o] = bias
    return read_only(padded)


def reference(x, w, bias, residual, act, post, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)):
    """post(act(conv2d(x, w) + bias) + residual) in float64, the conv as a sum over its taps."""
    (kh, kw), (sh, sw), (dh, dw) = w.shape[2:], stride, dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding[0], padding[2]), (padding[1], padding[3])))
    oh = (xp.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (xp.shape[3] - (kw - 1) * dw - 1) // sw + 1
    v = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            window = xp[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            v += np.einsum("oc,nchw->nohw", w[:, :, i, j].astype(np.float64), window)
    if bias is not None:
        v += bias.astype(np.float64)[None, :, None, None]
    v = ACTS[act](v)
    if residual is not None:
        v += residual
    return ACTS[post](v)


def operands(n, c, o, hw, kernel, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *hw)).astype(np.float32)
    w = (rng.standard_normal((o, c, *kernel)) / np.sqrt(c * kernel[0] * kernel[1])).astype(np.float32)
    return x, w, rng.standard_normal(o).astype(np.float32)


def run(x, w, bias, residual, act, post, out_hw, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
        out=None, out_channels=0):
    """The blocked conv on x's blocked copy, its output back on NCHW; out: the blocked output's buffer;
    out_channels given (the real ones) or not (0)."""
    n, o = x.shape[0], w.shape[0]
    out = np.full((n, blocks(o), *out_hw, B), np.nan, np.float32) if out is None else out
    res = out[:0] if residual is None else residual  # a forward's arguments: an empty view, read-only weights
    bias = block_bias(bias, o)
    codes = ACTIVATION_CODES[act], -0.5, 0.75, ACTIVATION_CODES[post], 0.0, 0.0
    wt = read_only(pack_channel_panels(pad_to_blocks(w, B), B))
    if w.shape[2:] == (1, 1) and padding == (0, 0, 0, 0):
        conv1x1_blocked(blocked(x), wt, bias, res, out, stride, *codes, out_channels)
    else:
        conv2d_blocked(blocked(x), wt, bias, res, out, w.shape[2:], stride, padding, dilation, *codes, out_channels, 0)
    return unblocked(out, o)


def test_reorders_round_trip_exactly():
    x = np.random.default_rng(0).standard_normal((2, 3 * B, 5, 7)).astype(np.float32)
    b = blocked(x)
    assert b[1, 2, 3, 4, 5] == x[1, 2 * B + 5, 3, 4]
    np.testing.assert_array_equal(unblocked(b), x)


# channels that pad the last block: half a block (whole vectors), and counts that end inside a vector
PADDED_CHANNELS = [B // 2, B + B // 2, B + 3, 2 * B - 1]


@pytest.mark.parametrize("segments", [(B // 2, B + 3, B), (3, 2 * B), (B + B // 2, B // 2)])
def test_from_blocked_gathers_segments_each_from_a_blocks_first_lane(segments):
    """A concat's parts on the layout, each padded to whole blocks, back into NCHW: the parts' channels
    one after another."""
    rng = np.random.default_rng(len(segments))
    parts = [rng.standard_normal((2, c, 5, 6)).astype(np.float32) for c in segments]
    joined = np.concatenate([blocked(p) for p in parts], axis=1)
    out = np.full((2, sum(segments), 5, 6), np.nan, np.float32)
    from_blocked(joined, out, segments)
    np.testing.assert_array_equal(out, np.concatenate(parts, axis=1))


@pytest.mark.parametrize("c", PADDED_CHANNELS)
@pytest.mark.parametrize("hw", [(5, 7), (16, 16), (45, 47)])
def test_reorders_pad_the_last_block_with_zeros_and_drop_it(c, hw):
    """(45 x 47: few pairs of an image and a block, whose pixels are cut between tasks, the last run partial.)"""
    x = np.random.default_rng(c).standard_normal((2, c, *hw)).astype(np.float32)
    b = blocked(x)
    assert b.shape == (2, blocks(c), *hw, B)
    np.testing.assert_array_equal(b.transpose(0, 1, 4, 2, 3).reshape(2, -1, *hw)[:, :c], x)
    assert np.all(b[:, -1, :, :, c % B:] == 0)
    np.testing.assert_array_equal(unblocked(b, c), x)


def test_reorders_refuse_a_shape_that_is_not_the_blocked_one():
    x = np.zeros((1, 2 * B, 4, 4), np.float32)
    with pytest.raises(ValueError, match="blocked shape"):
        to_blocked(x, np.zeros((1, 1, 4, 4, B), np.float32))
    with pytest.raises(ValueError, match="blocked shape"):
        from_blocked(np.zeros((1, 2, 4, 5, B), np.float32), x, (2 * B,))
    with pytest.raises(ValueError, match="blocked shape"):  # segments of B + 1 and B - 1 channels take three blocks
        from_blocked(np.zeros((1, 2, 4, 4, B), np.float32), x, (B + 1, B - 1))
    with pytest.raises(ValueError, match="blocked shape"):  # B + 1 channels take two blocks
        to_blocked(np.zeros((1, B + 1, 4, 4), np.float32), np.zeros((1, 1, 4, 4, B), np.float32))


# (n, c, o, (h, w)) in blocks: pixels in whole groups of MR, a partial last group, one short
# group only; a reduction of several chunks (PACKED_K_CHUNK); enough work for many tasks; a short reduction
# whose chunks of pixels are long (CHUNK_BYTES), two an image, the last group partial; a batch of images of
# pixels not a multiple of MR, with a reduction in chunks too; a batch of one-pixel images
POINTWISE = [
    (1, 1, 1, (2, 3)),
    (2, 2, 3, (7, 9)),
    (1, 1, 2, (1, MR - 2)),
    (1, -(-(PACKED_K_CHUNK + 1) // B), 1, (5, 5)),
    (1, 4, 16 // B + 2, (28, 29)),
    (2, 1, 1, (47, 47)),
    (3, -(-(PACKED_K_CHUNK + 1) // B), 2, (5, 5)),
    (5, 2, 1, (1, 1)),
]


@pytest.mark.parametrize("n, cb, ob, hw", POINTWISE)
@pytest.mark.parametrize("act, post", [("none", "none"), ("clamp", "none"), ("none", "relu"), ("silu", "relu")])
@pytest.mark.parametrize("with_bias, with_residual", [(True, False), (False, True), (True, True)])
def test_pointwise_blocked_conv_matches_float64(n, cb, ob, hw, act, post, with_bias, with_residual):
    x, w, bias = operands(n, cb * B, ob * B, hw, (1, 1), seed=cb * ob + hw[1])
    residual = np.random.default_rng(1).standard_normal((n, ob * B, *hw)).astype(np.float32)
    bias, residual = bias if with_bias else None, residual if with_residual else None
    got = run(x, w, bias, None if residual is None else blocked(residual), act, post, hw)
    np.testing.assert_allclose(got, reference(x, w, bias, residual, act, post), rtol=1e-5, atol=1e-5)


# (kernel, stride, padding (top, left, bottom, right), dilation, (h, w)): a 3x3 "same" conv, strided,
# asymmetric padding, dilated, 5x5, a strided 1x1 (a downsampling shortcut: conv1x1_blocked), a padded
# 1x1 (conv2d_blocked), 7x7 on a wide plane, unpadded ones (read where they lie, not gathered): Inception's
# 3x3 stride-2 reduction, dilated with columns the windows never reach
WINDOWS = [
    ((3, 3), (2, 2), (0, 0, 0, 0), (1, 1), (15, 15)),
    ((3, 3), (1, 2), (0, 0, 0, 0), (2, 1), (11, 14)),
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (9, 11)),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (13, 10)),
    ((3, 3), (1, 2), (0, 2, 1, 0), (1, 1), (8, 9)),
    ((3, 3), (1, 1), (2, 2, 2, 2), (2, 2), (10, 7)),
    ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1), (6, 6)),
    ((1, 1), (2, 2), (0, 0, 0, 0), (1, 1), (11, 12)),
    ((1, 1), (1, 1), (1, 0, 0, 1), (1, 1), (5, 6)),
    ((7, 7), (2, 2), (3, 3, 3, 3), (1, 1), (9, 30)),
]


def out_size(hw, kernel, stride, padding, dilation):
    return tuple((hw[a] + padding[a] + padding[a + 2] - (kernel[a] - 1) * dilation[a] - 1) // stride[a] + 1
                 for a in (0, 1))


@pytest.mark.parametrize("kernel, stride, padding, dilation, hw", WINDOWS)
@pytest.mark.parametrize("n, cb, ob", [(1, 1, 1), (2, 2, 3)])
@pytest.mark.parametrize("act, post, with_residual", [("none", "relu", True), ("clamp", "none", False),
                                                      ("silu", "none", True)])
def test_windowed_blocked_conv_matches_float64(kernel, stride, padding, dilation, hw, n, cb, ob, act, post,
                                               with_residual):
    x, w, bias = operands(n, cb * B, ob * B, hw, kernel, seed=kernel[0] * 10 + ob)
    out_hw = out_size(hw, kernel, stride, padding, dilation)
    residual = (np.random.default_rng(2).standard_normal((n, ob * B, *out_hw)).astype(np.float32)
                if with_residual else None)
    got = run(x, w, bias, None if residual is None else blocked(residual), act, post, out_hw, stride, padding,
              dilation)
    expected = reference(x, w, bias, residual, act, post, stride, padding, dilation)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c", [2 * B, STRIDED_COMPACT_MIN_K, STRIDED_COMPACT_MIN_K + B // 2])
@pytest.mark.parametrize("stride, hw", [((2, 2), (13, 11)), ((1, 2), (6, 9)), ((3, 2), (12, 12)), ((2, 1), (9, 4))])
def test_strided_1x1_blocked_conv_matches_float64_read_in_place_or_compacted(c, stride, hw):
    """A strided 1x1 conv reads its pixels where they lie on short reductions, and from a compact copy of
    them from STRIDED_COMPACT_MIN_K input lanes (a padded last block among them): both against float64,
    with a residual, on planes whose last rows or columns the stride skips, at batch 3; NaN in the input's
    padding lanes never reaches the output."""
    o = 3 * B
    x, w, bias = operands(3, c, o, hw, (1, 1), seed=c + stride[0])
    out_hw = out_size(hw, (1, 1), stride, (0, 0, 0, 0), (1, 1))
    residual = np.random.default_rng(4).standard_normal((3, o, *out_hw)).astype(np.float32)
    out = np.full((3, blocks(o), *out_hw, B), np.nan, np.float32)
    codes = ACTIVATION_CODES["relu"], 0.0, 0.0, 0, 0.0, 0.0
    wt = read_only(pack_channel_panels(pad_to_blocks(w, B), B))
    conv1x1_blocked(nan_padded(x) if c % B else blocked(x), wt, block_bias(bias, o), blocked(residual), out, stride,
                    *codes, 0)
    expected = reference(x, w, bias, residual, "relu", "none", stride)
    np.testing.assert_allclose(unblocked(out, o), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padding", [(1, 1, 1, 1), (0, 0, 0, 0)])
def test_large_windowed_conv_splits_into_bands_and_matches(padding):
    """Enough work for many tasks: bands of pixel groups that end mid-row, each gathering its rows (or,
    unpadded, reading them in place)."""
    x, w, bias = operands(2, 2 * B, 2 * B, (31, 29), (3, 3), seed=5)
    out_hw = out_size((31, 29), (3, 3), (1, 1), padding, (1, 1))
    got = run(x, w, bias, None, "relu", "none", out_hw, padding=padding)
    expected = reference(x, w, bias, None, "relu", "none", padding=padding)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("stride, padding", [((1, 1), (1, 1, 1, 1)), ((2, 2), (1, 1, 1, 1)), ((2, 2), (0, 1, 1, 0))])
def test_a_conv_of_large_weights_splits_its_output_blocks_over_tasks_that_share_bands(n, stride, padding):
    """Weights past WINDOW_WEIGHT_BYTES (ResNet's strided 3x3 convs): tasks take groups of output blocks of a
    band before other bands, and a thread whose last task gathered the same band computes from its scratch
    without gathering again. Several groups of blocks a band; two bands an image at batch 2, one at batch 4
    (where consecutive tasks change image but not band): a task that computed from another band's rows, or
    another image's, would be off here."""
    x, w, bias = operands(n, 8 * B, 4 * B, (20, 19), (3, 3), seed=11)
    assert w.shape[0] * w.shape[1] * 9 * 4 > WINDOW_WEIGHT_BYTES
    residual_hw = out_size((20, 19), (3, 3), stride, padding, (1, 1))
    residual = np.random.default_rng(12).standard_normal((n, 4 * B, *residual_hw)).astype(np.float32)
    got = run(x, w, bias, blocked(residual), "relu", "none", residual_hw, stride=stride, padding=padding)
    expected = reference(x, w, bias, residual, "relu", "none", stride=stride, padding=padding)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# groups of a quarter block (whole vectors of it) where the vectors allow: AVX-512's 16 of 64 lanes, not AVX2's 4 of 16
QUARTER = pytest.mark.skipif(not vector_groups(B // 4, B), reason="a quarter block is less than a vector here")


def _lanes(g):
    """A mark skipping groups of g lanes where they are no lane groups (a vector's or more: AVX2's 8)."""
    return pytest.mark.skipif(not lane_groups(g, B), reason=f"groups of {g} are a vector or more here")


@pytest.mark.parametrize("g, groups", [(B, 3), (2 * B, 2), (B, 1), (B // 2, 4), (B // 2, 5), (B // 2, 1),
                                       pytest.param(B // 4, 8, marks=QUARTER), pytest.param(B // 4, 3, marks=QUARTER),
                                       pytest.param(4, 2 * B // 4, marks=_lanes(4)), pytest.param(4, 3 * B // 8,
                                       marks=_lanes(4)), pytest.param(2, B // 2, marks=_lanes(2))])
@pytest.mark.parametrize("kernel, stride, padding, n", [
    ((3, 3), (1, 1), (1, 1, 1, 1), 2), ((3, 3), (2, 2), (1, 1, 1, 1), 1), ((3, 3), (1, 1), (0, 0, 0, 0), 1),
    ((1, 1), (1, 1), (0, 0, 0, 0), 2)])
def test_a_grouped_blocked_conv_reads_each_groups_own_lanes(g, groups, kernel, stride, padding, n):
    """conv2d_blocked's group_lanes: each output block reduces over its group's input blocks only (groups of one
    and two blocks), or each half of it over the same half of its input block (groups of half a block; an odd
    number of them leaves the last block's second half padding, zero), gathered into scratch and read where they
    lie, with bias, ReLU and a residual, against float64 group by group. It fails if a lane reads another
    group's input or weights. Groups of a quarter block: each vector of a block over its own group's lanes."""
    _check_grouped(g, groups, kernel, stride, padding, n, 11)


@pytest.mark.parametrize("g, groups, stride, n", [(2 * B, 2, (2, 2), 1), (B // 2, 6, (2, 2), 2), (B, 3, (1, 1), 1),
                                                  pytest.param(B // 4, 12, (2, 2), 2, marks=QUARTER),
                                                  pytest.param(4, 2 * B // 4, (2, 2), 1, marks=_lanes(4))])
def test_a_grouped_blocked_conv_on_large_planes_gathers_each_tasks_groups_in_bands(g, groups, stride, n):
    """A grouped conv2d_blocked on planes whose bands of rows (BAND_BYTES over a group's input blocks) are several
    an image: each task gathers its group's input blocks only, into the start of its scratch, band by band,
    against float64 group by group."""
    _check_grouped(g, groups, (3, 3), stride, (1, 1, 1, 1), n, 41)


def _check_grouped(g, groups, kernel, stride, padding, n, size):
    c = g * groups
    rng = np.random.default_rng(g * 10 + groups)
    x = rng.standard_normal((n, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((c, g, *kernel)) / np.sqrt(g * kernel[0] * kernel[1])).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    out_hw = out_size((size, size), kernel, stride, padding, (1, 1))
    residual = rng.standard_normal((n, c, *out_hw)).astype(np.float32)
    expected = np.concatenate([reference(x[:, i * g:(i + 1) * g], w[i * g:(i + 1) * g], bias[i * g:(i + 1) * g],
                                         residual[:, i * g:(i + 1) * g], "relu", "none", stride, padding)
                               for i in range(groups)], axis=1)
    assert group_lanes(groups, c, B) == g
    wt = read_only(pack_grouped_blocked(w, groups, B))
    out = np.full((n, blocks(c), *out_hw, B), np.nan, np.float32)
    conv2d_blocked(blocked(x), wt, block_bias(bias, c), blocked(residual), out, kernel, stride, padding, (1, 1),
                   ACTIVATION_CODES["relu"], 0.0, 0.0, 0, 0.0, 0.0, c, g)
    np.testing.assert_allclose(unblocked(out, c), expected, rtol=1e-5, atol=1e-5)
    if c % B:  # the last block's padding lanes
        assert np.all(out[:, -1, ..., c % B:] == 0)


@pytest.mark.parametrize("n, stride, hw", [(2, (1, 1), (9, 9)), (1, (2, 2), (23, 21)), (4, (1, 1), (7, 7))])
def test_a_conv_of_large_weights_takes_whole_images_a_task_where_the_pairs_share_out(n, stride, hw):
    """conv2d_blocked with weights over WINDOW_WEIGHT_BYTES (128 -> 128 3x3: 590 KB packed on either block) and
    (image, block) pairs enough for two tasks a thread runs one band an image (_one_band), or at batch 1 on two
    blocks, bands again; with bias, SiLU and a residual, against float64."""
    c = 128
    assert blocks(c) * c * 9 * B * 4 > WINDOW_WEIGHT_BYTES
    x, w, bias = operands(n, c, c, hw, (3, 3), seed=n + stride[0])
    out_hw = out_size(hw, (3, 3), stride, (1, 1, 1, 1), (1, 1))
    residual = np.random.default_rng(3).standard_normal((n, c, *out_hw)).astype(np.float32)
    got = run(x, w, bias, blocked(residual), "silu", "none", out_hw, stride=stride, padding=(1, 1, 1, 1))
    want = reference(x, w, bias, residual, "silu", "none", stride=stride, padding=(1, 1, 1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@QUARTER
@pytest.mark.parametrize("groups", [2, 5])  # 2 * B / 4 channels: half a block; 5 * B / 4: a block and a quarter
@pytest.mark.parametrize("act", ["relu", "silu"])
@pytest.mark.parametrize("stride, size", [((1, 1), 9), ((2, 2), 41)])
def test_a_conv_in_groups_of_vectors_runs_a_half_filled_last_block_half_wide(groups, act, stride, size):
    """Given the real output channels, a conv in groups of whole vectors computes a last block they fill half of
    at most half wide (micro_gemm_taps_grouped_half) and writes zeros over its other lanes, where the whole block
    held act(0) plus the residual's padding (7 here): the real channels match float64 either way, through the
    registers' epilogue (ReLU) and one of more passes (SiLU, which then adds the residual to every lane), one band
    an image or several."""
    g = B // 4
    c = g * groups
    rng = np.random.default_rng(groups)
    x = rng.standard_normal((2, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((c, g, 3, 3)) / np.sqrt(g * 9)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    out_hw = out_size((size, size), (3, 3), stride, (1, 1, 1, 1), (1, 1))
    residual = rng.standard_normal((2, c, *out_hw)).astype(np.float32)
    want = np.concatenate([reference(x[:, i * g:(i + 1) * g], w[i * g:(i + 1) * g], bias[i * g:(i + 1) * g],
                                     residual[:, i * g:(i + 1) * g], act, "none", stride, (1, 1, 1, 1))
                           for i in range(groups)], axis=1)
    wt = read_only(pack_grouped_blocked(w, groups, B))
    res = blocked(residual)
    res[:, -1, ..., c % B:] = 7.0
    for out_channels in (c, 0):
        out = np.full(res.shape, np.nan, np.float32)
        conv2d_blocked(blocked(x), wt, block_bias(bias, c), res, out, (3, 3), stride, (1, 1, 1, 1), (1, 1),
                       ACTIVATION_CODES[act], 0.0, 0.0, 0, 0.0, 0.0, out_channels, g)
        np.testing.assert_allclose(unblocked(out, c), want, rtol=1e-5, atol=1e-5)
        if act == "relu":
            assert np.all(out[:, -1, ..., B // 2:] == (0 if out_channels else 7))


@QUARTER
@pytest.mark.parametrize("kernel, stride, dilation, width", [
    ((3, 3), (1, 1), (1, 1), 7), ((3, 3), (1, 1), (1, 1), 20), ((3, 3), (2, 2), (1, 1), 27),
    ((3, 3), (1, 2), (1, 1), 16), ((1, 3), (1, 1), (1, 1), 13), ((5, 3), (2, 1), (1, 1), 14),
    ((3, 3), (1, 1), (2, 2), 15), ((3, 5), (1, 1), (1, 1), 12), ((3, 3), (3, 3), (1, 1), 25)])
@pytest.mark.parametrize("groups", [4, 2])  # a whole block; half of one, computed half wide
def test_a_conv_in_groups_of_vectors_matches_float64_on_every_window_geometry(kernel, stride, dilation, width, groups):
    """Groups of one vector, MR pixels of one output row at a time where the window is 3 columns wide, undilated, at
    stride 1 or 2 (micro_gemm_taps_out_grouped_row: each input column broadcast once for the columns that read it),
    the pixels that straddle rows and the other windows (5 columns, dilated, stride 3) through
    micro_gemm_taps_out_grouped: against float64 group by group, with bias, ReLU and a residual, on rows of 7 to
    27 pixels (one row group or several, with tails)."""
    g = B // 4
    c = g * groups
    rng = np.random.default_rng(width)
    pad = ((kernel[0] - 1) // 2 * dilation[0], (kernel[1] - 1) // 2 * dilation[1]) * 2
    x = rng.standard_normal((2, c, 9, width)).astype(np.float32)
    w = (rng.standard_normal((c, g, *kernel)) / np.sqrt(g * kernel[0] * kernel[1])).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    out_hw = out_size((9, width), kernel, stride, pad, dilation)
    residual = rng.standard_normal((2, c, *out_hw)).astype(np.float32)
    want = np.concatenate([reference(x[:, i * g:(i + 1) * g], w[i * g:(i + 1) * g], bias[i * g:(i + 1) * g],
                                     residual[:, i * g:(i + 1) * g], "relu", "none", stride, pad, dilation)
                           for i in range(groups)], axis=1)
    out = np.full((2, blocks(c), *out_hw, B), np.nan, np.float32)
    conv2d_blocked(blocked(x), read_only(pack_grouped_blocked(w, groups, B)), block_bias(bias, c), blocked(residual),
                   out, kernel, stride, pad, dilation, ACTIVATION_CODES["relu"], 0.0, 0.0, 0, 0.0, 0.0, c, g)
    np.testing.assert_allclose(unblocked(out, c), want, rtol=1e-5, atol=1e-5)


@QUARTER
@pytest.mark.parametrize("sw", [1, 2])
@pytest.mark.parametrize("half", [False, True])
def test_the_row_kernel_of_a_conv_in_groups_of_vectors_sums_each_pixels_window_columns(sw, half):
    """micro_gemm_taps_out_grouped_row (and its _half kind) alone: MR pixels of a row, sw apart, each vector of
    the block over its own group's lanes and the 3 columns of each (lane, kernel row) step, bias and ReLU, against
    the same sum in float64."""
    g, kh, kw, pitch = B // 4, 2, 3, 40  # the input: kh rows of `pitch` pixels of B lanes
    lanes = B // 2 if half else B
    rng = np.random.default_rng(sw + 2 * half)
    a = rng.standard_normal(kh * pitch * B).astype(np.float32)
    steps = g * kh  # (lane, kernel row)
    rows = np.array([r + i * pitch * B + j * B for r in range(g) for i in range(kh) for j in range(kw)], np.int64)
    wf = read_only(rng.standard_normal(steps * kw * B).astype(np.float32))
    bias = read_only(rng.standard_normal(B).astype(np.float32))
    a0 = 3 * B  # the first pixel's window: column 3
    want = np.zeros((MR, lanes))
    for i in range(MR):
        for v in range(lanes):
            group = v // g * g
            for s in range(steps):
                for j in range(kw):
                    want[i, v] += (float(a[a0 + rows[s * kw] + (i * sw + j) * B + group])
                                   * float(wf[(s * kw + j) * B + v]))
    want = np.maximum(want + bias[:lanes], 0)
    got = np.full(MR * B, np.nan, np.float32)
    _row_kernel(half, sw, steps, a, a0, rows, wf, got, bias)
    np.testing.assert_allclose(got.reshape(MR, B)[:, :lanes], want, rtol=1e-5, atol=1e-5)
    assert np.isnan(got.reshape(MR, B)[:, lanes:]).all()  # the half kind leaves the other lanes alone


@numba.njit
def _row_kernel(half, sw, steps, a, a0, rows, wf, c, bias):
    lo, hi, top, res = 0.0, np.inf, -np.inf, c[:0]
    if half:
        if sw == 1:
            micro_gemm_taps_out_grouped_row_half(steps, a, a0, rows, 0, wf, 0, B, c, 0, B, bias, 0, lo, hi, top, res,
                                                 1, 3, 1)
        else:
            micro_gemm_taps_out_grouped_row_half(steps, a, a0, rows, 0, wf, 0, B, c, 0, B, bias, 0, lo, hi, top, res,
                                                 2, 3, 1)
    elif sw == 1:
        micro_gemm_taps_out_grouped_row(steps, a, a0, rows, 0, wf, 0, B, c, 0, B, bias, 0, lo, hi, top, res, 1, 3, 1)
    else:
        micro_gemm_taps_out_grouped_row(steps, a, a0, rows, 0, wf, 0, B, c, 0, B, bias, 0, lo, hi, top, res, 2, 3, 1)


@pytest.mark.parametrize("act", ["silu", "hardswish"])
def test_a_conv_in_groups_of_half_blocks_runs_an_activation_of_more_passes_over_both_halves(act):
    """The epilogue of an activation that does not run from the registers (epilogue_run, after both halves of
    a block in groups of half blocks), with a residual after it, against float64."""
    g, groups, n = B // 2, 6, 2
    c = g * groups
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, c, 9, 9)).astype(np.float32)
    w = (rng.standard_normal((c, g, 3, 3)) / np.sqrt(g * 9)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    residual = rng.standard_normal((n, c, 9, 9)).astype(np.float32)
    expected = np.concatenate([reference(x[:, i * g:(i + 1) * g], w[i * g:(i + 1) * g], bias[i * g:(i + 1) * g],
                                         residual[:, i * g:(i + 1) * g], act, "none", (1, 1), (1, 1, 1, 1))
                               for i in range(groups)], axis=1)
    out = np.full((n, blocks(c), 9, 9, B), np.nan, np.float32)
    wt = read_only(pack_grouped_blocked(w, groups, B))
    conv2d_blocked(blocked(x), wt, block_bias(bias, c), blocked(residual), out, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1),
                   ACTIVATION_CODES[act], 0.0, 0.0, 0, 0.0, 0.0, c, g)
    np.testing.assert_allclose(unblocked(out, c), expected, rtol=1e-5, atol=1e-5)


def test_grouped_blocked_convs_refuse_groups_that_are_no_whole_blocks_half_ones_vectors_or_lanes_of_one():
    """pack_grouped_blocked and group_lanes take groups of whole blocks, half ones, whole vectors of one (a
    quarter of AVX-512's 64 lanes) or 2 or 4 lanes of a vector only (not 1: depthwise, nor 3, 6, 12 or 48, nor
    8 on AVX-512); conv2d_blocked refuses a group_lanes that does not match its weight's reduction, or an output
    of other blocks than its input's."""
    assert group_lanes(4, 2 * B, B) == B // 2 and group_lanes(2, 2 * B, B) == B
    assert group_lanes(8, 2 * B, B) == B // 4  # a vector of AVX-512's block, 4 lanes of AVX2's
    assert group_lanes(16, 2 * B, B) == (0 if B == 64 else 2)  # 8 lanes of AVX-512's vectors: no
    assert group_lanes(3, 2 * B, B) == 0 and group_lanes(4, 3 * B, B) == 0  # groups of 3 / 4 of a block
    assert group_lanes(2 * B, 2 * B, B) == 0 and group_lanes(8, 48, B) == 0 and group_lanes(4, 12, B) == 0
    with pytest.raises(ValueError, match="neither whole blocks"):
        pack_grouped_blocked(np.zeros((48, 6, 3, 3), np.float32), 8, B)
    x = blocked(np.zeros((1, 2 * B, 5, 5), np.float32))
    wt = read_only(pack_grouped_blocked(np.zeros((2 * B, B, 3, 3), np.float32), 2, B))
    for lanes, o in [(2 * B, 2 * B), (B, 3 * B), (B // 2, 2 * B), (B // 4, 2 * B)]:
        out = np.zeros((1, blocks(o), 5, 5, B), np.float32)
        with pytest.raises(ValueError, match="mismatched"):
            conv2d_blocked(x, wt, zero_bias(blocks(o) * B), out[:0], out, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1),
                           0, 0.0, 0.0, 0, 0.0, 0.0, 0, lanes)


@pytest.mark.parametrize("kernel", [(1, 1), (3, 3)])
@pytest.mark.parametrize("post", ["none", "relu"])
def test_blocked_conv_writes_over_its_own_residual(kernel, post):
    """The memory plan may give a conv's output its residual's buffer: each residual element is read
    before the output is written over it, the partial group's too."""
    x, w, bias = operands(1, B, 2 * B, (5, 7), kernel, seed=9)
    residual = np.random.default_rng(3).standard_normal((1, 2 * B, 5, 7)).astype(np.float32)
    padding = (kernel[0] // 2,) * 4
    buffer = blocked(residual)
    got = run(x, w, bias, buffer, "relu", post, (5, 7), padding=padding, out=buffer)
    np.testing.assert_allclose(got, reference(x, w, bias, residual, "relu", post, padding=padding),
                               rtol=1e-5, atol=1e-5)


# upsamplings (n, c, o, hw, kernel == stride, input segments): a UNet's, rows that end in a partial group of MR,
# a 3x3 stride 3, padded channels in and out, an input of a concat's segments, many tasks
TRANSPOSES = [(1, 2 * B, B, (8, 8), (2, 2), None), (2, B, 2 * B, (5, 7), (2, 2), None),
              (1, B, B, (4, 3), (3, 3), None), (1, B + 3, B // 2, (6, 6), (2, 2), None),
              (1, B + B // 2, B, (7, 5), (2, 1), (B // 2, B)), (2, 4 * B, 2 * B, (16, 16), (2, 2), None)]


@pytest.mark.parametrize("n, c, o, hw, kernel, segments", TRANSPOSES)
def test_blocked_conv_transpose_whose_kernel_is_its_stride_matches_float64(n, c, o, hw, kernel, segments):
    """conv_transpose_blocked: each tap a 1x1 conv stored stride apart, against the NCHW reference in float64;
    the lanes padding the output's last block hold 0."""
    rng = np.random.default_rng(c + o)
    x = rng.standard_normal((n, c, *hw)).astype(np.float32)
    w = (rng.standard_normal((c, o, *kernel)) / np.sqrt(c)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    expected = conv_transpose2d(x.astype(np.float64), w.astype(np.float64), bias.astype(np.float64),
                                stride=kernel, padding=(0, 0, 0, 0), output_padding=(0, 0), dilation=(1, 1), groups=1)
    xb = blocked_array(x, B, segments)
    out = np.full((n, blocks(o), hw[0] * kernel[0], hw[1] * kernel[1], B), np.nan, np.float32)
    conv_transpose_blocked(xb, read_only(pack_transpose_blocked(w, B, segments)), block_bias(bias, o), out, kernel)
    np.testing.assert_allclose(unblocked(out, o), expected, rtol=1e-5, atol=1e-5)
    assert (out[:, -1, ..., (o - 1) % B + 1:] == 0).all()


def test_blocked_conv_transpose_refuses_mismatched_operands():
    x = np.zeros((1, 1, 4, 4, B), np.float32)
    wt = read_only(pack_transpose_blocked(np.zeros((B, B, 2, 2), np.float32), B))
    with pytest.raises(ValueError, match="mismatched shapes"):  # an output of another size than H * KH x W * KW
        conv_transpose_blocked(x, wt, zero_bias(B), np.zeros((1, 1, 8, 9, B), np.float32), (2, 2))
    with pytest.raises(ValueError, match="mismatched shapes"):  # a weight of another kernel
        conv_transpose_blocked(x, wt, zero_bias(B), np.zeros((1, 1, 12, 12, B), np.float32), (3, 3))


def test_blocked_convs_refuse_blocks_of_another_width():
    x = np.zeros((1, 1, 4, 4, 2 * B), np.float32)
    w = read_only(pack_channel_panels(np.zeros((2 * B, 2 * B, 1, 1), np.float32), 2 * B))
    out = np.zeros((1, 1, 4, 4, 2 * B), np.float32)
    with pytest.raises(ValueError, match="blocks of another width"):
        conv1x1_blocked(x, w, zero_bias(2 * B), out[:0], out, (1, 1), 0, 0.0, 0.0, 0, 0.0, 0.0, 0)
    with pytest.raises(ValueError, match="blocks of another width"):
        conv2d_blocked(x, w, zero_bias(2 * B), out[:0], out, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1),
                       0, 0.0, 0.0, 0, 0.0, 0.0, 0, 0)


# (n, channels in blocks, out channels in blocks, (h, w), (top, left) padding): whole tiles, an odd
# output row and column (edge tiles through scratch), no padding, a batch, a reduction of chunks
WINOGRAD = [
    (1, 1, 2, (8, 8), (1, 1)),
    (1, 2, 1, (7, 9), (1, 1)),
    (1, 1, 1, (6, 7), (0, 0)),
    (3, 1, 1, (5, 5), (1, 1)),
    (1, -(-(PACKED_K_CHUNK + 1) // B), 1, (9, 6), (1, 1)),
    (2, 1, 2, (14, 13), (1, 1)),  # windows inside the image, read where they lie (F(4x4)'s too)
]
# F(4x4, 3x3)'s error against float64 is about ten times F(2x2)'s (its transforms' larger constants)
WINOGRAD_TOLERANCE = {2: 2e-5, 4: 1e-4}


def run_winograd(x, w, bias, residual, act, post, padding, out=None, tile=2):
    n, o, (h, wd) = x.shape[0], w.shape[0], x.shape[2:]
    oh, ow = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
    out = np.full((n, blocks(o), oh, ow, B), np.nan, np.float32) if out is None else out
    res = out[:0] if residual is None else residual
    winograd_blocked(blocked(x), read_only(pack_winograd_blocked(w, B, tile)), block_bias(bias, o), res, out,
                     padding[0], padding[1], ACTIVATION_CODES[act], -0.5, 0.75, ACTIVATION_CODES[post], 0.0, 0.0)
    return unblocked(out, o)


@pytest.mark.parametrize("n, cb, ob, hw, padding", WINOGRAD)
@pytest.mark.parametrize("act, post, with_residual", [("none", "relu", True), ("clamp", "none", False),
                                                      ("silu", "none", True), ("none", "none", False)])
@pytest.mark.parametrize("tile", [2, 4])
def test_blocked_winograd_matches_float64(n, cb, ob, hw, padding, act, post, with_residual, tile):
    x, w, bias = operands(n, cb * B, ob * B, hw, (3, 3), seed=cb + 7 * ob + hw[1])
    pad4 = (padding[0], padding[1], padding[0], padding[1])
    out_hw = out_size(hw, (3, 3), (1, 1), pad4, (1, 1))
    residual = (np.random.default_rng(4).standard_normal((n, ob * B, *out_hw)).astype(np.float32)
                if with_residual else None)
    got = run_winograd(x, w, bias, None if residual is None else blocked(residual), act, post, padding, tile=tile)
    expected = reference(x, w, bias, residual, act, post, padding=pad4)
    np.testing.assert_allclose(got, expected, rtol=WINOGRAD_TOLERANCE[tile], atol=WINOGRAD_TOLERANCE[tile])


@pytest.mark.parametrize("tile", [2, 4])
def test_blocked_winograd_writes_over_its_own_residual(tile):
    """With a zero bias: the pass's for a conv without one."""
    x, w, _ = operands(1, B, B, (11, 5), (3, 3), seed=11)
    residual = np.random.default_rng(6).standard_normal((1, B, 11, 5)).astype(np.float32)
    buffer = blocked(residual)  # the memory plan gives the output its residual's buffer
    winograd_blocked(blocked(x), read_only(pack_winograd_blocked(w, B, tile)), zero_bias(B), buffer, buffer, 1, 1,
                     0, 0.0, 0.0, ACTIVATION_CODES["relu"], 0.0, 0.0)
    expected = reference(x, w, None, residual, "none", "relu", padding=(1, 1, 1, 1))
    tolerance = WINOGRAD_TOLERANCE[tile]
    np.testing.assert_allclose(unblocked(buffer), expected, rtol=tolerance, atol=tolerance)


def test_f4x4_winograd_error_stays_near_f2x2s_on_a_long_reduction():
    """F(4x4, 3x3)'s float32 error on 512 input channels, against float64: within 1e-4 of outputs of about
    unit size, at most 20 times F(2x2)'s."""
    x, w, bias = operands(1, 512, B, (12, 12), (3, 3), seed=13)
    expected = reference(x, w, bias, None, "none", "none", padding=(1, 1, 1, 1))
    errors = {tile: np.abs(run_winograd(x, w, bias, None, "none", "none", (1, 1), tile=tile) - expected).max()
              for tile in (2, 4)}
    assert errors[4] < 1e-4 * max(1.0, np.abs(expected).max()) and errors[4] < 20 * max(errors[2], 1e-7), errors


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("chunk_bytes", [1, 40_000, 4 << 20])
def test_winograd_weights_transformed_in_chunks_equal_g_g_gt_in_float64(monkeypatch, tile, chunk_bytes):
    """U = G g G^T of every (o, c), computed in chunks of output channels (one block each, chunks of 3
    blocks with a last of 1, or all at once) and packed as winograd_blocked reads it, against einsum in
    float64; weight_transform's plain (a^2, O, C) on the same chunks."""
    monkeypatch.setattr(winograd, "CHUNK_BYTES", chunk_bytes)
    rng = np.random.default_rng(3)
    o, c = 10 * B, 7
    w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    g_ = {2: winograd._G, 4: winograd._G4}[tile]
    a = tile + 2
    u = np.einsum("ia,ocab,jb->ijoc", g_, w.astype(np.float64), g_).reshape(a * a, o, c)
    np.testing.assert_allclose(weight_transform(w, tile), u, rtol=1e-6, atol=1e-6)
    packed = pack_winograd_blocked(w, B, tile)
    assert packed.shape == (a * a, o // B, c, B) and packed.dtype == np.float32
    np.testing.assert_allclose(packed, u.reshape(a * a, o // B, B, c).transpose(0, 1, 3, 2), rtol=1e-6, atol=1e-6)


def depthwise_reference(x, w, bias, residual, act, post, stride, padding, dilation):
    """The depthwise conv in float64: reference() one channel at a time."""
    return np.concatenate([reference(x[:, c:c + 1], w[c:c + 1], None if bias is None else bias[c:c + 1],
                                     None if residual is None else residual[:, c:c + 1], act, post, stride,
                                     padding, dilation) for c in range(x.shape[1])], axis=1)


# MobileNet's 3x3 stride 1 and 2, EfficientNet's 5x5, asymmetric padding, dilation, none, rows that end
# in a partial group of DEPTHWISE_GROUP pixels and rows of whole groups
DEPTHWISE_WINDOWS = [
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (9, 13)),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (14, 14)),
    ((3, 3), (2, 2), (0, 0, 1, 1), (1, 1), (14, 15)),
    ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1), (7, 2 * DEPTHWISE_GROUP)),
    ((5, 5), (2, 2), (2, 2, 2, 2), (1, 1), (11, 11)),
    ((3, 3), (1, 1), (2, 2, 2, 2), (2, 2), (8, 8)),
    ((3, 1), (1, 2), (0, 0, 0, 0), (1, 1), (6, 9)),
]


def run_depthwise(x, w, bias, residual, act, post, stride, padding, dilation, out=None):
    n, c = x.shape[:2]
    out_hw = out_size(x.shape[2:], w.shape[2:], stride, padding, dilation)
    out = np.full((n, blocks(c), *out_hw, B), np.nan, np.float32) if out is None else out
    codes = ACTIVATION_CODES[act], -0.5, 0.75, ACTIVATION_CODES[post], 0.0, 0.0
    wd = read_only(pack_depthwise_blocked(w, B))
    depthwise_blocked(blocked(x), wd, block_bias(bias, c),  # zeros for no bias, as a forward passes
                      out[:0] if residual is None else residual, out, w.shape[2:], stride, padding, dilation, *codes)
    return unblocked(out, c)


@pytest.mark.parametrize("kernel, stride, padding, dilation, hw", DEPTHWISE_WINDOWS)
@pytest.mark.parametrize("n, cb", [(1, 1), (2, 3)])
@pytest.mark.parametrize("act, post, with_residual, with_bias", [
    ("clamp", "none", False, True),  # ReLU6's kind: one pass from the registers
    ("none", "relu", True, True),  # a residual, then a post ReLU
    ("silu", "none", True, False),  # an activation of more than one pass, no bias
])
def test_depthwise_blocked_conv_matches_float64(kernel, stride, padding, dilation, hw, n, cb, act, post,
                                               with_residual, with_bias):
    rng = np.random.default_rng(kernel[0] * 7 + cb)
    x = rng.standard_normal((n, cb * B, *hw)).astype(np.float32)
    w = (rng.standard_normal((cb * B, 1, *kernel)) / kernel[0]).astype(np.float32)
    bias = rng.standard_normal(cb * B).astype(np.float32) if with_bias else None
    out_hw = out_size(hw, kernel, stride, padding, dilation)
    residual = rng.standard_normal((n, cb * B, *out_hw)).astype(np.float32) if with_residual else None
    got = run_depthwise(x, w, bias, None if residual is None else blocked(residual), act, post, stride, padding,
                        dilation)
    np.testing.assert_allclose(got, depthwise_reference(x, w, bias, residual, act, post, stride, padding, dilation),
                               rtol=1e-5, atol=1e-5)


def test_large_depthwise_conv_splits_into_bands_and_writes_over_its_residual():
    """Enough work for many tasks (bands of rows, each gathering its own input rows), the output written
    over its residual's buffer."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 2 * B, 57, 61)).astype(np.float32)
    w = (rng.standard_normal((2 * B, 1, 3, 3)) / 3).astype(np.float32)
    bias = rng.standard_normal(2 * B).astype(np.float32)
    residual = rng.standard_normal((1, 2 * B, 57, 61)).astype(np.float32)
    buffer = blocked(residual)
    got = run_depthwise(x, w, bias, buffer, "relu", "none", (1, 1), (1, 1, 1, 1), (1, 1), out=buffer)
    np.testing.assert_allclose(got, depthwise_reference(x, w, bias, residual, "relu", "none", (1, 1), (1, 1, 1, 1),
                                                        (1, 1)), rtol=1e-5, atol=1e-5)


def test_depthwise_blocked_refuses_mismatched_operands():
    x = np.zeros((1, 1, 4, 4, B), np.float32)
    w = read_only(np.zeros((1, 9, B), np.float32))
    with pytest.raises(ValueError, match="depthwise_blocked"):
        depthwise_blocked(x, w, zero_bias(B), x[:0], np.zeros((1, 2, 4, 4, B), np.float32), (3, 3), (1, 1),
                          (1, 1, 1, 1), (1, 1), 0, 0.0, 0.0, 0, 0.0, 0.0)
    with pytest.raises(ValueError, match="pack_depthwise_blocked"):
        pack_depthwise_blocked(np.zeros((B, 2, 3, 3), np.float32), B)


@pytest.mark.parametrize("n, cb, hw", [(1, 1, (1, 1)), (2, 3, (7, 7)), (1, 2, (5, 3)), (1, 4, (57, 61))])
def test_squeeze_excitation_pool_and_scale_on_the_blocked_layout_match_numpy(n, cb, hw):
    """The global average pool into NCHW (N, C, 1, 1), in float64 to 1e-6 (pixel counts that are and are not
    whole runs of PIXEL_SPLIT, work small enough for the calling thread and large enough for tasks), and the
    channel scale, in place too."""
    rng = np.random.default_rng(cb * hw[0])
    x = rng.standard_normal((n, cb * B, *hw)).astype(np.float32)
    out = np.full((n, cb * B, 1, 1), np.nan, np.float32)
    global_avg_pool_blocked(blocked(x), out, (cb * B,))
    np.testing.assert_allclose(out, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-6, atol=1e-6)
    scale = rng.standard_normal((n, cb * B, 1, 1)).astype(np.float32)
    xb = blocked(x)
    got = np.full(xb.shape, np.nan, np.float32)
    channel_scale_blocked(xb, scale, got)  # (a forward's scale is computed: writable)
    np.testing.assert_array_equal(unblocked(got), x * scale)
    channel_scale_blocked(xb, scale, xb)  # the memory plan may give the result its input's buffer
    np.testing.assert_array_equal(unblocked(xb), x * scale)


@pytest.mark.parametrize("n, c", [(1, 2 * B + 3), (2, B // 2), (3, 3 * B - 1)])
def test_a_channel_scale_of_a_padded_last_block_zeroes_its_padding_lanes(n, c):
    """channel_scale_blocked on channels that pad their last block: the real lanes scaled (exactly, as numpy),
    the padding lanes zero whatever they held, into another array and in place."""
    rng = np.random.default_rng(c)
    x = rng.standard_normal((n, c, 5, 6)).astype(np.float32)
    scale = rng.standard_normal((n, c, 1, 1)).astype(np.float32)
    for into in ("other", "itself"):
        xb = blocked(x)
        xb[:, -1, :, :, c % B:] = 7.0  # padding lanes holding something (a sigmoid of a zero channel: 0.5)
        got = xb if into == "itself" else np.full(xb.shape, np.nan, np.float32)
        channel_scale_blocked(xb, read_only(scale) if into == "other" else scale, got)
        np.testing.assert_array_equal(unblocked(got, c), x * scale)
        assert not got[:, -1, :, :, c % B:].any()


@pytest.mark.parametrize("segments", [(B + B // 2,), (B // 2, 2 * B, 3), (2 * B, B)])
def test_a_global_pool_of_segmented_channels_gathers_each_channels_mean(segments):
    """A concat's parts (each from a block's first lane) or one padded value, pooled into NCHW (N, C, 1, 1)."""
    rng = np.random.default_rng(sum(segments))
    parts = [rng.standard_normal((2, c, 9, 7)).astype(np.float32) for c in segments]
    out = np.full((2, sum(segments), 1, 1), np.nan, np.float32)
    global_avg_pool_blocked(np.concatenate([blocked(p) for p in parts], axis=1), out, segments)
    want = np.concatenate(parts, axis=1).astype(np.float64).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_squeeze_excitation_kernels_refuse_mismatched_operands():
    x = np.zeros((1, 2, 3, 3, B), np.float32)
    with pytest.raises(ValueError, match="global_avg_pool_blocked"):
        global_avg_pool_blocked(x, np.zeros((1, B, 1, 1), np.float32), (2 * B,))
    with pytest.raises(ValueError, match="global_avg_pool_blocked"):  # segments of 2B + 1 channels take 3 blocks
        global_avg_pool_blocked(x, np.zeros((1, 2 * B + 1, 1, 1), np.float32), (B, B + 1))
    with pytest.raises(ValueError, match="channel_scale_blocked"):  # a scale of fewer channels than the blocks hold
        channel_scale_blocked(x, np.zeros((1, B, 1, 1), np.float32), np.zeros_like(x))
    with pytest.raises(ValueError, match="channel_scale_blocked"):  # of more
        channel_scale_blocked(x, np.zeros((1, 2 * B + 1, 1, 1), np.float32), np.zeros_like(x))
    with pytest.raises(ValueError, match="channel_scale_blocked"):  # of another batch
        channel_scale_blocked(x, np.zeros((2, 2 * B, 1, 1), np.float32), np.zeros_like(x))


def padding_lanes(out: np.ndarray, o: int) -> np.ndarray:
    return out[:, -1, :, :, o % B:] if o % B else out[:, :0]


@pytest.mark.parametrize("c, o", [(B + B // 2, B // 2), (B // 2 + 3, B + B // 2), (B + 3, B + 3),
                                  (B + 3, B + B // 2 + 1)])
@pytest.mark.parametrize("kind", ["1x1", "3x3 stride 2", "winograd 2", "winograd 4", "depthwise", "1x1 half",
                                  "3x3 stride 2 half"])
def test_convs_on_channels_that_pad_the_last_block_match_float64(c, o, kind):
    """Every blocked conv kernel with the input's and output's last blocks padded (weights and bias padded
    with zeros as the emitter packs them): the real channels match, the padding ones stay zero (SiLU and
    a residual whose padding is zero keep zero zero). "half": given the real output channels, a last block
    they fill half of at most (B / 2, B + B / 2) runs half wide, its other lanes set to zero; B + B / 2 + 1
    fills more, and runs whole."""
    half = kind.endswith(" half")
    kind = kind.removesuffix(" half")
    if kind == "depthwise":
        o = c
    kernel = (1, 1) if kind == "1x1" else ((3, 3) if kind != "depthwise" else (5, 5))
    x, w, bias = operands(2, c, o, (11, 9), kernel, seed=c + o)
    if kind == "depthwise":
        w = w[:, :1] * np.sqrt(c)
    residual = np.random.default_rng(3).standard_normal((2, o, 11, 9)).astype(np.float32)
    stride, padding = ((2, 2), (1, 1, 1, 1)) if kind == "3x3 stride 2" else ((1, 1), (0, 0, 0, 0))
    out_hw = out_size((11, 9), kernel, stride, padding, (1, 1))
    out = np.full((2, blocks(o), *out_hw, B), np.nan, np.float32)
    res = blocked(residual[:, :, :out_hw[0], :out_hw[1]].copy()) if kind != "3x3 stride 2" else None
    if kind.startswith("winograd"):
        got = run_winograd(x, w, bias, res, "silu", "none", (0, 0), out=out, tile=int(kind[-1]))
    elif kind == "depthwise":
        padding = (2, 2, 2, 2)
        out = np.full((2, blocks(o), 11, 9, B), np.nan, np.float32)
        res = blocked(residual)
        got = run_depthwise(x, w, bias, res, "silu", "none", (1, 1), padding, (1, 1), out=out)
        want = depthwise_reference(x, w, bias, residual, "silu", "none", (1, 1), padding, (1, 1))
    else:
        got = run(x, w, bias, res, "silu", "none", out_hw, stride, padding, out=out, out_channels=o if half else 0)
    if kind != "depthwise":
        plain = None if res is None else unblocked(res, o)
        want = reference(x, w, bias, plain, "silu", "none", stride, padding)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 if kind == "winograd 4" else 2e-5)
    assert np.all(padding_lanes(out, o) == 0)


def test_a_weight_packs_the_inputs_lanes_to_its_last_real_one():
    """pad_to_blocks: output channels to whole blocks; input channels to the last real lane, zero weights in
    the lanes padding a segment before the last, none for the lanes after it."""
    w = np.arange(5 * (B + 3) * 2, dtype=np.float32).reshape(5, B + 3, 2, 1) + 1
    padded = pad_to_blocks(w, B)
    assert padded.shape == (B, B + 3, 2, 1)
    np.testing.assert_array_equal(padded[:5], w)
    assert not padded[5:].any()
    segmented = pad_to_blocks(w, B, segments=(3, B))  # lanes 0..2, then B..2B-1
    assert segmented.shape == (B, 2 * B, 2, 1)
    np.testing.assert_array_equal(segmented[:5, :3], w[:, :3])
    np.testing.assert_array_equal(segmented[:5, B:], w[:, 3:])
    assert not segmented[:, 3:B].any()
    assert pad_to_blocks(np.ones((B, 2 * B, 1, 1), np.float32), B).shape == (B, 2 * B, 1, 1)


def nan_padded(x: np.ndarray) -> np.ndarray:
    """x blocked with NaN in the lanes padding its last block: what a buffer holds there before a kernel
    that skips them writes it."""
    xb = blocked(x)
    xb[:, -1, ..., x.shape[1] % B:] = np.nan
    return xb


@pytest.mark.parametrize("kind", ["1x1", "1x1 prologue", "3x3 padded", "3x3 unpadded", "winograd 2", "winograd 4",
                                  "expand depthwise", "transpose"])
def test_blocked_reductions_skip_the_lanes_padding_the_inputs_last_block(kind):
    """Each blocked conv reduces over the input's real channels only (the weight's first K lanes): NaN in the
    lanes padding the input's last block never reaches the output, as 0 x NaN would (B + B / 2 channels: 24
    on AVX2 reduce over 24 steps, not 32)."""
    c, o, hw = B + B // 2, B + 3, (9, 10)
    kernel = (3, 3) if kind.startswith(("3x3", "winograd")) else (1, 1)
    x, w, bias = operands(2, c, o, hw, kernel, seed=len(kind))
    xb = nan_padded(x)
    stride, padding = (1, 1), ((1, 1, 1, 1) if kind in ("3x3 padded", "winograd 2", "winograd 4") else (0, 0, 0, 0))
    out_hw = out_size(hw, kernel, stride, padding, (1, 1))
    out = np.full((2, blocks(o), *out_hw, B), np.nan, np.float32)
    wt = read_only(pack_channel_panels(pad_to_blocks(w, B), B))
    assert wt.shape == (blocks(o), c * kernel[0] * kernel[1], B)
    codes = ACTIVATION_CODES["relu"], 0.0, 0.0, 0, 0.0, 0.0
    want = reference(x, w, bias, None, "relu", "none", stride, padding)
    if kind == "1x1":
        conv1x1_blocked(xb, wt, block_bias(bias, o), out[:0], out, stride, *codes, 0)
    elif kind == "1x1 prologue":
        rng = np.random.default_rng(1)
        scale, shift = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
        conv1x1_blocked_prologue(xb, read_only(pad_bias(scale, B)), read_only(pad_bias(shift, B)), 1, wt,
                                 block_bias(bias, o), out[:0], out, stride, *codes, 0)
        normed = np.maximum(x.astype(np.float64) * scale[None, :, None, None] + shift[None, :, None, None], 0)
        want = reference(normed, w, bias, None, "relu", "none", stride)
    elif kind.startswith("3x3"):
        conv2d_blocked(xb, wt, block_bias(bias, o), out[:0], out, kernel, stride, padding, (1, 1), *codes, 0, 0)
    elif kind.startswith("winograd"):
        winograd_blocked(xb, read_only(pack_winograd_blocked(w, B, int(kind[-1]))), block_bias(bias, o), out[:0], out,
                         1, 1, *codes)
    elif kind == "expand depthwise":
        rng = np.random.default_rng(2)
        wd = (rng.standard_normal((o, 1, 3, 3)) / 3).astype(np.float32)
        bd = rng.standard_normal(o).astype(np.float32)
        expand_depthwise_blocked(xb, wt, block_bias(bias, o), read_only(pack_depthwise_blocked(wd, B)),
                                 block_bias(bd, o), out[:0], out, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1),
                                 (ACTIVATION_CODES["relu"], 0.0, 0.0), *codes)
        want = depthwise_reference(want, wd, bd, None, "relu", "none", (1, 1), (1, 1, 1, 1), (1, 1))
    else:
        wtr = (w[:, :, :, :].transpose(1, 0, 2, 3).reshape(c, o, 1, 1) * np.ones((1, 1, 2, 2), np.float32))
        out = np.full((2, blocks(o), hw[0] * 2, hw[1] * 2, B), np.nan, np.float32)
        conv_transpose_blocked(xb, read_only(pack_transpose_blocked(wtr, B)), block_bias(bias, o), out, (2, 2))
        want = conv_transpose2d(x.astype(np.float64), wtr.astype(np.float64), bias.astype(np.float64), stride=(2, 2),
                                padding=(0, 0, 0, 0), output_padding=(0, 0), dilation=(1, 1), groups=1)
    tolerance = 1e-4 if kind == "winograd 4" else 2e-5
    np.testing.assert_allclose(unblocked(out, o), want, rtol=1e-4, atol=tolerance)


@numba.njit
def _pixel_taps(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, half):
    if half:
        micro_gemm_taps_pixel_half(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0)
    else:
        micro_gemm_taps_pixel(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0)


@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("kc", [0, 1, 2, 7, PACKED_K_CHUNK + 1])
def test_one_pixels_taps_sum_every_step_in_pairs_and_write_its_channels_only(kc, half):
    """micro_gemm_taps_pixel: steps in pairs into two sets of sums, an odd last one, none; the B (or B / 2)
    channels written, nothing beside them."""
    rng = np.random.default_rng(kc)
    a = rng.standard_normal(4000).astype(np.float32)
    rows = rng.integers(0, 2000, 300).astype(np.int64)
    pix = np.array([0, 17, 33, 1500], np.int64)
    b = rng.standard_normal(300 * B + 50).astype(np.float32)
    c = np.full(B + 10, np.nan, np.float32)
    _pixel_taps(kc, a, 5, pix, 2, rows, 3, b, 7, B, c, 2, half)
    lanes = B // 2 if half else B
    want = np.zeros(lanes)
    for p in range(kc):
        want += np.float64(a[5 + 33 + rows[3 + p]]) * b[7 + p * B:7 + p * B + lanes]
    np.testing.assert_allclose(c[2:2 + lanes], want, rtol=1e-5, atol=1e-5)
    assert np.isnan(c[:2]).all() and np.isnan(c[2 + lanes:]).all()


@pytest.mark.parametrize("kernel", [(1, 1), (3, 3)])
@pytest.mark.parametrize("hw", [(7, 7), (4, 5), (3, 5)])  # 49, 20, 15 pixels: 1, 2 and 3 past the whole groups
@pytest.mark.parametrize("c, o, out_channels", [(B + 3, 2 * B, 0), (PACKED_K_CHUNK + B // 2, 2 * B, 0),
                                                (B + 3, B + B // 2, B + B // 2),
                                                (PACKED_K_CHUNK + B // 2, B + B // 2, B + B // 2)])
def test_the_last_pixels_past_the_whole_groups_match_float64(kernel, hw, c, o, out_channels):
    """FEW_PIXELS or fewer pixels past an image's last whole group of MR run one at a time over the whole
    reduction (chunked or not), whole blocks and half ones; three as a group through scratch. With a residual,
    written over the residual itself."""
    assert FEW_PIXELS >= 2 and MR == 6
    x, w, bias = operands(2, c, o, hw, kernel, seed=21)
    padding = (1, 1, 1, 1) if kernel == (3, 3) else (0, 0, 0, 0)
    residual = np.random.default_rng(22).standard_normal((2, o, *hw)).astype(np.float32)
    out = blocked(residual)
    got = run(x, w, bias, out, "relu", "none", hw, padding=padding, out=out, out_channels=out_channels)
    expected = reference(x, w, bias, residual, "relu", "none", padding=padding)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel", [(1, 1), (3, 3)])
@pytest.mark.parametrize("n, hw", [(1, (5, 7)), (2, (14, 15))])
@pytest.mark.parametrize("c", [B + 3, PACKED_K_CHUNK + B // 2])
def test_a_last_block_half_filled_runs_half_wide_and_zeroes_its_other_lanes(kernel, n, hw, c):
    """Given the real output channels (B + B / 2), conv1x1_blocked and conv2d_blocked compute the last block's
    first half only and write zeros over its other lanes, where the whole block would have held the residual's
    padding (7 here): the real channels match float64 either way; the reductions of one chunk and of several."""
    o = B + B // 2
    x, w, bias = operands(n, c, o, hw, kernel, seed=c + kernel[0])
    padding = (1, 1, 1, 1) if kernel == (3, 3) else (0, 0, 0, 0)
    residual = np.random.default_rng(8).standard_normal((n, o, *hw)).astype(np.float32)
    want = reference(x, w, bias, residual, "relu", "none", padding=padding)
    for out_channels, fill in ((o, 0), (0, 7)):
        buffer = blocked(residual)
        buffer[:, -1, ..., B // 2:] = 7.0  # the residual's padding lanes, and the output's (res is out)
        got = run(x, w, bias, buffer, "relu", "none", hw, padding=padding, out=buffer, out_channels=out_channels)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
        assert np.all(buffer[:, -1, ..., B // 2:] == fill)


def test_output_channels_not_those_of_the_output_blocks_are_refused():
    x = np.zeros((1, 1, 4, 4, B), np.float32)
    wt = read_only(pack_channel_panels(np.zeros((2 * B, B, 1, 1), np.float32), B))
    out = np.zeros((1, 2, 4, 4, B), np.float32)
    for channels in (B, 2 * B + 1):
        with pytest.raises(ValueError, match="output channels"):
            conv1x1_blocked(x, wt, zero_bias(2 * B), out[:0], out, (1, 1), 0, 0.0, 0.0, 0, 0.0, 0.0, channels)


def test_a_blocked_conv_takes_a_weight_over_every_lane_of_the_input():
    """A weight packed over all of the input's lanes (zeros in the padding ones) gives the same output as one
    over its real channels; one of more lanes than the input has, or a whole block fewer, is refused."""
    c, o = B + B // 2, B
    x, w, bias = operands(1, c, o, (7, 6), (1, 1), seed=5)
    every = np.zeros((o, 2 * B, 1, 1), np.float32)
    every[:, :c] = w
    outs = []
    for packed in (pad_to_blocks(w, B), every):
        out = np.full((1, 1, 7, 6, B), np.nan, np.float32)
        conv1x1_blocked(blocked(x), read_only(pack_channel_panels(packed, B)), block_bias(bias, o), out[:0], out,
                        (1, 1), 0, 0.0, 0.0, 0, 0.0, 0.0, 0)
        outs.append(out)
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6)
    out = outs[0]
    for lanes in (2 * B + 1, B):
        wide = read_only(pack_channel_panels(np.zeros((o, lanes, 1, 1), np.float32), B))
        with pytest.raises(ValueError, match="mismatched shapes"):
            conv1x1_blocked(blocked(x), wide, block_bias(bias, o), out[:0], out, (1, 1), 0, 0.0, 0.0, 0, 0.0, 0.0, 0)


# (n, c, m, hw, kernel, stride, padding): MobileNetV2's 3x3 stride 1 and 2, EfficientNet's 5x5 stride 2,
# asymmetric padding, a long reduction (PACKED_K_CHUNK), channels that pad their last block, a plane
# large enough for tasks and bands
EXPAND_DEPTHWISE = [
    (1, B, 4 * B, (9, 13), (3, 3), (1, 1), (1, 1, 1, 1)),
    (2, B + B // 2, 6 * (B + B // 2), (14, 14), (3, 3), (2, 2), (1, 1, 1, 1)),
    (1, 2 * B, 3 * B, (11, 11), (5, 5), (2, 2), (2, 2, 2, 2)),
    (1, B, 2 * B, (14, 15), (3, 3), (2, 2), (0, 0, 1, 1)),
    (1, PACKED_K_CHUNK + B, 2 * B, (7, 7), (3, 3), (1, 1), (1, 1, 1, 1)),
    (2, B, 6 * B, (56, 56), (3, 3), (1, 1), (1, 1, 1, 1)),
]


@pytest.mark.parametrize("n, c, m, hw, kernel, stride, padding", EXPAND_DEPTHWISE)
@pytest.mark.parametrize("e_act, act, with_residual", [("clamp", "clamp", False), ("silu", "silu", False),
                                                        ("none", "none", True)])
def test_expansion_and_depthwise_in_one_kernel_match_float64(n, c, m, hw, kernel, stride, padding, e_act, act,
                                                             with_residual):
    """expand_depthwise_blocked against the float64 expansion (1x1 conv, bias, activation), then the depthwise
    conv; the expansion's padding rows and columns are zeros, as the depthwise conv reads them."""
    x, we, be = operands(n, c, m, hw, (1, 1), seed=c + m + kernel[0])
    rng = np.random.default_rng(m)
    wd = (rng.standard_normal((m, 1, *kernel)) / kernel[0]).astype(np.float32)
    bd = rng.standard_normal(m).astype(np.float32)
    out_hw = out_size(hw, kernel, stride, padding, (1, 1))
    residual = rng.standard_normal((n, m, *out_hw)).astype(np.float32) if with_residual else None
    out = np.full((n, blocks(m), *out_hw, B), np.nan, np.float32)
    acts = ACTIVATION_CODES[act], -0.5, 0.75, ACTIVATION_CODES["none"], 0.0, 0.0
    expand_depthwise_blocked(blocked(x), read_only(pack_channel_panels(pad_to_blocks(we, B), B)), block_bias(be, m),
                             read_only(pack_depthwise_blocked(wd, B)), block_bias(bd, m),
                             out[:0] if residual is None else blocked(residual), out, kernel, stride, padding, (1, 1),
                             (ACTIVATION_CODES[e_act], -0.5, 0.75), *acts)
    e = reference(x, we, be, None, e_act, "none")
    want = depthwise_reference(e, wd, bd, residual, act, "none", stride, padding, (1, 1))
    np.testing.assert_allclose(unblocked(out, m), want, rtol=1e-4, atol=2e-5)
    assert np.all(padding_lanes(out, m) == 0)


def test_expansion_and_depthwise_in_one_kernel_refuse_mismatched_operands():
    x = np.zeros((1, 1, 4, 4, B), np.float32)
    we, be = read_only(np.zeros((2, B, B), np.float32)), zero_bias(2 * B)
    wt, out = read_only(np.zeros((2, 9, B), np.float32)), np.zeros((1, 2, 4, 4, B), np.float32)
    with pytest.raises(ValueError, match="expand_depthwise_blocked"):
        expand_depthwise_blocked(x, we, be[:B], wt, be, out[:0], out, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1),
                                 (0, 0.0, 0.0), 0, 0.0, 0.0, 0, 0.0, 0.0)


# (kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor): UNet's 2x2, ResNet's 3x3 s2 p1,
# Inception's 3x3 s1 p1 average (pads counted or not), YOLOv5's SPPF 5x5 s1 p2, a ceil-mode overhang, a
# dilated max, a divisor override
POOLS = [
    ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, True, None),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, True, None),
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, False, None),
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, True, None),
    ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False, True, None),
    ((3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True, True, None),
    ((2, 3), (1, 2), (1, 1, 1, 1), (2, 1), False, True, None),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, False, 5),
]


@pytest.mark.parametrize("kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor", POOLS)
@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("n, c, hw", [(1, B + B // 2, (9, 11)), (2, 2 * B, (28, 28))])
def test_window_pools_on_the_blocked_layout_match_the_nchw_reference(kernel, stride, padding, dilation, ceil_mode,
                                                                   count_include_pad, divisor, is_max, n, c, hw):
    from ir.ops.pool import avg_pool2d, max_pool2d

    dilation = dilation if is_max else (1, 1)  # (average pools take none)
    x = np.random.default_rng(c + kernel[0]).standard_normal((n, c, *hw)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan  # a max propagates it, as torch's does
    common = {"kernel": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode}
    want = (max_pool2d(x, dilation=dilation, **common) if is_max else
            avg_pool2d(x, count_include_pad=count_include_pad, divisor_override=divisor, **common))
    out = np.full((n, blocks(c), *want.shape[2:], B), np.nan, np.float32)
    pool_blocked(blocked(x), out, kernel, stride, padding, dilation, is_max, count_include_pad, divisor or 0)
    np.testing.assert_allclose(unblocked(out, c), want, rtol=1e-6, atol=1e-6)
    assert np.isnan(unblocked(out, c)[0, 1]).any()
    assert np.all(padding_lanes(out, c) == 0)


def test_blocked_pools_refuse_an_output_blocked_otherwise():
    x = np.zeros((1, 2, 4, 4, B), np.float32)
    with pytest.raises(ValueError, match="pool_blocked"):
        pool_blocked(x, np.zeros((1, 1, 2, 2, B), np.float32), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), True, True, 0)


# (n, c, o, hw, stride): DenseNet's 1x1 convs after BatchNorm-ReLU on 56 x 56 (tasks of whole chunks) and on
# 14 x 14 and 7 x 7 (chunks cut smaller to make tasks), channels padding the last block, a strided one, one
# small enough for the calling thread
PROLOGUE_CONVS = [
    (1, 4 * B, 2 * B, (56, 56), (1, 1)),
    (1, 12 * B, 8 * B, (14, 14), (1, 1)),
    (2, 6 * B, 2 * B, (7, 7), (1, 1)),
    (2, 2 * B + 5, B + 3, (9, 11), (1, 1)),
    (1, 2 * B, B, (15, 13), (2, 2)),
    (1, B, B, (3, 2), (1, 1)),
]


@pytest.mark.parametrize("n, c, o, hw, stride", PROLOGUE_CONVS)
@pytest.mark.parametrize("in_act, act, with_residual", [("relu", "relu", False), ("none", "none", True)])
def test_a_1x1_conv_after_a_per_channel_affine_matches_float64(n, c, o, hw, stride, in_act, act, with_residual):
    """conv1x1_blocked_prologue: in_act(x * scale + shift) per input channel (a BatchNorm and ReLU before the
    conv), applied by each task to its chunk's pixels; scale and shift zero in the lanes padding x's blocks."""
    x, w, bias = operands(n, c, o, hw, (1, 1), seed=c + o)
    rng = np.random.default_rng(o)
    scale, shift = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    out_hw = out_size(hw, (1, 1), stride, (0, 0, 0, 0), (1, 1))
    residual = rng.standard_normal((n, o, *out_hw)).astype(np.float32) if with_residual else None
    out = np.full((n, blocks(o), *out_hw, B), np.nan, np.float32)
    conv1x1_blocked_prologue(blocked(x), read_only(pad_bias(scale, B)), read_only(pad_bias(shift, B)),
                             int(in_act == "relu"), read_only(pack_channel_panels(pad_to_blocks(w, B), B)),
                             block_bias(bias, o), out[:0] if residual is None else blocked(residual), out, stride,
                             ACTIVATION_CODES[act], 0.0, 0.0, 0, 0.0, 0.0, 0)
    normed = ACTS[in_act](x.astype(np.float64) * scale[None, :, None, None] + shift[None, :, None, None])
    want = reference(normed, w, bias, residual, act, "none", stride)
    np.testing.assert_allclose(unblocked(out, o), want, rtol=1e-4, atol=2e-5)
    assert np.all(padding_lanes(out, o) == 0)


def test_a_prologue_of_another_length_than_the_lanes_is_refused():
    x = np.zeros((1, 1, 4, 4, B), np.float32)
    out = np.zeros((1, 1, 4, 4, B), np.float32)
    with pytest.raises(ValueError, match="one value per lane"):
        conv1x1_blocked_prologue(x, read_only(np.ones(B - 1, np.float32)), zero_bias(B - 1), 1,
                                 read_only(np.zeros((1, B, B), np.float32)), zero_bias(B), out[:0], out, (1, 1),
                                 0, 0.0, 0.0, 0, 0.0, 0.0, 0)


# (n, c, o, hw, kernel, stride, padding, dilation): MobileNet's and EfficientNet's stem, AlexNet's 11x11 stride 4,
# a dilated stride-2 one padded on the bottom right only, ResNet's 7x7, YOLOv5's 6x6, a gray image, one too small
# for tasks
STEMS = [
    (1, 3, 32, (33, 31), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    (1, 3, B, (59, 63), (11, 11), (4, 4), (2, 2, 2, 2), (1, 1)),
    (2, 2, B + 3, (20, 17), (3, 3), (2, 2), (0, 0, 1, 1), (2, 1)),
    (2, 3, 2 * B + B // 2, (40, 40), (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    (1, 3, B, (26, 26), (6, 6), (2, 2), (2, 2, 2, 2), (1, 1)),
    (2, 1, B, (9, 9), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (2, 3, 2 * B, (64, 64), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),  # Inception's, unpadded: read in place
    (1, 3, B, (21, 25), (5, 3), (3, 2), (0, 0, 0, 0), (1, 2)),
]


@pytest.mark.parametrize("n, c, o, hw, kernel, stride, padding, dilation", STEMS)
@pytest.mark.parametrize("act, with_residual", [("silu", False), ("clamp", True)])
def test_a_stem_conv_from_an_nchw_input_matches_float64(n, c, o, hw, kernel, stride, padding, dilation, act,
                                                         with_residual):
    """conv2d_blocked_nchw: each channel's rows gathered as a plane, the reduction over the real channels only
    (the weight packed unpadded on its input side)."""
    x, w, bias = operands(n, c, o, hw, kernel, seed=c + o + kernel[0])
    out_hw = out_size(hw, kernel, stride, padding, dilation)
    residual = np.random.default_rng(o).standard_normal((n, o, *out_hw)).astype(np.float32) if with_residual else None
    out = np.full((n, blocks(o), *out_hw, B), np.nan, np.float32)
    conv2d_blocked_nchw(x, read_only(pack_channel_panels(w, B)), block_bias(bias, o),
                        out[:0] if residual is None else blocked(residual), out, kernel, stride, padding, dilation,
                        ACTIVATION_CODES[act], -0.5, 0.75, 0, 0.0, 0.0, 0)
    want = reference(x, w, bias, residual, act, "none", stride, padding, dilation)
    np.testing.assert_allclose(unblocked(out, o), want, rtol=1e-4, atol=2e-5)
    assert np.all(padding_lanes(out, o) == 0)
