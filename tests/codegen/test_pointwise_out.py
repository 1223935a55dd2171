"""1x1 convs written straight from the microkernel's registers through the one-pass epilogue
(conv_packed._pointwise_out, microkernel.micro_gemm_out): every split of pixels into whole panels
and a last partial one, channel blocks with and without padding channels, grouped convs, each
one-pass epilogue (bias or none, ReLU, clamp, a residual, a residual that is the output's own
buffer, a post ReLU), against float64 sums. Convs outside the path (long reductions, activations
of more than one pass) are checked beside it."""

import numba
import numpy as np
import pytest

from codegen.kernels.conv_packed import K_CHUNK, conv1x1_packed, tile_start
from codegen.kernels.epilogue import ACTIVATION_CODES
from codegen.kernels.microkernel import micro_gemm_out, pack_weights, panel_width
from tests.codegen.rules import read_only, zero_bias

NR = numba.njit(lambda: panel_width())()
ACTS = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0),
        "clamp": lambda v: np.clip(v, -0.5, 0.75), "silu": lambda v: v / (1 + np.exp(-v))}


def reference(x, w, bias, residual, act, post, groups):
    n, c, h, wd = x.shape
    o = w.shape[0]
    xg = x.astype(np.float64).reshape(n, groups, c // groups, h * wd)
    wg = w.astype(np.float64).reshape(groups, o // groups, c // groups)
    v = np.einsum("goc,ngcp->ngop", wg, xg).reshape(n, o, h, wd)
    if bias is not None:
        v += bias.astype(np.float64)[None, :, None, None]
    v = ACTS[act](v)
    if residual is not None:
        v += residual
    return ACTS[post](v)


def run(x, w, bias, residual, act, post, groups, out=None):
    n, _, h, wd = x.shape
    out = np.full((n, w.shape[0], h, wd), np.nan, np.float32) if out is None else out
    res = out[:0] if residual is None else residual  # a forward's arguments: an empty view, read-only weights
    bias = read_only(bias) if bias is not None else zero_bias(w.shape[0])  # a forward's: zeros for none
    conv1x1_packed(x, read_only(pack_weights(w, groups)), bias, res, out, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1),
                   ACTIVATION_CODES[act], -0.5, 0.75, ACTIVATION_CODES[post], 0.0, 0.0, None)
    return out


def run_on_two_threads(x, w, bias, residual, act):
    """run() with numba on two threads (as many as it has, if fewer), its thread count back after."""
    threads = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        return run(x, w, bias, residual, act, "none", 1)
    finally:
        numba.set_num_threads(threads)


def operands(n, c, o, hw, groups, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *hw)).astype(np.float32)
    w = (rng.standard_normal((o, c // groups, 1, 1)) / np.sqrt(c // groups)).astype(np.float32)
    return x, w, rng.standard_normal(o).astype(np.float32), rng.standard_normal((n, o, *hw)).astype(np.float32)


# (n, c, o, (h, w), groups): pixels in whole panels, whole panels and a half one, a partial half one,
# under one panel; 12 channels (one pair), 18 (a pair and a single), 20 (padding channels), groups
SHAPES = [
    (1, 16, 24, (8, 2 * NR // 8), 1),
    (1, 8, 36, (3, NR + NR // 2), 1),
    (2, 24, 18, (7, 9), 1),
    (1, 5, 20, (5, 5), 1),
    (1, 12, 24, (4, 4), 2),
    (3, 64, 30, (9, 11), 1),
    (1, K_CHUNK, 12, (6, 7), 1),
]


@pytest.mark.parametrize("n, c, o, hw, groups", SHAPES)
@pytest.mark.parametrize("act, post", [("none", "none"), ("relu", "none"), ("clamp", "none"), ("none", "relu")])
@pytest.mark.parametrize("with_bias, with_residual", [(True, False), (False, True), (True, True)])
def test_pointwise_conv_out_of_the_registers_matches_float64(n, c, o, hw, groups, act, post, with_bias,
                                                            with_residual):
    x, w, bias, residual = operands(n, c, o, hw, groups, seed=c * o + hw[1])
    bias, residual = bias if with_bias else None, residual if with_residual else None
    got = run(x, w, bias, residual, act, post, groups)
    np.testing.assert_allclose(got, reference(x, w, bias, residual, act, post, groups), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n, c, o, hw, groups", SHAPES[:4])
@pytest.mark.parametrize("post", ["none", "relu"])
def test_pointwise_conv_writes_over_its_own_residual(n, c, o, hw, groups, post):
    x, w, bias, residual = operands(n, c, o, hw, groups, seed=7)
    expected = reference(x, w, bias, residual, "relu", post, groups)
    buffer = residual.copy()  # the memory plan gives the output its residual's buffer
    run(x, w, bias, buffer, "relu", post, groups, out=buffer)
    np.testing.assert_allclose(buffer, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c, act", [(K_CHUNK + 40, "relu"), (40, "silu"), (3 * K_CHUNK, "none")])
def test_pointwise_convs_off_the_direct_path_still_match(c, act):
    x, w, bias, residual = operands(2, c, 20, (5, 9), 1, seed=c)
    got = run(x, w, bias, residual, act, "none", 1)
    np.testing.assert_allclose(got, reference(x, w, bias, residual, act, "none", 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c, o, hw, act, with_residual", [
    (384, 64, (14, 14), "relu", True),  # two reduction chunks, a block of sums: tiles of 96 and 100 pixels
    (144, 32, (12, 15), "clamp", True),  # one chunk, straight out of the registers, a partial last tile
    (200, 80, (11, 13), "silu", False),  # the late activation over each tile's runs
    (96, 24, (16, 9), "none", False),
])
def test_a_reducing_pointwise_conv_on_one_image_cuts_its_pixels_between_threads(c, o, hw, act, with_residual):
    """A 1x1 conv that reads more channels than it writes, at batch 1 on two threads, gives each thread a
    tile of the image's pixels (conv_packed.CUT_MIN_PIXELS) rather than a block of its channels."""
    x, w, bias, residual = operands(1, c, o, hw, 1, seed=c + o)
    residual = residual if with_residual else None
    got = run_on_two_threads(x, w, bias, residual, act)
    np.testing.assert_allclose(got, reference(x, w, bias, residual, act, "none", 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pixels", [1, NR // 2 - 1, NR // 2, NR + 3, 2 * NR, 196, 12 * NR + NR // 2 + 5, 3136])
@pytest.mark.parametrize("n_p", [1, 2, 3, 8])
def test_1x1_tiles_share_whole_half_panels_evenly(pixels, n_p):
    """conv_packed.tile_start: the tiles cover the pixels in order, every start on a half panel, the tiles'
    whole half panels differing by one at most, and only the last tile's end off a half panel."""
    half = NR // 2
    n_p = max(1, min(n_p, pixels // half))  # (as conv1x1_packed asks)
    starts = [tile_start(i, n_p, pixels) for i in range(n_p + 1)]
    assert starts[0] == 0 and starts[-1] == pixels and starts == sorted(starts)
    assert all(s % half == 0 for s in starts[:-1])
    units = [(b - a) // half for a, b in zip(starts, starts[1:])]
    assert max(units) - min(units) <= 1 and all(b > a for a, b in zip(starts, starts[1:]))


@pytest.mark.parametrize("hw", [(14, 14), (3, 11), (5, 7), (1, 3 * NR + 1), (2, NR // 2 + 3)])
@pytest.mark.parametrize("c, o, act", [(96, 24, "relu"), (K_CHUNK + 8, 18, "none"), (40, 30, "silu")])
@pytest.mark.parametrize("n", [1, 3])
def test_a_last_partial_half_panel_is_copied_alone(hw, c, o, act, n):
    """Each tile's pixels read in place but the last tile's partial half panel (copied into the task's
    scratch with zeros past it): one chunk straight out of the registers, two chunks through a block, a
    late activation; at batch 1 on two threads the pixels cut between them, at batch 3 whole images. The
    input's pitch is its plane: a tail read in place past the plane would read the next channel's pixels."""
    x, w, bias, residual = operands(n, c, o, hw, 1, seed=c + hw[1])
    got = run_on_two_threads(x, w, bias, residual, act)
    np.testing.assert_allclose(got, reference(x, w, bias, residual, act, "none", 1), rtol=1e-4, atol=1e-4)


@numba.njit
def _one_block(k, a, b, c, bias, lo, hi, top, res):
    micro_gemm_out(k, a, 0, b, 0, NR, c, 3, NR + 5, bias, 2, lo, hi, top, res)


def test_micro_gemm_out_writes_its_block_alone_and_keeps_nan():
    """The block at c0 = 3 with rows NR + 5 apart: nothing around it written; a NaN sum stays NaN
    through the clamp (epilogue_run's max and min keep a NaN first argument)."""
    k, mr = 5, 6
    rng = np.random.default_rng(0)
    a = rng.standard_normal(k * mr).astype(np.float32)  # [k][MR]
    b = rng.standard_normal(k * NR).astype(np.float32)
    b[2] = np.nan  # column 2 of every row
    bias = rng.standard_normal(10).astype(np.float32)
    ldc = NR + 5
    c = np.full(3 + mr * ldc + 4, 7.0, np.float32)
    res = rng.standard_normal(c.size).astype(np.float32)
    _one_block(k, a, b, c, bias, np.float32(-0.5), np.float32(0.75), np.float32(0.0), res)
    sums = a.reshape(k, mr).T.astype(np.float64) @ b.reshape(k, NR) + bias[2:2 + mr, None]
    expected = np.maximum(np.clip(sums, -0.5, 0.75) + res[3:3 + mr * ldc].reshape(mr, ldc)[:, :NR], 0.0)
    block = c[3:3 + mr * ldc].reshape(mr, ldc)
    np.testing.assert_allclose(block[:, :NR], expected, rtol=1e-5, atol=1e-6)
    assert np.isnan(block[:, 2]).all()
    assert (block[:, NR:] == 7.0).all() and (c[:3] == 7.0).all() and (c[3 + mr * ldc:] == 7.0).all()


@pytest.mark.parametrize("kernel, stride, padding, out_hw", [
    ((1, 1), (1, 1), (0, 0, 0, 0), (5, 5)),  # an output not the input's size
    ((1, 1), (2, 2), (0, 0, 0, 0), (3, 3)),  # strided
    ((1, 1), (1, 1), (1, 1, 1, 1), (8, 8)),  # padded
])
def test_conv1x1_packed_refuses_a_conv_that_is_not_pointwise(kernel, stride, padding, out_hw):
    """conv1x1_packed reads each output pixel's input at that pixel: a conv with a stride, padding or an
    output of another size is not its conv (the emit rule sends those to conv2d_packed), and raises
    rather than read past its input."""
    x, w, bias, _ = operands(1, 8, 12, (6, 6), 1, seed=3)
    out = np.zeros((1, 12, *out_hw), np.float32)
    with pytest.raises(ValueError, match="not 1x1 at stride 1"):
        conv1x1_packed(x, read_only(pack_weights(w, 1)), read_only(bias), out[:0], out, kernel, stride, padding,
                       (1, 1), 0, 0.0, 0.0, 0, 0.0, 0.0, None)
