"""Depthwise convolution (groups == input channels, MobileNet's 3x3 blocks): direct loops, in four
ways (the channel blocks, the register rows, the flat path and the row blocks, below), each a kernel of
its own (conv_depthwise_*), which the emit rule picks by the shapes (depthwise_path).

Float32 convs with kernel height 3, 5 or 7, equal strides 1 or 2 and no row dilation take the
register-row path of depthwise_rows.py (except 7 x 7 output planes with smaller kernels, below),
unless the channel blocks below take them first (small planes; on AVX2 planes up to 90 x 90).
The paths here serve the others and float64.

Output channel o reads input channel o // (O / C) only, so there is no GEMM to hand to
BLAS. The work is cut into tasks of one (image, channel, block of output rows), shared
out over the threads; each thread has one scratch, and for each task it
  1. copies the input rows of its block into the scratch, zero-padded and split into
     stride_h * stride_w phase planes (planes.py): plane (a, b) holds the padded input's rows
     a, a + sh, ... and columns b, b + sw, ... Every tap (i, j) of output pixel (y, x)
     then reads plane (i*dh % sh, j*dw % sw) at row y + i*dh // sh, column x + j*dw // sw:
     at a fixed offset from the pixel's own flat index y * WQ + x in the planes' row pitch
     WQ, whatever the stride, dilation or padding;
  2. sums the taps in one flat loop over those flat indices, all output rows of the block
     at once (the WQ - OW columns past each row's end are computed and thrown away): no
     bounds logic, long enough for LLVM to vectorise even 7-wide rows. A 3x3 kernel keeps
     its 9 weights and offsets in registers and sums each pixel's taps at once, a Kx5
     kernel one row of taps at a time; other kernels add one tap at a time;
  3. applies the epilogue (bias, activation) to the whole block at once, a whole number
     of vectors, and copies the rows out (a residual, rare here, is added row by row).
The blocks are sized so the scratch stays in L1.

A stride-1 conv whose output plane is its input's size, up to FLAT_PIXELS (MobileNets' and
EfficientNets' 7 x 7 and 14 x 14 stages), skips the scratch altogether: each vector of output
pixels sums its taps loaded straight from the input plane, each load masked to the lanes whose tap
lies inside the image (_plane_taps, LLVM IR; the masks are computed once per call). 960 channels
on 7 x 7: 49 -> 30 us; 672 channels, 5x5 on 14 x 14: 189 -> 150 us (AVX-512 EPYC, 2 threads).
Other convs on small output planes whose rows are at least as long as the input's phase rows
(ow * sw >= w: stride 2 with "same" padding) take the same loop over the input split into
unpadded phase planes of the output's pitch (gather_planes): 576 channels 3x3 stride 2 from
14 x 14: 57 -> 39 us; 240 channels 5x5 stride 2 from 28 x 28: 115 -> 73 us.
Float32 only; float64 takes the paths below.

The other small output planes (at most CHANNEL_BLOCK_PIXELS, CHANNEL_BLOCK_PIXELS_3X3 for 3x3
kernels: float64, or inputs wider than the output's phase rows, as with no padding) have rows too
short for the row blocks below: there a task
takes CB channels at once (CB = vector_floats(): one register), lays their padded planes out
channel-minor (each input row of the CB channels one vector transpose, vectors.transpose_vector),
and sums the taps of PIXEL_GROUP output pixels at once across the CB channels in vector registers
(`_pixel_taps`, LLVM IR): 2-3x faster on EfficientNet-B0's 7 x 7 and 14 x 14 layers (AMD EPYC,
AVX2). They come before any other path (channel_blocks_first) on AVX2 (8-float vectors) for padded
input planes up to 8192 pixels (16384 strided: AVX2_LARGE_BLOCK_FLOATS), and on AVX-512 for strided
convs on padded input planes under 4096 pixels (WIDE_STRIDED_BLOCK_FLOATS: 56 x 56 inputs and less), or output
planes up to 8 x 8, and others up to 4 x 4, or 8 x 8 for kernels over 3x3 (STRIDED_BLOCK_PIXELS,
BLOCK_FIRST_PIXELS, LARGE_KERNEL_BLOCK_FIRST_PIXELS): the
phase planes' split of every input row cost more than the taps (576 channels 3x3 stride 2 from
14 x 14 at batch 8: 196 -> 107 us, AVX-512 EPYC), and on AVX2 the register rows' masked loads did.
A transpose of a whole block (a vector of channels by a vector of columns or pixels) takes plain
loads and stores, so the last chunk of a row overlaps the one before rather than being partial:
AVX2's masked stores are microcoded on AMD's Zen, and with masked transposes one conv's time varied
3-8x from call to call and with where its input lay (masked loads whose unread lanes cross a page,
presumably; not isolated). With whole blocks that spread is gone (Zen 3 EPYC).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

from codegen.kernels.common import SEQ, aligned_empty, aligned_zeros, blocks, num_threads, u
from codegen.kernels.depthwise_rows import EPILOGUE_FLOATS, depthwise_rows, takes_register_rows
from codegen.kernels.epilogue import ONE_PASS, epilogue_run, one_pass_bounds, residual_run
from codegen.kernels.planes import gather_planes, plane_pitch, tap_offset
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vectors import (
    clamp_run,
    copy_run,
    fma_intrinsic,
    fma_sums,
    store_lanes,
    transpose_vector,
    vector_floats,
    vector_loop,
    vector_width,
)

# a*b + c may compile to one fused multiply-add (the only fast-math flag: no reassociation)
FMA = {**SEQ, "fastmath": {"contract"}}
SCRATCH_FLOATS = 6144  # phase planes plus sums of one block: 24 KiB in float32, within L1
MIN_ROWS = 4  # output rows per block, at least, when cutting rows only to share out the work
VEC = 16  # the flat loop runs a whole number of float32 vectors (AVX-512: 16, AVX2: 2 x 8): no scalar tail
# output pixels of the small-plane path summed at once, in independent registers: 8, each tap 8 FMAs,
# as many as the FMA latency lets start, or 4 on rows of 4 or fewer (AVX-512 EPYC, batch 8, groups of
# 4 -> 8: 576 channels 3x3 stride 2 to 7 x 7 112 -> 104 us, 240 channels 5x5 69 -> 62; to 4 x 4, 96
# channels 5x5, 12.5 -> 14.5, hence the short rows' groups)
PIXEL_GROUP = 8
SHORT_ROW_GROUP = 4
CHANNEL_BLOCK_PIXELS = 256  # output planes up to 16 x 16 take it for kernels over 3x3 (at 28 x 28 the row blocks win)
CHANNEL_BLOCK_PIXELS_3X3 = 64  # and up to 8 x 8 for 3x3: at 14 x 14 the row blocks are 10-30% faster (AVX-512 EPYC)
CHANNEL_BLOCK_FLOATS = 1 << 14  # and CB padded input planes fit in 64 KiB (float32)
# output planes up to this size take the channel blocks before any other path: strided convs' (each
# input row one transpose instead of a split into phase planes; AVX-512 EPYC, 2 threads, batch 8:
# 576 channels 3x3 stride 2 from 14 x 14 196 -> 107 us, 96 channels 5x5 from 8 x 8 39 -> 12; at 28 ->
# 14 level or worse, 144 channels 3x3 107 -> 100 at batch 8, 11.3 -> 12.5 us at 1), others' (120
# channels 5x5 on 4 x 4 25 -> 14 us; on 8 x 8, 3x3 14 -> 20 at batch 8 and 7 x 7 3x3 88 -> 121)
STRIDED_BLOCK_PIXELS = 64
BLOCK_FIRST_PIXELS = 16
# ... and up to 8 x 8 for kernels larger than 3x3, whose taps outweigh the transposes: one layer alone, Intel
# Xeon (AVX-512), flat -> channel blocks, us: 960 channels 5x5 on 7 x 7 (MobileNetV3-L's) 49.8 -> 36.4 on 2
# threads, 80.5 -> 66.2 on one, batch 8 312 -> 285; 1152 (EfficientNet-B0's) 56.1 -> 48.4; 240 on 8 x 8 21.5 ->
# 14.8. 3x3 stays flat there (1152 on 7 x 7 27.9 against 30.6), and at 14 x 14 the register rows win (672
# channels 5x5 49 against 70)
LARGE_KERNEL_BLOCK_FIRST_PIXELS = 64
# and strided convs whose CB padded input planes hold up to this many floats (64 x 64 pixels of 16 channels:
# the 56 x 56, 28 x 28 and 14 x 14 inputs of MobileNets' and EfficientNets' stride-2 layers), before the
# register rows, whose stride-2 taps are two masked loads and shuffles a vector. One layer alone, 2 threads,
# Intel Xeon (AVX-512), register rows -> channel blocks, us: 144 channels 3x3 stride 2 from 56 x 56 146 ->
# 86 (batch 8 1215 -> 613), 192 from 28 x 28 55 -> 23 (635 -> 252), 256 from 28 x 28 76 -> 39, 144 5x5 from
# 56 x 56 135 -> 120 (1089 -> 849), 240 5x5 from 28 x 28 80 -> 55 (631 -> 423), 72 3x3 from 56 x 56 52 -> 51
# (487 -> 333). From 64 x 64 up the register rows or the row blocks win (96 from 112 x 112: 197 against 258,
# 64 from 80 x 80 79 against 99, 128 from 64 x 64 128 against 110 but row blocks 82)
WIDE_STRIDED_BLOCK_FLOATS = 1 << 16
# where a vector holds fewer floats than this (AVX2), every plane up to a size (below) takes them first.
# On padded input planes up to 2048 pixels, Zen 3 EPYC, 2 threads, in-process medians, register rows ->
# channel blocks: 72 channels 3x3 stride 2 from 14 x 14 at batch 8 78 -> 37 us; 576 from 14 x 14 at batch 1
# 75 -> 37; 384 channels 3x3 on 14 x 14 71 -> 51 (batch 1), 646 -> 453 (batch 8); 672 5x5 on 14 x 14
# 217 -> 137; 240 5x5 stride 2 from 28 x 28 at batch 8 1048 -> 459; 144 3x3 on 28 x 28 89 -> 69; 384 7x7 on
# 14 x 14 191 -> 136; 960 3x3 on 7 x 7 level (80 / 78); 32 3x3 on 16 x 16 at batch 8 level (48 / 51)
AVX2_BLOCK_FIRST = 16
# Larger planes take them first on AVX2 too: padded planes up to AVX2_LARGE_BLOCK_FLOATS / 8 = 8192 pixels
# (56 x 56 and 80 x 80 images), and for strided convs up to AVX2_STRIDED_BLOCK_FLOATS / 8 = 16384 (112 x 112),
# whose other path on AVX2 is the row blocks' phase planes. Register rows (or row blocks) -> channel blocks,
# in-process medians, Zen 3 EPYC, 2 threads: 144 channels 3x3 on 56 x 56 at batch 1 271 -> 273 us (level),
# batch 2 555 -> 489, batch 8 3.3 -> 2.2 ms; stride 2 from 56 x 56 190 -> 146 us, batch 8 1.65 -> 0.99 ms;
# 144 5x5 stride 2 from 56 x 56 224 -> 147 us, batch 8 2.46 -> 1.61 ms; 96 7x7 on 56 x 56 568 -> 412 us,
# batch 8 6.1 -> 3.8 ms; 64 3x3 on 80 x 80 254 -> 215 us; 96 stride 2 from 112 x 112 at batch 2 1035 -> 738
# us, batch 8 4.6 -> 4.3 ms (batch 1 level, 237-324 against 266-295). Level or slower: 96 3x3 on 96 x 96
# (511 / 498 us), 32 on 64 x 64 (79 / 86 us; batch 8 800 -> 732), and 32 on 112 x 112 at batch 1 and 2
# (398 -> 443 us at batch 2), where a vector of channels' planes and sums overflow L2. In the models (profile
# steps, alternating processes): MobileNetV2 at batch 1, depthwise steps 2.85-3.32 -> 1.97-2.61 ms (144 stride 2
# from 56 x 56: 0.22-0.26 -> 0.12 ms); EfficientNet-B0's 144 5x5 stride 2 from 56 x 56 0.29-0.37 -> 0.18-0.26 ms
AVX2_LARGE_BLOCK_FLOATS = 1 << 16
# Past those planes, stride-1 convs take the row blocks on AVX2, not the register rows (whose other taker
# there is stride 2 on rows narrower than AVX2_STRIDE2_WIDTH): register rows -> row blocks, one layer alone,
# 2 threads, alternating, min / median us, Zen 3 EPYC: 32 channels 3x3 on 112 x 112 250 / 298 -> 223 / 279,
# batch 2 518 / 557 -> 388 / 428; 96 3x3 on 96 x 96 558 / 595 -> 460 / 482; 16 3x3 on 224 x 224 435 / 590 ->
# 392 / 426; 64 5x5 on 128 x 128 2006 / 2248 -> 1023 / 1159; 144 5x5 on 112 x 112 3201 / 3437 -> 1742 / 2349.
# In MobileNetV2 (profile steps, alternating processes) its 32-channel 112 x 112 layer: batch 1 0.33-0.37 ->
# 0.29 ms, batch 8 2.6-3.0 -> 2.4-2.6 ms.
AVX2_STRIDED_BLOCK_FLOATS = 1 << 17
PLANE_UNROLL = 4  # vectors of output pixels _plane_taps sums at once, in independent registers
FLAT_PIXELS = 256  # stride-1 "same" convs up to 16 x 16 read their taps straight from the input (_plane_taps)


@numba.njit(**FMA)
def _sum3x3(p, wf, k0, acc, n, sh, sw, dh, dw, hq, wq):
    """acc[q] = the sum of the 9 taps of flat pixel q, for q < n; kernel at wf[k0]."""
    w00, w01, w02 = wf[k0], wf[k0 + 1], wf[k0 + 2]
    w10, w11, w12 = wf[k0 + 3], wf[k0 + 4], wf[k0 + 5]
    w20, w21, w22 = wf[k0 + 6], wf[k0 + 7], wf[k0 + 8]
    o00, o01, o02 = (tap_offset(0, 0, sh, sw, dh, dw, hq, wq), tap_offset(0, 1, sh, sw, dh, dw, hq, wq),
                     tap_offset(0, 2, sh, sw, dh, dw, hq, wq))
    o10, o11, o12 = (tap_offset(1, 0, sh, sw, dh, dw, hq, wq), tap_offset(1, 1, sh, sw, dh, dw, hq, wq),
                     tap_offset(1, 2, sh, sw, dh, dw, hq, wq))
    o20, o21, o22 = (tap_offset(2, 0, sh, sw, dh, dw, hq, wq), tap_offset(2, 1, sh, sw, dh, dw, hq, wq),
                     tap_offset(2, 2, sh, sw, dh, dw, hq, wq))
    for q in range(n):
        acc[u(q)] = ((w00 * p[u(q + o00)] + w01 * p[u(q + o01)] + w02 * p[u(q + o02)])
                     + (w10 * p[u(q + o10)] + w11 * p[u(q + o11)] + w12 * p[u(q + o12)])
                     + (w20 * p[u(q + o20)] + w21 * p[u(q + o21)] + w22 * p[u(q + o22)]))


@numba.njit(**FMA)
def _sum_rows5(p, wf, k0, kh, acc, n, sh, sw, dh, dw, hq, wq):
    """_sum3x3 for a KH x 5 kernel (EfficientNet's 5x5): one pass per kernel row, its 5 weights
    and offsets in registers."""
    for i in range(kh):
        k = k0 + 5 * i
        w0, w1, w2, w3, w4 = wf[k], wf[k + 1], wf[k + 2], wf[k + 3], wf[k + 4]
        o0, o1, o2 = (tap_offset(i, 0, sh, sw, dh, dw, hq, wq), tap_offset(i, 1, sh, sw, dh, dw, hq, wq),
                      tap_offset(i, 2, sh, sw, dh, dw, hq, wq))
        o3, o4 = tap_offset(i, 3, sh, sw, dh, dw, hq, wq), tap_offset(i, 4, sh, sw, dh, dw, hq, wq)
        if i == 0:
            for q in range(n):
                acc[u(q)] = ((w0 * p[u(q + o0)] + w1 * p[u(q + o1)]) + (w2 * p[u(q + o2)] + w3 * p[u(q + o3)])
                             + w4 * p[u(q + o4)])
        else:
            for q in range(n):
                acc[u(q)] += ((w0 * p[u(q + o0)] + w1 * p[u(q + o1)]) + (w2 * p[u(q + o2)] + w3 * p[u(q + o3)])
                              + w4 * p[u(q + o4)])


@numba.njit(**FMA)
def _sum_taps(p, wf, k0, kh, kw, acc, n, sh, sw, dh, dw, hq, wq):
    """_sum3x3 for any kernel size, one tap at a time into acc."""
    for q in range(n):
        acc[u(q)] = 0
    for i in range(kh):
        for j in range(kw):
            wv, o = wf[k0 + i * kw + j], tap_offset(i, j, sh, sw, dh, dw, hq, wq)
            for q in range(n):
                acc[u(q)] += wv * p[u(q + o)]


# -- the ways a depthwise conv runs: each a kernel of its own, which the emit rule picks by the shapes
# (depthwise_path), so that a model compiles only the ways its convs take (one kernel branching at run
# time compiled all four, and the generic conv2d around it im2col and BLAS too)

CHANNEL_BLOCKS, REGISTER_ROWS, FLAT, ROW_BLOCKS = "channel_blocks", "register_rows", "flat", "row_blocks"


def depthwise_path(dtype: str, x_shape, weight_shape, out_shape, stride, padding, dilation, lanes: int) -> str:
    """How a depthwise conv (groups == C; padding (top, left, ...) zeros) of `dtype` runs where vectors
    hold `lanes` floats (target_vector_floats()), in this order (see the module docstring):
    CHANNEL_BLOCKS first where channel_blocks_first says so; float32 kernels the register rows take
    (depthwise_rows.takes_register_rows), but for stride 1 on AVX2 (see AVX2_LARGE_BLOCK_FLOATS); float32
    small output planes whose rows are as long as a phase plane's (FLAT, _plane_taps), up to FLAT_PIXELS for
    stride-1 "same" convs; the other small planes in CHANNEL_BLOCKS where a vector of channels' padded planes
    fit in CHANNEL_BLOCK_FLOATS; else ROW_BLOCKS."""
    (_, _, h, w), (_, _, kh, kw), (oh, ow) = x_shape, weight_shape, out_shape[2:]
    (sh, sw), (dh, dw) = stride, dilation
    hp, wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1  # the padded input the windows read
    if channel_blocks_first.py_func(lanes, hp, wp, oh, ow, sh * sw > 1, kh * kw):
        return CHANNEL_BLOCKS
    float32 = dtype == "float32"
    if float32 and takes_register_rows.py_func(kh, kw, sh, sw, dh, ow, w, lanes) and not (
            lanes < AVX2_BLOCK_FIRST and sh == 1 and sw == 1):  # see AVX2_LARGE_BLOCK_FLOATS
        return REGISTER_ROWS
    small = CHANNEL_BLOCK_PIXELS if kh * kw > 9 else CHANNEL_BLOCK_PIXELS_3X3
    same = sh == 1 and sw == 1 and oh == h and ow == w
    if float32 and oh * ow <= (FLAT_PIXELS if same else small) and ow * sw >= w:
        return FLAT
    if oh * ow <= small and hp * wp * lanes <= CHANNEL_BLOCK_FLOATS:
        return CHANNEL_BLOCKS
    return ROW_BLOCKS


@numba.njit(**SEQ)
def channel_blocks_first(lanes, hp, wp, oh, ow, strided, taps):
    """Whether a conv whose vectors hold `lanes` floats, on padded input planes hp x wp and output planes
    oh x ow, with a kernel of `taps` taps, takes the channel blocks before any other path: on AVX2 (lanes <
    AVX2_BLOCK_FIRST) planes up to AVX2_LARGE_BLOCK_FLOATS (AVX2_STRIDED_BLOCK_FLOATS strided), on AVX-512
    strided convs on planes below WIDE_STRIDED_BLOCK_FLOATS and small output planes (STRIDED_BLOCK_PIXELS,
    BLOCK_FIRST_PIXELS, LARGE_KERNEL_BLOCK_FIRST_PIXELS past 9 taps) whose blocks fit in CHANNEL_BLOCK_FLOATS."""
    if lanes < AVX2_BLOCK_FIRST:
        return hp * wp * lanes <= (AVX2_STRIDED_BLOCK_FLOATS if strided else AVX2_LARGE_BLOCK_FLOATS)
    if strided and hp * wp * lanes < WIDE_STRIDED_BLOCK_FLOATS:
        return True
    most = STRIDED_BLOCK_PIXELS if strided else (LARGE_KERNEL_BLOCK_FIRST_PIXELS if taps > 9 else BLOCK_FIRST_PIXELS)
    return hp * wp * lanes <= CHANNEL_BLOCK_FLOATS and oh * ow <= most


@numba.njit(inline="always", **SEQ)
def _operands(x, weight, residual, out, sh, sw, pt, pl, dh, dw, act, alpha, beta, post):
    """What every depthwise kernel computes first: the arrays flat (the residual as residual_run's), the
    dims and window tuples, and whether the epilogue is a clamp applied as the rows are written (ReLU6,
    relu: no post-activation nor residual), with its bounds in the output's dtype."""
    n_n, c_n, h, w = x.shape
    o_n, _, kh, kw = weight.shape
    oh, ow = out.shape[2], out.shape[3]
    typed = out.dtype.type
    rf = residual_run(residual, out)
    bounds = one_pass_bounds(act, alpha, beta, 0)
    return (x.reshape(-1), weight.reshape(-1), out.reshape(-1), rf, (n_n, c_n, h, w, o_n, oh, ow, o_n // c_n, kh, kw),
            (sh, sw, pt, pl, dh, dw), act <= ONE_PASS and post == 0 and rf.size == 0, typed(bounds[0]),
            typed(bounds[1]))


@numba.njit(**SEQ)
def conv_depthwise_channel_blocks(x, weight, bias, residual, out, sh, sw, pt, pl, dh, dw,
                                  act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, weight, groups=C) + bias) + residual) in blocks of a vector of channels
    (_channel_blocks); every depthwise kernel takes these arguments (bias may be None, residual empty for
    none) and runs any depthwise conv its dtype allows, best those depthwise_path sends it."""
    xf, wf, of, rf, dims, window, _, _, _ = _operands(x, weight, residual, out, sh, sw, pt, pl, dh, dw, act, alpha,
                                                      beta, post)
    _, _, _, _, o_n, oh, ow, _, kh, kw = dims
    hp, wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    threads = min(num_threads(), x.shape[0] * -(-o_n // vector_floats()))
    run_tasks(_channel_blocks, threads, (threads, xf, wf, of, rf, bias, dims, window, (hp, wp), (act, post),
                                         (alpha, beta, post_alpha, post_beta)))


@numba.njit(**SEQ)
def conv_depthwise_register_rows(x, weight, bias, residual, out, sh, sw, pt, pl, dh, dw,
                                 act, alpha, beta, post, post_alpha, post_beta):
    """The register rows (depthwise_rows.py): float32 convs that takes_register_rows; others raise ValueError."""
    xf, wf, of, rf, dims, window, clamp, vmin, vmax = _operands(x, weight, residual, out, sh, sw, pt, pl, dh, dw,
                                                                act, alpha, beta, post)
    if not depthwise_rows(x, xf, wf, of, rf, bias, dims, window, clamp, vmin if clamp else -np.inf,
                          vmax if clamp else np.inf, (act, post), (alpha, beta, post_alpha, post_beta)):
        raise ValueError("conv_depthwise_register_rows: no register rows for this conv")


@numba.njit(**SEQ)
def conv_depthwise_flat(x, weight, bias, residual, out, sh, sw, pt, pl, dh, dw,
                        act, alpha, beta, post, post_alpha, post_beta):
    """The flat path (_flat_share, _plane_taps): float32 convs whose output rows are at least as long as
    the input's phase rows (ow * sw >= w); others raise ValueError."""
    xf, wf, of, rf, dims, window, clamp, vmin, vmax = _operands(x, weight, residual, out, sh, sw, pt, pl, dh, dw,
                                                                act, alpha, beta, post)
    if not (out.shape[3] * sw >= x.shape[3] and _flat_path(x, xf, wf, of, rf, bias, dims, window, clamp, vmin, vmax,
                                                           (act, post), (alpha, beta, post_alpha, post_beta))):
        raise ValueError("conv_depthwise_flat: no flat path for this conv")


@numba.njit(**SEQ)
def conv_depthwise_row_blocks(x, weight, bias, residual, out, sh, sw, pt, pl, dh, dw,
                              act, alpha, beta, post, post_alpha, post_beta):
    """Blocks of output rows of one (image, channel) a task, from phase planes in scratch (_depthwise_share)."""
    xf, wf, of, rf, dims, window, clamp, vmin, vmax = _operands(x, weight, residual, out, sh, sw, pt, pl, dh, dw,
                                                                act, alpha, beta, post)
    n_n, _, h, w, o_n, oh, ow, _, kh, kw = dims
    # phase plane pitch: every column an output reads, and every image column
    wq = plane_pitch(ow, w, kw, sw, dw, pl)
    reach = (kh - 1) * dh // sh  # phase rows the kernel reaches below an output row
    n_b, rows = blocks(n_n * o_n, oh, MIN_ROWS)
    rows = max(1, min(rows, SCRATCH_FLOATS // (wq * (sh * sw + 1)) - reach))
    n_b = -(-oh // rows)
    threads = num_threads()
    run_tasks(_depthwise_share, threads, (threads, xf, wf, of, rf, bias, dims, window, (n_b, rows, rows + reach, wq),
                                          clamp, vmin, vmax, (act, post), (alpha, beta, post_alpha, post_beta)))


# each path's kernel (emit/conv.py calls the one depthwise_path names)
DEPTHWISE_KERNELS = {CHANNEL_BLOCKS: conv_depthwise_channel_blocks, REGISTER_ROWS: conv_depthwise_register_rows,
                     FLAT: conv_depthwise_flat, ROW_BLOCKS: conv_depthwise_row_blocks}


@numba.njit(**SEQ)
def _depthwise_share(th, threads, xf, wf, of, rf, bias, dims, window, split, clamp, vmin, vmax, acts, params):
    """Thread th's share of conv_depthwise's (image, channel, block of rows) tasks, with scratch of its own."""
    n_n, c_n, h, w, o_n, oh, ow, mult, kh, kw = dims
    sh, sw, pt, pl, dh, dw = window
    n_b, rows, hq, wq = split
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    typed = of.dtype.type
    tasks = n_n * o_n * n_b
    # the flat loop reads up to a row and a vector past the last plane
    p = aligned_zeros(sh * sw * hq * wq + wq + VEC, xf.dtype)
    acc = aligned_empty(-(-rows * wq // VEC) * VEC, xf.dtype)
    for t in range(tasks * th // threads, tasks * (th + 1) // threads):
        job, oy0 = t // n_b, t % n_b * rows
        o, nr = job % o_n, min(rows, oh - oy0)
        k0 = o * kh * kw
        gather_planes(xf, (job // o_n * c_n + o // mult) * h * w, h, w, oy0 * sh - pt, sh, sw, pl, p, 0, hq, wq)
        n = -(-nr * wq // VEC) * VEC
        if kh == 3 and kw == 3:
            _sum3x3(p, wf, k0, acc, n, sh, sw, dh, dw, hq, wq)
        elif kw == 5:
            _sum_rows5(p, wf, k0, kh, acc, n, sh, sw, dh, dw, hq, wq)
        else:
            _sum_taps(p, wf, k0, kh, kw, acc, n, sh, sw, dh, dw, hq, wq)
        bv = typed(0.0 if bias is None else bias[o])
        if not clamp and rf.size == 0:  # the epilogue over the whole block at once, a whole
            # number of vectors (the columns past each row's end too): no scalar tail per row
            zero = np.int64(0)  # not a literal (common.py)
            epilogue_run(acc, zero, n, acc, zero, float(bv), acc[:0], act, alpha, beta, post, post_alpha, post_beta)
        for r in range(nr):
            d = (job * oh + oy0 + r) * ow
            if clamp:
                clamp_run(of, d, acc, r * wq, ow, bv, vmin, vmax)
            elif rf.size == 0:
                copy_run(of, d, acc, r * wq, ow)
            else:
                epilogue_run(of, d, ow, acc, r * wq, float(bv), rf, act, alpha, beta,
                             post, post_alpha, post_beta)


@intrinsic
def _pixel_taps(typingctx, p, base, step, wt, bv, offsets, out, at, group):
    """For k < group (a constant): out[at + k * CB:][:CB] = bv[:CB] + sum over taps t of wt[t * CB:][:CB]
    * p[base + k * step + offsets[t]:][:CB]: `group` output pixels of CB channels, step apart in p,
    their sums in vector registers (CB lanes: LLVM splits them to the machine's width), independent of
    each other: one pixel's chain of multiply-adds waits on each one's latency (576 channels 3x3 stride 2
    on 7 x 7 at batch 8: 180 -> 105 us in groups of 4, AVX-512 EPYC). Written in LLVM IR because numba's
    loops over CB lanes would keep the sum in memory, behind a run-time check that it overlaps neither
    input."""
    if not (all(isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" for a in (p, wt, bv, offsets, out))
            and p.dtype == wt.dtype == bv.dtype == out.dtype and p.dtype in (types.float32, types.float64)
            and offsets.dtype == types.int64 and isinstance(group, types.IntegerLiteral)):
        return None
    pixels = group.literal_value

    def codegen(context, builder, signature, args):
        p_, base_, step_, wt_, bv_, offsets_, out_, at_ = args[:8]
        i64 = ir.IntType(64)
        base_, step_, at_ = (context.cast(builder, args[k], signature.args[k], types.int64) for k in (1, 2, 7))
        scalar = context.get_value_type(signature.args[0].dtype)
        lanes = vector_width(context)  # channels: vector_floats() in the kernel
        vec = ir.VectorType(scalar, lanes)
        suffix = "f32" if signature.args[0].dtype == types.float32 else "f64"
        itemsize = 4 if suffix == "f32" else 8
        fma = fma_intrinsic(builder, vec)
        p_ptr, wt_ptr, bv_ptr, off_ptr, out_ptr = (cgutils.create_struct_proxy(signature.args[k])(
            context, builder, value=args[k]).data for k in (0, 3, 4, 5, 6))
        taps = cgutils.create_struct_proxy(signature.args[5])(context, builder, value=offsets_).nitems

        def vector_at(pointer, index):  # the lanes lie at any element, not at a vector's alignment
            return builder.load(builder.bitcast(builder.gep(pointer, [index]), vec.as_pointer()), align=itemsize)

        def tap(t):
            offset = builder.add(base_, builder.load(builder.gep(off_ptr, [t])))
            w = vector_at(wt_ptr, builder.mul(t, ir.Constant(i64, lanes)))
            return [(w, vector_at(p_ptr, builder.add(offset, builder.mul(step_, ir.Constant(i64, k)))))
                    for k in range(pixels)]

        bias = vector_at(bv_ptr, ir.Constant(i64, 0))
        for k, total in enumerate(fma_sums(builder, taps, vec, fma, tap, pixels)):
            at = builder.add(at_, ir.Constant(i64, k * lanes))
            builder.store(builder.fadd(total, bias), builder.bitcast(builder.gep(out_ptr, [at]), vec.as_pointer()),
                          align=itemsize)
        return context.get_dummy_value()

    return types.void(p, base, step, wt, bv, offsets, out, at, group), codegen


@numba.njit(**FMA)
def _channel_blocks(th, threads, xf, wf, of, rf, bias, dims, window, planes, acts, params):
    """Thread th's share of the small-plane path's tasks, each CB channels o0 .. o0 + CB - 1 of one
    image, with scratch of its own. A task lays the channels' padded input planes out channel-minor
    (p[(y * wp + x) * CB + c]: each input row of the CB channels one transpose_vector), so that each tap
    of each output pixel is one multiply-add of CB channels at once (_pixel_taps, with the bias); the
    sums go out channel-major through transpose_vector again, and the rest of the epilogue runs once
    over the task's channels, which lie end to end in the output."""
    n_n, c_n, h, w, o_n, oh, ow, mult, kh, kw = dims
    sh, sw, pt, pl, dh, dw = window
    hp, wp = planes
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    lanes = vector_floats()  # channels per task: a vector's
    n_cb, pixels = -(-o_n // lanes), oh * ow
    # the padding is never written: zeros for every task; past the end, what a row's last group of
    # pixels reads (the pixels past the row are computed and dropped)
    p = aligned_zeros((hp * wp + PIXEL_GROUP * sw) * lanes, xf.dtype)  # (whole vectors a pixel, on a cache line)
    wt = aligned_zeros(kh * kw * lanes, xf.dtype)
    bv = aligned_zeros(lanes, xf.dtype)
    offsets = np.empty(kh * kw, np.int64)  # of each tap in p, from its window's first element
    for i in range(kh):
        for j in range(kw):
            offsets[i * kw + j] = (i * dh * wp + j * dw) * lanes
    sums = aligned_empty((pixels + PIXEL_GROUP) * lanes, xf.dtype)  # pixel-major, as _pixel_taps writes them
    y1, x1 = min(h, hp - pt), min(w, wp - pl)  # input rows and columns that some window reads
    tasks = n_n * n_cb
    loaded = -1  # the block whose weights and biases wt and bv hold
    for t in range(tasks * th // threads, tasks * (th + 1) // threads):
        n, o0 = t % n_n, t // n_n * lanes  # a block's images one after another: its weights laid out once
        cb = min(lanes, o_n - o0)
        # (in a last partial block, the lanes of the channels past o_n keep the last block's values: their
        # sums are never stored)
        if o0 != loaded:
            for c in range(cb):
                for k in range(kh * kw):
                    wt[u(k * lanes + c)] = wf[u((o0 + c) * kh * kw + k)]
                bv[c] = 0 if bias is None else bias[o0 + c]
            loaded = o0
        if mult == 1:  # the channels' rows h * w apart: a block of lanes channels by up to lanes columns a transpose
            x0 = (n * c_n + o0) * h * w
            for y in range(y1):
                for xs in range(0, x1, lanes):
                    xs = _whole_chunk(xs, x1, lanes)
                    transpose_vector(xf, x0 + y * w + xs, h * w, cb, min(lanes, x1 - xs), p,
                                     ((y + pt) * wp + pl + xs) * lanes, lanes)
        else:
            for c in range(cb):
                x0 = (n * c_n + (o0 + c) // mult) * h * w
                for y in range(y1):
                    d = ((y + pt) * wp + pl) * lanes + c
                    for x in range(x1):
                        p[u(d + x * lanes)] = xf[u(x0 + y * w + x)]
        for oy in range(oh):  # (a row's last group writes over the next row's first pixels, computed after)
            if ow > SHORT_ROW_GROUP:
                for ox in range(0, ow, PIXEL_GROUP):
                    _pixel_taps(p, (oy * sh * wp + ox * sw) * lanes, sw * lanes, wt, bv, offsets, sums,
                                (oy * ow + ox) * lanes, PIXEL_GROUP)
            else:
                for ox in range(0, ow, SHORT_ROW_GROUP):
                    _pixel_taps(p, (oy * sh * wp + ox * sw) * lanes, sw * lanes, wt, bv, offsets, sums,
                                (oy * ow + ox) * lanes, SHORT_ROW_GROUP)
        d0 = (n * o_n + o0) * pixels
        for q0 in range(0, pixels, lanes):
            q0 = _whole_chunk(q0, pixels, lanes)
            transpose_vector(sums, q0 * lanes, lanes, min(lanes, pixels - q0), cb, of, d0 + q0, pixels)
        if act != 0 or post != 0 or rf.size != 0:
            epilogue_run(of, d0, cb * pixels, of, d0, 0.0, rf, act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(inline="always", **SEQ)
def _whole_chunk(start, count, lanes):
    """Where the chunk of `lanes` items from `start` of `count` begins so that it is whole: its last one
    ends at count, overlapping the one before (transposed again, to the same values), unless count is
    less than lanes. A whole block is transposed with plain loads and stores (transpose_vector)."""
    return min(start, count - lanes) if count >= lanes else start


def _flat_path(x, xf, wf, of, rf, bias, dims, window, clamp, vmin, vmax, acts, params):
    """Run the flat path (_flat_share on the threads) and return True; False, doing nothing, for
    dtypes it has no kernel for (float64: _plane_taps is float32 only)."""


@overload(_flat_path)
def _flat_path_impl(x, xf, wf, of, rf, bias, dims, window, clamp, vmin, vmax, acts, params):
    if x.dtype != types.float32:
        return lambda x, xf, wf, of, rf, bias, dims, window, clamp, vmin, vmax, acts, params: False

    def run(x, xf, wf, of, rf, bias, dims, window, clamp, vmin, vmax, acts, params):
        n_n, c_n, h, w, o_n, oh, ow, mult, kh, kw = dims
        sh, sw, pt, pl, dh, dw = window
        offsets, masks = _tap_masks(h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw, vector_floats())
        threads = min(num_threads(), n_n * o_n)
        run_tasks(_flat_share, threads, (threads, xf, wf, of, rf, bias, (n_n, c_n, o_n, mult, h, w, oh * ow, kh * kw),
                                         (sh, sw, ow), offsets, masks, clamp, np.float32(vmin), np.float32(vmax),
                                         acts, params))
        return True

    return run


@numba.njit(**SEQ)
def _tap_masks(h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw, lanes):
    """(offsets, masks) of _plane_taps, for the phase planes of _flat_share (planes.py's layout, with
    no padding: plane (a, b) holds the input's rows a, a + sh, ... and columns b, b + sw, ..., -(-h // sh)
    rows of pitch ow): tap (i, j) of output pixel q = y * ow + x reads at q + offsets[i*kw + j];
    masks[t * vectors + v], bit l: whether pixel v*lanes + l is in the plane and its tap t reads inside
    the image (vectors: the plane's, rounded up to whole groups of PLANE_UNROLL). At stride 1 with
    ow == w the single plane is the input plane itself."""
    hq, pixels = -(-h // sh), oh * ow
    vectors = -(-pixels // (lanes * PLANE_UNROLL)) * PLANE_UNROLL  # whole groups: the last vectors read nothing
    offsets = np.empty(kh * kw, np.int64)
    masks = np.zeros(kh * kw * vectors, np.int64)
    for i in range(kh):
        for j in range(kw):
            t = i * kw + j
            dy, dx = i * dh - pt, j * dw - pl  # input row y * sh + dy, column x * sw + dx
            offsets[t] = ((dy % sh * sw + dx % sw) * hq + dy // sh) * ow + dx // sw
            for q in range(pixels):
                iy, ix = q // ow * sh + dy, q % ow * sw + dx
                if iy >= 0 and iy < h and ix >= 0 and ix < w:
                    masks[t * vectors + q // lanes] |= 1 << (q % lanes)
    return offsets, masks


@numba.njit(**SEQ)
def _flat_share(th, threads, xf, wf, of, rf, bias, dims, strides, offsets, masks, clamp, vmin, vmax, acts, params):
    """Thread th's share of the flat path's (image, channel) planes: the input plane split into phase
    planes of pitch ow (unless it is read where it lies: stride 1, ow == w), _plane_taps, then the
    epilogue in place over the plane unless it was a clamp (ReLU, ReLU6, none) applied on the way out."""
    n_n, c_n, o_n, mult, h, w, pixels, taps = dims
    sh, sw, ow = strides
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    lo, hi = (vmin, vmax) if clamp else (np.float32(-np.inf), np.float32(np.inf))
    hq = -(-h // sh)
    in_place = sh == 1 and sw == 1 and ow == w
    p = aligned_empty(0 if in_place else sh * sw * hq * ow, xf.dtype)  # masked lanes read nothing: no zeros needed
    gathered = -1  # the input plane p holds
    planes = n_n * o_n
    stop = planes * (th + 1) // threads
    chunk = max(1, EPILOGUE_FLOATS // pixels)  # planes per epilogue run: end to end in the output
    for j0 in range(planes * th // threads, stop, chunk):
        j1 = min(stop, j0 + chunk)
        for job in range(j0, j1):
            n, o = job // o_n, job % o_n
            bv = np.float32(0.0 if bias is None else bias[o])
            x0 = (n * c_n + o // mult) * h * w
            if in_place:
                _plane_taps(xf, x0, offsets, masks, wf, o * taps, of, job * pixels, pixels, bv, lo, hi)
            else:
                if x0 != gathered:
                    gather_planes(xf, x0, h, w, 0, sh, sw, 0, p, 0, hq, ow)
                    gathered = x0
                _plane_taps(p, 0, offsets, masks, wf, o * taps, of, job * pixels, pixels, bv, lo, hi)
        if not clamp:  # one run over the chunk's planes: a 7 x 7 plane's 49 floats alone run scalar
            epilogue_run(of, j0 * pixels, (j1 - j0) * pixels, of, j0 * pixels, 0.0, rf, act, alpha, beta,
                         post, post_alpha, post_beta)


@intrinsic
def _plane_taps(typingctx, xf, x0, offsets, masks, wf, w0, of, o0, pixels, bias, lo, hi):
    """One channel of a depthwise conv on the flat path, from its input plane (stride 1, output of
    the input's size) or phase planes (_flat_share) at xf[x0] to the output plane at of[o0] (pixels
    floats), float32:
    for each vector v of output pixels, the sum over taps t of wf[w0 + t] * xf[x0 + v*W + offsets[t]],
    each tap's load masked by masks[t * vectors + v] (bit l: lane l reads inside the image; the
    padding reads nothing and adds zero), then min(max(sum + bias, lo), hi) (NaN kept), stored
    (the last vector masked). No padded copies: 9 masked loads and FMAs per vector of a 3x3,
    PLANE_UNROLL vectors at once (_tap_masks pads the masks to whole groups)."""
    if not (all(_flat(a, types.float32) for a in (xf, wf, of)) and _flat(offsets, types.int64)
            and _flat(masks, types.int64)):
        return None
    sig = types.void(xf, x0, offsets, masks, wf, w0, of, o0, pixels, bias, lo, hi)

    def codegen(context, builder, signature, args):
        xf_, x0_, off_, masks_, wf_, w0_, of_, o0_, pixels_ = args[:9]
        x0_, w0_, o0_, pixels_ = (context.cast(builder, v, signature.args[i], types.int64)
                                  for v, i in ((x0_, 1), (w0_, 5), (o0_, 7), (pixels_, 8)))
        width = vector_width(context)
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        vec, mask_t = ir.VectorType(f32, width), ir.VectorType(ir.IntType(1), width)
        x_ptr, off_ptr, m_ptr, w_ptr, o_ptr = (cgutils.create_struct_proxy(signature.args[i])(
            context, builder, value=args[i]).data for i in (0, 2, 3, 4, 6))
        taps = cgutils.create_struct_proxy(signature.args[2])(context, builder, value=off_).nitems
        vectors = builder.mul(builder.sdiv(builder.add(pixels_, ir.Constant(i64, width * PLANE_UNROLL - 1)),
                                           ir.Constant(i64, width * PLANE_UNROLL)), ir.Constant(i64, PLANE_UNROLL))

        def splat(value):
            lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(i32, 0))
            return builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined), ir.Constant(ir.VectorType(i32, width),
                                                                                              [0] * width))
        bias_, lo_, hi_ = (splat(context.cast(builder, args[i], signature.args[i], types.float32)) for i in (9, 10, 11))
        fma = fma_intrinsic(builder, vec)
        load_t = ir.FunctionType(vec, [vec.as_pointer(), i32, mask_t, vec])
        load = cgutils.get_or_insert_function(builder.module, load_t, f"llvm.masked.load.v{width}f32.p0")
        zero = ir.Constant(vec, [0.0] * width)

        def group(v, _):  # PLANE_UNROLL vectors of output pixels from vector v on, summed at once
            def tap(t):  # each vector's input lanes inside the image (zeros elsewhere), the weight in every lane
                weight = splat(builder.load(builder.gep(w_ptr, [builder.add(w0_, t)])))
                offset = builder.load(builder.gep(off_ptr, [t]))
                pairs = []
                for k in range(PLANE_UNROLL):
                    vk = builder.add(v, ir.Constant(i64, k))
                    bits = builder.load(builder.gep(m_ptr, [builder.add(builder.mul(t, vectors), vk)]))
                    mask = builder.bitcast(builder.trunc(bits, ir.IntType(width)), mask_t)
                    at = builder.gep(x_ptr, [builder.add(builder.add(x0_, builder.mul(vk, ir.Constant(i64, width))),
                                                         offset)])
                    pairs.append((builder.call(load, [builder.bitcast(at, vec.as_pointer()), ir.Constant(i32, 4), mask,
                                                      zero]), weight))
                return pairs

            for k, total in enumerate(fma_sums(builder, taps, vec, fma, tap, PLANE_UNROLL)):
                r = builder.fadd(total, bias_)
                r = builder.select(builder.fcmp_ordered("<", r, lo_), lo_, r)
                r = builder.select(builder.fcmp_ordered(">", r, hi_), hi_, r)
                start = builder.mul(builder.add(v, ir.Constant(i64, k)), ir.Constant(i64, width))
                out_at = builder.bitcast(builder.gep(o_ptr, [builder.add(o0_, start)]), vec.as_pointer())
                # every lane but past the plane's end: none in the vectors past it, which round up the group
                store_lanes(builder, r, out_at, builder.sub(pixels_, start), 4)
            return []

        vector_loop(builder, "vectors", vectors, PLANE_UNROLL, [], group)
        return context.get_dummy_value()

    return sig, codegen


def _flat(array, dtype) -> bool:
    return isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C" and array.dtype == dtype
