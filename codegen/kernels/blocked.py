"""Kernels on the channel-blocked layout: a (N, C, H, W) tensor stored as (N, ceil(C / B), H, W, B), each
pixel's B channels of one block side by side, B = taps_width() (16 on AVX2, 64 on AVX-512; the last
block padded where C is not a multiple of B). compiler/passes/block_channels.py puts chains of convs on it.

It is onnxruntime's NCHWc. A 1x1 conv on it is micro_gemm_taps with the pixels in the broadcasts and
the channels in the vectors, as conv2d_by_channels, but without the transposes: the input's MR pixels
of a reduction step are B floats apart in one contiguous block, and the output's MR x B block of
sums is one contiguous run of the output, stored from the registers through the epilogue
(micro_gemm_taps_out: bias along the vector, residual in the same layout; micro_gemm_taps_seeded for
the last chunk of a long reduction). Against conv1x1_packed on NCHW, in-process, 2 threads, Zen 3
EPYC (AVX2), with bias, residual and ReLU: 64 -> 256 channels on 56 x 56 0.93-0.98 against 1.27-1.46
ms with the operands in cache, 1.37-1.41 against 2.05-2.28 with the caches evicted first; 256 -> 64
on 56 x 56 0.82-0.99 against 1.01-1.30; 128 -> 512 on 28 x 28 0.87 against 1.10; 1.1-1.15x on 14 x 14
(1024 -> 256, 256 -> 1024), where conv1x1_packed runs near the machine's peak.

- to_blocked / from_blocked: the reorders at the edges of a blocked chain, n x n squares transposed
  in registers.
- conv1x1_blocked: a 1x1 unpadded ungrouped conv (any stride) with its epilogue, blocked in and out.
- winograd_blocked: a 3x3 stride-1 conv by Winograd F(2x2, 3x3) or F(4x4, 3x3) (winograd_f4_pays), the
  tiles in the pixels' place: each of the 16 or 36 products a blocked 1x1 conv over the tiles, the
  transforms a vector of channels at a time (F(2x2) in ResNet-50 at batch 1: 0.8-1.0 of
  winograd_conv2d's time on 56 x 56 to 14 x 14; F(4x4) alone 0.34-0.65 of the direct conv's).
- pool_blocked: max and average window pools inside a chain, a vector of a block's channels per tap.
- global_avg_pool_blocked / channel_scale_blocked: a squeeze-and-excitation block's pool (into NCHW
  (N, C, 1, 1), the same bytes as blocked) and scale, inside a chain.
- depthwise_blocked: a depthwise conv, each tap one vector multiply-add of a block's channels (0.65-0.9
  of the NCHW depthwise kernels' time on MobileNet and EfficientNet shapes).
- expand_depthwise_blocked: a MobileNet block's 1x1 expansion and the depthwise conv of it in one kernel,
  the expansion computed a band of rows and a block of channels at a time into scratch, never stored whole
  (0.86-0.97 of the two kernels' time on MobileNetV2 and EfficientNet shapes at batch 1 and 8).
- conv2d_blocked: any other ungrouped conv (kernel, stride, dilation, zero padding): each task copies
  its band of output rows' input rows, zero-padded, into scratch, where every (channel, tap) of
  every output pixel lies at a fixed offset from the pixel's window; conv2d_blocked_nchw, the same
  from an NCHW input (a stem conv on an image's 3 channels), each channel's rows gathered as a plane
  (AlexNet's 11x11 stride-4 stem 0.65-0.75 of the time with them in lanes, MobileNetV2's 0.65-0.8).

The convs take their weights as conv_channels.pack_channel_panels(pad_to_blocks(weight, B), B) packs them
(pack_winograd_blocked for Winograd's, pack_depthwise_blocked for depthwise ones'), and biases of whole
blocks: channels that are not whole blocks pad the last one (ir/ops/layout.py), with zero weights. A
reduction runs over the input's first K lanes, K the weight's (pad_to_blocks: to the last real channel),
so the lanes padding the input's last block are never read (24 channels reduce over 24 steps, not 32).
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from codegen.kernels.common import PARALLEL_MIN_ELEMENTS, SEQ, aligned_empty, compiled_as, num_threads, thread_id, u
from codegen.kernels.conv_channels import pack_channel_panels
from codegen.kernels.epilogue import ONE_PASS, epilogue_run, one_pass_bounds, residual_run
from codegen.kernels.gemm import PACKED_K_CHUNK, PARALLEL_MIN_MACS
from codegen.kernels.microkernel import (
    LANE_GROUP_PIXELS,
    MR,
    _data_pointer,
    _is_f32,
    _store_through_epilogue,
    micro_gemm_taps,
    micro_gemm_taps_grouped,
    micro_gemm_taps_grouped_half,
    micro_gemm_taps_half,
    micro_gemm_taps_lanes,
    micro_gemm_taps_lanes_out,
    micro_gemm_taps_out,
    micro_gemm_taps_out_grouped,
    micro_gemm_taps_out_grouped_half,
    micro_gemm_taps_out_grouped_row,
    micro_gemm_taps_out_grouped_row_half,
    micro_gemm_taps_out_half,
    micro_gemm_taps_pixel,
    micro_gemm_taps_pixel_half,
    micro_gemm_taps_seeded,
    micro_gemm_taps_seeded_half,
    taps_channels,
    taps_vectors,
    taps_width,
)
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vectors import (
    affine_run,
    copy_run,
    fma_intrinsic,
    fma_sums,
    transpose_out,
    vector_floats,
    vector_loop,
    vector_width,
)
from codegen.kernels.winograd import (
    RUN_BYTES,
    _int64s,
    _vector_step,
    input_transform,
    input_transform4,
    output_transform,
    output_transform4,
    transform_chunks,
)
from ir.ops.layout import lane_groups, segment_lanes, vector_groups

CHUNK_GROUPS = 16  # MR-pixel groups per task's chunk of an image: 96 pixels, a 6 KB block of each input block
# or more, up to CHUNK_GROUPS_MAX, where a chunk's input of CHUNK_BYTES holds more: a task's fixed cost is a
# large share of a short reduction's work. Kernel alone, in-process A/B against 16 groups always, 2 threads, AVX2
# Zen 3, with a residual: MobileNetV2's projections 32 -> 16 channels on 112 x 112 at batch 8 0.58, batch 1 0.74,
# 96 -> 32 on 56 x 56 0.89, 144 -> 32 0.93; its expansion 24 -> 144 0.78; 64 -> 256 on 56 x 56 0.92;
# Winograd's products level (0.92-1.03). 48 KB chunks: 1.08-1.10x these, 256 KB: level
CHUNK_BYTES = 96 << 10
CHUNK_GROUPS_MAX = 256
STRIDED_COMPACT_MIN_K = 256  # input lanes from which a strided 1x1 conv reads a compact copy of its input's
# pixels (_conv1x1_blocked). Read in place, a group's pixels lie a cache line or more apart, and every output
# block reads them again. Kernel alone, in-process A/B, 2 threads, AVX2 Zen 3, stride 2, batch 1: ResNet-50's
# downsampling convs 512 -> 1024 to 14 x 14 0.77, 1024 -> 2048 to 7 x 7 0.70, 256 -> 512 to 28 x 28 0.92;
# shorter reductions gain little or lose the copy's pass (128 -> 256 on 14 x 14 1.04, 208 -> 440 on 7 x 7
# 1.10 at batch 1 and 0.97 at batch 8, 64 -> 128 on 56 x 56 1.16, 40 -> 80 on 14 x 14 1.8)
MIN_TASKS = 16  # tasks at least (8 a thread on 2), by splitting the output blocks into groups
# conv2d_blocked's tasks: one a WINDOW_TASK_MACS multiply-adds, from WINDOW_MIN_TASKS to MIN_TASKS. Each task
# gathers its band's input rows, so a small conv split 16 ways spent more on the gathers than it balanced: 4
# tasks, kernel alone, 2 threads, in-process A/B, batch 1: 32 -> 32 3x3 on 15 x 15 0.85, 16 -> 32 0.84, 16 -> 16
# 5x5 0.90, 48 -> 48 1x3 and 3x1 on 7 x 7 0.89-0.92 (Inception-v3's); 16 on large ones (56 x 56, batch 8) stays:
# 4 took them 1.05-1.13x
WINDOW_MIN_TASKS = 4
WINDOW_TASK_MACS = 1 << 20
# weights above this: conv2d_blocked's tasks split the output blocks before the pixels, since every band reads
# all the weights, and a thread keeps the band it gathered for its next task of the same band. Kernel alone,
# in-process A/B, 2 threads, AVX2 Zen 3, batch 1, two runs: 512 -> 512 3x3 stride 2 on 14 x 14 0.94-0.96,
# 256 -> 512 0.93-0.94; the other strided 3x3 and 2x2 convs of ResNet-50, ConvNeXt-T and YOLOv5s level. Where
# the (image, block) pairs are two a thread or more, each pair is one task of all its pixels (_one_band: with the
# weights cold, as in a model, reading them once a band cost more than the bands balanced)
WINDOW_WEIGHT_BYTES = 1 << 18
BAND_BYTES = 1 << 18  # a conv2d_blocked task's gathered input rows, at most (where one output row's fit)
# a reorder's tasks a thread, at least, where its (image, block) pairs are fewer: RegNetY-400MF's stem output
# (32 channels on 112 x 112 at batch 1, one pair) took 351-460 us into the layout on one thread; runs of at least
# REORDER_MIN_PIXELS pixels a task
REORDER_TASKS_PER_THREAD = 2
REORDER_MIN_PIXELS = 1024
# pixels past the last whole group that run one at a time (micro_gemm_taps_pixel, about a third of a group's
# time each on AVX2), not as a group of MR
FEW_PIXELS = 2


@numba.njit(**SEQ)
def to_blocked(x, out):
    """out[n, c // B, h, w, c % B] = x[n, c, h, w]: NCHW into the blocked layout (B = out.shape[4]), the
    channels past C that pad the last block zero."""
    n_n, c_n, h, w = x.shape
    if not _is_blocked_shape(x.shape, out.shape, (c_n,)):
        raise ValueError("to_blocked: the output is not the input's blocked shape")
    _reorder(x.reshape(-1), out.reshape(-1), n_n, (c_n,), h * w, out.shape[4], True)


@numba.njit(**SEQ)
def from_blocked(x, out, segments):
    """out[n, c, h, w] = the lane of x[n, :, h, w, :] that holds channel c: the blocked layout back into NCHW
    (B = x.shape[4]), out's C channels in `segments` (a tuple: a concat's parts, each from a block's first
    lane; (C,) for any other value), the lanes padding them dropped."""
    n_n, c_n, h, w = out.shape
    if not _is_blocked_shape(out.shape, x.shape, segments):
        raise ValueError("from_blocked: the input is not the output's blocked shape")
    _reorder(x.reshape(-1), out.reshape(-1), n_n, segments, h * w, x.shape[4], False)


@numba.njit(inline="always", **SEQ)
def _is_blocked_shape(nchw, blocked, segments):
    """Whether `blocked` is the blocked shape of `nchw`: its C channels, in `segments`, in blocks of
    blocked[4], each segment's last one padded."""
    n_n, c_n, h, w = nchw
    b = blocked[4]
    if b < 1:
        return False
    total, blocks = 0, 0
    for count in segments:
        total += count
        blocks += -(-count // b)
    return total == c_n and blocked[1] == blocks and blocked[0] == n_n and blocked[2] == h and blocked[3] == w


@numba.njit(inline="always", **SEQ)
def _pixel_chunks(pixels, k):
    """(count, MR-groups each) of the chunks tasks take `pixels` pixels (or tiles) in, for a reduction of k
    steps: at most CHUNK_GROUPS groups each, or as many as CHUNK_BYTES of input hold (up to
    CHUNK_GROUPS_MAX), all of about one size (196 pixels as 66, 66, 64, not 96, 96, 4)."""
    groups = -(-pixels // MR)
    most = max(CHUNK_GROUPS, min(CHUNK_GROUPS_MAX, CHUNK_BYTES // (MR * k * 4)))
    cg = -(-groups // -(-groups // most))
    return -(-groups // cg), cg


@numba.njit(inline="always", **SEQ)
def _reads_lanes(k, cb_n, b):
    """Whether a reduction over an input's first k lanes (a weight packed by pad_to_blocks: to the input's last
    real lane, or over every lane) fits an input of cb_n blocks: the last block holds one of them at least."""
    return (cb_n - 1) * b < k <= cb_n * b


@numba.njit(**SEQ)
def _half_block(out_channels, ob_n, b):
    """The output block a conv computes half wide (its last, if out_channels, the real ones, fill half of it at
    most), or -1 (out_channels 0: every block whole)."""
    if out_channels == 0:
        return -1
    if not (ob_n - 1) * b < out_channels <= ob_n * b:
        raise ValueError("a blocked conv's output channels are not those of its output's blocks")
    return ob_n - 1 if out_channels - (ob_n - 1) * b <= b // 2 else -1


@numba.njit(inline="always", **SEQ)
def _lane_rows(c_n, plane, b):
    """A pointwise reduction's steps on the layout: step c, input channel c, at (c // b) * plane * b + c % b
    from its pixel (plane: an image's pixels)."""
    rows = np.empty(c_n, np.int64)
    for c0 in range(0, c_n, b):  # block by block: no division a step (the tables are rebuilt at every call)
        for j in range(min(b, c_n - c0)):
            rows[c0 + j] = c0 * plane + j
    return rows


@numba.njit(inline="always", **SEQ)
def _block_groups(jobs, ob_n, serial, least=MIN_TASKS):
    """(count, blocks each) of the groups of output blocks that give `jobs` jobs `least` tasks at least
    (one group when serial)."""
    n_g = 1
    while not serial and jobs * n_g < least and n_g < ob_n:
        n_g *= 2
    per = -(-ob_n // n_g)
    return -(-ob_n // per), per


@numba.njit(**SEQ)
def _reorder(xf, of, n_n, segments, hw, b, into):
    """Each (image, block) pair's B planes of hw pixels (the channels in `segments` on NCHW) into one run of
    hw pixels' B channels (into), or back; tasks of whole pairs, or of runs of a pair's pixels where the pairs
    are fewer than REORDER_TASKS_PER_THREAD a thread (below PARALLEL_MIN_ELEMENTS, in the calling thread)."""
    c_n, cb_n = 0, 0
    for count in segments:
        c_n += count
        cb_n += -(-count // b)
    pairs, n = n_n * cb_n, vector_floats()
    parts = max(1, min(-(-REORDER_TASKS_PER_THREAD * num_threads() // pairs), hw // REORDER_MIN_PIXELS))
    run = -(-hw // parts // n) * n  # a task's pixels, whole squares
    parts = -(-hw // run)
    run_tasks(_reorder_task, pairs * parts, (xf, of, segments, c_n, cb_n, hw, b, into, parts, run),
              pairs * hw * b < PARALLEL_MIN_ELEMENTS)


@numba.njit(**SEQ)
def _reorder_task(m, xf, of, segments, c_n, cb_n, hw, b, into, parts, run):
    """Task m of _reorder: pixels [p0, p1) of one pair, n x n squares of channels and pixels transposed in
    registers (transpose_out), the pair's last hw % n pixels, and vectors of channels partly past their
    segment, one element at a time; into the layout, the lanes past a segment zero."""
    pair = m // parts
    p0 = (m % parts) * run
    p1 = min(hw, p0 + run)
    c0, real = _block_channels(pair % cb_n, segments, b)  # the block's first channel, its channels not padding
    flat = ((pair // cb_n) * c_n + c0) * hw  # the pair's first element on NCHW
    base = pair * b * hw  # and blocked
    n = vector_floats()
    whole = min(p1, hw // n * n)
    no = -np.inf
    for j in range(0, b, n):
        if j >= real:  # a vector of padding lanes: zeros into the layout, nothing out of it
            if into:
                for p in range(p0, p1):
                    for i in range(n):
                        of[u(base + p * b + j + i)] = 0.0
            continue
        squares = whole if j + n <= real else p0
        for p in range(p0, squares, n):
            if into:  # x[j + r][p + c] -> out[p + c][j + r]
                transpose_out(xf, flat + j * hw + p, hw, of, base + p * b + j, b, None, 0, no, -no, no, None)
            else:
                transpose_out(xf, base + p * b + j, b, of, flat + j * hw + p, hw, None, 0, no, -no, no, None)
        for p in range(max(p0, squares), p1):
            for i in range(j, j + n):
                if i >= real:
                    if into:
                        of[u(base + p * b + i)] = 0.0
                elif into:
                    of[u(base + p * b + i)] = xf[u(flat + i * hw + p)]
                else:
                    of[u(flat + i * hw + p)] = xf[u(base + p * b + i)]


@numba.njit(**SEQ)
def conv1x1_blocked(x, wt, bias, residual, out, stride, act, alpha, beta, post, post_alpha, post_beta, out_channels):
    """out = post(act(conv1x1(x, W) + bias) + residual) on the blocked layout, unpadded, any stride: x (N,
    C / B, H, W, B), wt = conv_channels.pack_channel_panels(W, B) (O / B, C, B), out and residual (N, O /
    B, OH, OW, B) (residual None or empty for none; it may be out itself), B = taps_width(). The input
    is read where it lies (each output pixel's at its offset in a table). Tasks: (image, chunk of
    MR-pixel groups (_pixel_chunks), group of output blocks), at least MIN_TASKS of them (below
    PARALLEL_MIN_MACS, one, in the calling thread). out_channels (0: not given) the real ones: where they
    fill half of the last block at most (24 = 16 + 8, 40 on AVX2), it is computed half wide and its other
    lanes set to zero (144 -> 24 on 56 x 56 at batch 1: 0.87 of the time, 576 -> 24 on 7 x 7 0.85)."""
    none = np.empty(0, np.float32)
    _conv1x1_blocked(x, wt, bias, residual, out, stride, (act, post), (alpha, beta, post_alpha, post_beta),
                     (none, none, np.float32(0.0)), out_channels)


@numba.njit(**SEQ)
def conv1x1_blocked_prologue(x, scale, shift, in_act, wt, bias, residual, out, stride, act, alpha, beta, post,
                             post_alpha, post_beta, out_channels):
    """conv1x1_blocked of in_act(x * scale + shift) (in_act 1: ReLU, 0: none), scale and shift one value per
    lane of x (zeros in its padding lanes): a BatchNorm and ReLU before the conv, DenseNet's norm1 and relu1
    (fused_affine_conv2d). Each task applies it to its chunk's input pixels into scratch, then reads them
    there."""
    if scale.shape != shift.shape or scale.size != x.shape[1] * x.shape[4]:
        raise ValueError("conv1x1_blocked_prologue: scale and shift are not one value per lane of the input")
    lo = np.float32(0.0) if in_act == 1 else np.float32(-np.inf)
    _conv1x1_blocked(x, wt, bias, residual, out, stride, (act, post), (alpha, beta, post_alpha, post_beta),
                     (scale, shift, lo), out_channels)


@numba.njit(**SEQ)
def _conv1x1_blocked(x, wt, bias, residual, out, stride, acts, params, prologue, out_channels):
    """conv1x1_blocked, through prologue (scale, shift, lo: max(x * scale + shift, lo); empty scale for none).
    A strided conv of STRIDED_COMPACT_MIN_K input lanes or more, without a prologue, first copies the input
    pixels it reads into a compact array (_subsampled) and runs at stride 1 on that (a prologue already
    copies each chunk's pixels into scratch)."""
    sh, sw = stride
    if (out.shape[2] - 1) * sh >= x.shape[2] or (out.shape[3] - 1) * sw >= x.shape[3]:
        raise ValueError("conv1x1_blocked: an output larger than the strided input")
    if (sh != 1 or sw != 1) and prologue[0].size == 0 and wt.shape[1] >= STRIDED_COMPACT_MIN_K:
        _conv1x1_blocked_at(_subsampled(x, sh, sw, out.shape[2], out.shape[3]), wt, bias, residual, out, (1, 1),
                            acts, params, prologue, out_channels)
    else:
        _conv1x1_blocked_at(x, wt, bias, residual, out, stride, acts, params, prologue, out_channels)


@numba.njit(**SEQ)
def _subsampled(x, sh, sw, oh, ow):
    """The pixels (oy * sh, ox * sw) of x (N, CB, H, W, B) for oy < oh, ox < ow (inside x: checked by the
    caller): (N, CB, oh, ow, B), a task a plane of blocks."""
    n_n, cb_n, h, w, b = x.shape
    out = aligned_empty(n_n * cb_n * oh * ow * b, np.float32).reshape((n_n, cb_n, oh, ow, b))
    serial = out.size < PARALLEL_MIN_ELEMENTS
    run_tasks(_subsample_task, n_n * cb_n, (x.reshape(-1), out.reshape(-1), (h, w, b, sh, sw, oh, ow)), serial)
    return out


@numba.njit(**SEQ)
def _subsample_task(t, xf, of, dims):
    h, w, b, sh, sw, oh, ow = dims
    x0, o0 = t * h * w * b, t * oh * ow * b
    for oy in range(oh):
        for ox in range(ow):
            copy_run(of, o0 + (oy * ow + ox) * b, xf, x0 + (oy * sh * w + ox * sw) * b, b)


@numba.njit(**SEQ)
def _conv1x1_blocked_at(x, wt, bias, residual, out, stride, acts, params, prologue, out_channels):
    """_conv1x1_blocked on x as it lies, at any stride (the output's size checked against it by the caller)."""
    sh, sw = stride
    n_n, cb_n, h, w, b = x.shape
    ob_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    c_n, hw = cb_n * b, oh * ow
    k = wt.shape[1]  # the reduction's lanes (pad_to_blocks)
    if (b != taps_width() or wt.shape[0] != ob_n or wt.shape[2] != b or not _reads_lanes(k, cb_n, b)
            or out.shape[0] != n_n or out.shape[4] != b):
        raise ValueError("conv1x1_blocked: blocks of another width, or operands of mismatched shapes")
    half_q = _half_block(out_channels, ob_n, b)
    chunks, cg = _pixel_chunks(hw, k)
    serial = n_n * hw * ob_n * b * k < PARALLEL_MIN_MACS
    if prologue[0].size != 0:  # smaller chunks rather than groups of output blocks, each of which would apply
        # the prologue to the chunk again (960 -> 128 channels on 14 x 14 at batch 1: 1.5x the time)
        groups = -(-hw // MR)
        cg = -(-groups // min(groups, max(chunks, 1 if serial else -(-MIN_TASKS // n_n))))
        chunks, n_g, per = -(-groups // cg), 1, ob_n
    else:
        n_g, per = _block_groups(n_n * chunks, ob_n, serial)
    pix = np.zeros(hw + MR, np.int64)  # output pixel p's input pixel; MR past the image, for the last group's calls
    for oy in range(oh):
        for ox in range(ow):
            pix[oy * ow + ox] = (oy * sh * w + ox * sw) * b
    rows = _lane_rows(k, h * w, b)
    tasks = n_n * chunks * n_g
    # a prologue's scratch, a chunk's input pixels through it: reduction step c at rows_in[c] from the pixel
    size = cb_n * cg * MR * b if prologue[0].size != 0 else 0
    scratch = aligned_empty((1 if serial else min(num_threads(), tasks)) * size, np.float32)
    rows_in = _lane_rows(k if size else 0, cg * MR, b)
    data = (x.reshape(-1), wt.reshape(-1), bias, residual_run(residual, out), out.reshape(-1), pix, rows,
            (n_n, c_n, k, h * w, hw, ob_n, b, chunks, cg, n_g, per, half_q), acts, params, prologue, rows_in, scratch)
    run_tasks(_conv1x1_task, tasks, data, serial)


@numba.njit(**SEQ)
def _conv1x1_task(t, xf, wf, bias, rf, of, pix, rows, dims, acts, params, prologue, rows_in, scratch):
    """Task t of conv1x1_blocked: its chunk of pixels (through the prologue into this thread's scratch, if
    any) times its group of output blocks (_blocked_out)."""
    n_n, c_n, k, in_hw, hw, ob_n, b, chunks, cg, n_g, per, half_q = dims
    gi, ci, n = t % n_g, (t // n_g) % chunks, t // (n_g * chunks)
    p0 = ci * cg * MR
    p1 = min(hw, p0 + cg * MR)
    q0, q1 = gi * per, min(ob_n, (gi + 1) * per)
    scale, shift, lo = prologue
    if scale.size == 0:
        _blocked_out(xf, n * c_n * in_hw, pix, p0, p0, p1, rows, k, wf, bias, rf, of, n * ob_n, hw, b, q0, q1,
                     acts, params, half_q)
        return
    src = _band_scratch(scratch, c_n * cg * MR)
    for cb in range(c_n // b):
        x0, d0, c0 = (n * c_n + cb * b) * in_hw, cb * cg * MR * b, cb * b
        for i in range(p1 - p0):
            affine_run(src, d0 + i * b, xf, x0 + pix[p0 + i], b, scale, c0, shift, lo)
    local = np.zeros(cg * MR + MR, np.int64)  # the chunk's pixels in the scratch; past them, the first's
    for i in range(p1 - p0):
        local[i] = i * b
    _blocked_out(src, 0, local, 0, p0, p1, rows_in, k, wf, bias, rf, of, n * ob_n, hw, b, q0, q1, acts, params,
                 half_q)


@numba.njit(**SEQ)
def _blocked_out(a, a0, pix, pix0, p0, p1, rows, k, wf, bias, rf, of, ob0, hw, b, q0, q1, acts, params, half_q=None):
    """Output pixels [p0, p1) of output blocks [q0, q1) of one image (its first block ob0 of the output):
    pixel p's reduction step r at a[a0 + pix[pix0 + p - p0] + rows[r]] (pix: MR entries past p1, any
    offset inside a), k steps, times wf's panel q. MR pixels by B channels a call, stored from the
    registers through the one-pass epilogue; a reduction longer than PACKED_K_CHUNK steps sums its
    earlier chunks into scratch first (each chunk's weights stay in L1 across the pixels), and its
    last chunk adds them in registers (micro_gemm_taps_seeded). The last partial group goes through
    scratch, FEW_PIXELS or fewer pixels one at a time (micro_gemm_taps_pixel); activations of more than one
    pass run after, over the pixels' run. Block half_q (given by
    the convs that know their real channels, -1 for none) runs half wide (_half_block_out); where it is
    not given, numba prunes that branch and the kernels calling without it never compile the half path."""
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    one_pass, (lo, hi, top), res = _one_pass(acts, params, rf)
    plan, acc = _out_plan(k, p0, p1, b)
    chunked, kc, last, whole, n_acc, few = plan
    for q in range(q0, q1):
        w0 = q * k * b
        o0 = (ob0 + q) * hw * b
        if half_q is not None:
            if q == half_q:
                _half_block_out(a, a0, pix, pix0, p0, p1, rows, k, wf, bias, res, of, o0, w0, q * b, b, (lo, hi, top),
                                acc, plan)
                for p in range(p0, p1):  # the padding lanes
                    of[o0 + p * b + b // 2:o0 + p * b + b] = 0.0
                if not one_pass:
                    epilogue_run(of, o0 + p0 * b, (p1 - p0) * b, of, o0 + p0 * b, 0.0, rf, act, alpha, beta, post,
                                 post_alpha, post_beta)
                continue
        if chunked:  # every chunk but the last into acc, its weights in L1 across the pixels
            for kb in range(0, last, kc):
                for g in range(0, n_acc, MR):
                    micro_gemm_taps(kc, a, a0, pix, pix0 + g, rows, kb, wf, w0 + kb * b, b, acc, g * b, b, kb > 0)
        for p in range(p0, whole, MR):
            if chunked:  # the last chunk, acc's sums added, through the epilogue from the registers
                micro_gemm_taps_seeded(k - last, a, a0, pix, pix0 + p - p0, rows, last, wf, w0 + last * b, b, of,
                                       o0 + p * b, b, bias, q * b, lo, hi, top, res, acc, (p - p0) * b)
            else:
                micro_gemm_taps_out(k, a, a0, pix, pix0 + p - p0, rows, 0, wf, w0, b, of, o0 + p * b, b, bias, q * b,
                                    lo, hi, top, res)
        if few:  # each of the last pixels over the whole reduction into acc, then out from the registers
            for p in range(whole, p1):
                micro_gemm_taps_pixel(k, a, a0, pix, pix0 + p - p0, rows, 0, wf, w0, b, acc, 0)
                _pixel_out(acc, 0, of, o0 + p * b, bias, q * b, lo, hi, top, res)
        else:  # the partial group through acc, then its pixels out one by one from the registers
            g = whole - p0 if chunked else 0
            micro_gemm_taps(k - last if chunked else k, a, a0, pix, pix0 + whole - p0, rows, last if chunked else 0,
                            wf, w0 + (last * b if chunked else 0), b, acc, g * b, b, chunked and last > 0)
            for i in range(p1 - whole):
                _pixel_out(acc, (g + i) * b, of, o0 + (whole + i) * b, bias, q * b, lo, hi, top, res)
        if not one_pass:
            epilogue_run(of, o0 + p0 * b, (p1 - p0) * b, of, o0 + p0 * b, 0.0, rf, act, alpha, beta, post,
                         post_alpha, post_beta)


@numba.njit(inline="always", **SEQ)
def _one_pass(acts, params, rf):
    """(whether the epilogue runs from the registers, its (lo, hi, top) bounds there, the residual it adds
    there: empty where the activation takes more than one pass, and epilogue_run adds it after)."""
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    one_pass = act <= ONE_PASS and post <= 1
    bounds = one_pass_bounds(act, alpha, beta, post) if one_pass else (-np.inf, np.inf, -np.inf)
    return (one_pass, (np.float32(bounds[0]), np.float32(bounds[1]), np.float32(bounds[2])),
            rf if one_pass else rf[:0])


@numba.njit(inline="always", **SEQ)
def _out_plan(k, p0, p1, b):
    """How _blocked_out runs pixels [p0, p1) over a reduction of k steps: (chunked, chunk length, the last
    chunk's first step, the end of the groups stored from the registers, the pixels summed into scratch, whether
    the last pixels run one at a time), and that scratch."""
    chunked = k > PACKED_K_CHUNK
    kc = -(-k // -(-k // PACKED_K_CHUNK))  # chunks of equal length
    last = (-(-k // kc) - 1) * kc  # the last chunk's first step
    whole = p0 + (p1 - p0) // MR * MR  # the groups stored from the registers end here
    few = p1 - whole <= FEW_PIXELS  # the last pixels one at a time (micro_gemm_taps_pixel), else as a group
    # the pixels summed chunk by chunk into acc (all but a few last ones, if chunked), or the last group's
    n_acc = (whole - p0 if few else -(-(p1 - p0) // MR) * MR) if chunked else (0 if few else MR)
    acc = aligned_empty(max(n_acc, 1 if whole < p1 else 0) * b, np.float32)  # a few last pixels' sums: acc[:b]
    return (chunked, kc, last, whole, n_acc, few), acc


@numba.njit(**SEQ)
def _half_groups_out(a, a0, pix, p0, p1, rows, k, wf, bias, rf, of, ob0, hw, b, q, acts, params, half_q):
    """Output block q of a conv in groups of B / 2 channels (RegNetY's 8 on AVX2), as _blocked_out computes a
    block: each half of it over the same half of the input block at a[a0:] (pixel p's step r at
    a[a0 + pix[p - p0] + rows[r]], rows over B / 2 lanes), the _half kernels on the half of each step's weights
    at its lanes. Block half_q (-1: none), whose real channels are its first half only, computes that half and
    zeros the other."""
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    one_pass, bounds, res = _one_pass(acts, params, rf)
    plan, acc = _out_plan(k, p0, p1, b)
    w0 = q * k * b
    o0 = (ob0 + q) * hw * b
    half = b // 2
    _half_block_out(a, a0, pix, 0, p0, p1, rows, k, wf, bias, res, of, o0, w0, q * b, b, bounds, acc, plan)
    if q == half_q:
        for p in range(p0, p1):
            of[o0 + p * b + half:o0 + p * b + b] = 0.0
    else:
        _half_block_out(a, a0 + half, pix, 0, p0, p1, rows, k, wf, bias, res, of, o0 + half, w0 + half, q * b + half,
                        b, bounds, acc, plan)
    if not one_pass:
        epilogue_run(of, o0 + p0 * b, (p1 - p0) * b, of, o0 + p0 * b, 0.0, rf, act, alpha, beta, post, post_alpha,
                     post_beta)


@numba.njit(**SEQ)
def _half_block_out(a, a0, pix, pix0, p0, p1, rows, k, wf, bias, res, of, o0, w0, bias0, b, bounds, acc, plan):
    """The first B / 2 channels of _blocked_out's block (output at o0, weights at w0, bias at bias0), as
    _blocked_out computes a block's B (the _half kernels): an output's last block whose real channels fill
    half of it at most (24 = 16 + 8 on AVX2; its caller zeros the other lanes), or either half of a block of
    a conv in groups of B / 2 channels (_half_groups_out: input, output and weights offset by the half)."""
    lo, hi, top = bounds
    chunked, kc, last, whole, n_acc, few = plan
    if chunked:
        for kb in range(0, last, kc):
            for g in range(0, n_acc, MR):
                micro_gemm_taps_half(kc, a, a0, pix, pix0 + g, rows, kb, wf, w0 + kb * b, b, acc, g * b, b, kb > 0)
    for p in range(p0, whole, MR):
        if chunked:
            micro_gemm_taps_seeded_half(k - last, a, a0, pix, pix0 + p - p0, rows, last, wf, w0 + last * b, b, of,
                                        o0 + p * b, b, bias, bias0, lo, hi, top, res, acc, (p - p0) * b)
        else:
            micro_gemm_taps_out_half(k, a, a0, pix, pix0 + p - p0, rows, 0, wf, w0, b, of, o0 + p * b, b, bias,
                                     bias0, lo, hi, top, res)
    if few:
        for p in range(whole, p1):
            micro_gemm_taps_pixel_half(k, a, a0, pix, pix0 + p - p0, rows, 0, wf, w0, b, acc, 0)
            _pixel_out_half(acc, 0, of, o0 + p * b, bias, bias0, lo, hi, top, res)
    else:
        g = whole - p0 if chunked else 0
        micro_gemm_taps_half(k - last if chunked else k, a, a0, pix, pix0 + whole - p0, rows, last if chunked else 0,
                             wf, w0 + (last * b if chunked else 0), b, acc, g * b, b, chunked and last > 0)
        for i in range(p1 - whole):
            _pixel_out_half(acc, (g + i) * b, of, o0 + (whole + i) * b, bias, bias0, lo, hi, top, res)


def _pixel_out_intrinsic(half: bool):
    def typer(typingctx, acc, s, of, d, bias, bias0, lo, hi, top, res):
        if not (_is_f32(acc, of, res) and (isinstance(bias, types.NoneType) or _is_f32(bias))):
            return None

        def codegen(context, builder, signature, args):
            width = vector_width(context)
            nv = taps_vectors(width) // (2 if half else 1)
            s_, d_ = _int64s(context, builder, signature, args, (1, 3))
            vec, i64 = ir.VectorType(ir.FloatType(), width), ir.IntType(64)
            src = _data_pointer(context, builder, signature.args[0], args[0], s_)
            sums = [builder.load(builder.bitcast(builder.gep(src, [ir.Constant(i64, j * width)]), vec.as_pointer()),
                                 align=4) for j in range(nv)]
            target = _data_pointer(context, builder, signature.args[2], args[2], d_)
            _store_through_epilogue(context, builder, args[4:10], signature.args[4:10], sums, 1, nv, target, d_,
                                    ir.Constant(i64, nv * width), bias_columns=True)
            return context.get_dummy_value()

        return types.void(acc, s, of, d, bias, bias0, lo, hi, top, res), codegen

    typer.__name__ = "_pixel_out_half" if half else "_pixel_out"
    return intrinsic(typer)


# _pixel_out(acc, s, of, d, bias, bias0, lo, hi, top, res): one pixel's taps_width() channels, acc[s:s + B],
# stored at of[d:d + B] through the one-pass epilogue from the registers (microkernel.py's: the bias along the
# channels from bias[bias0:], None for none; res indexed as of, empty for none). A block's last, partial group
# of pixels: the scalar loop it replaced, 3 ns an element, took as long as the block's whole groups on 4 x 4
# images (48 -> 288 channels at batch 8 65 -> 36 us). _pixel_out_half: the first B / 2 channels only.
_pixel_out = _pixel_out_intrinsic(False)
_pixel_out_half = _pixel_out_intrinsic(True)


@numba.njit(**SEQ)
def conv2d_blocked(x, wt, bias, residual, out, kernel, stride, padding, dilation,
                   act, alpha, beta, post, post_alpha, post_beta, out_channels, group_lanes):
    """out = post(act(conv2d(x, W) + bias) + residual) on the blocked layout, ungrouped: x (N, C / B, H,
    W, B), wt = pack_channel_panels(W, B) (O / B, C * KH * KW, B), out and residual (N, O / B, OH, OW,
    B); padding (top, left, bottom, right) zeros. Tasks: (image, band of MR-pixel groups, group of
    output blocks), one a WINDOW_TASK_MACS multiply-adds, WINDOW_MIN_TASKS to MIN_TASKS of them where the
    pixels allow (below PARALLEL_MIN_MACS, one); each gathers the input rows its band's windows read
    (BAND_BYTES at most, or one output row's) into scratch, zeros outside the image. out_channels as
    conv1x1_blocked's.

    group_lanes (0: ungrouped) for a grouped conv of as many input as output channels in groups of g channels,
    whole blocks, half ones or whole vectors of one (wt = pack_grouped_blocked(W, groups, B): a group's g lanes).
    Whole blocks (g a multiple of B): output block q reads its group's g / B input blocks, from q - q % (g / B)
    on. Half blocks (g = B / 2: RegNetY's 8 on AVX2): each half of output block q reads the same half of input
    block q. Whole vectors of fewer than half a block (_vector_groups: ResNeXt-50's 16 on AVX-512): each vector
    of output block q reads its group's lanes of input block q (micro_gemm_taps_grouped), and a last block the real
    channels (out_channels) fill half of at most runs half wide (RegNetX-400MF's 160 = 64 + 64 + 32 on 14 x 14:
    the conv 65 against 72 us in the profiled model, batch 1; 144 channels at batch 8 1.89-1.93 against 1.98-2.11
    ms alone, Intel Xeon, 2 threads). A grouped conv's tasks
    (unless one) take one group's output blocks each, gathering its input blocks only."""
    n_n, cb_n, h, w, b = x.shape
    k = wt.shape[1] // (kernel[0] * kernel[1])  # the reduction's lanes (pad_to_blocks, pack_grouped_blocked)
    ob_n = out.shape[1]
    if group_lanes == 0:
        fits = _reads_lanes(k, cb_n, b)
    else:  # each output block over its group's input lanes: as many blocks as the output's
        fits = ((group_lanes % b == 0 or 2 * group_lanes == b or _vector_groups(group_lanes, b)
                 or _lane_groups(group_lanes)) and ob_n == cb_n and k == group_lanes)
    if b != out.shape[4] or not fits:
        raise ValueError("conv2d_blocked: blocks of another width, or operands of mismatched shapes")
    _conv2d_blocked(x.reshape(-1), n_n, cb_n, k, h, w, False, wt, bias, residual, out, kernel, stride, padding,
                    dilation, act, alpha, beta, post, post_alpha, post_beta, out_channels, group_lanes)


@numba.njit(**SEQ)
def conv2d_blocked_nchw(x, wt, bias, residual, out, kernel, stride, padding, dilation,
                        act, alpha, beta, post, post_alpha, post_beta, out_channels):
    """conv2d_blocked of an NCHW x (N, C, H, W) into the blocked layout: a chain's first conv on an image's
    few channels (a stem's 3), whose input would take B lanes a pixel blocked. Each task gathers its band's
    rows of each channel as a plane of the scratch (a window's pixels one float apart, sharing cache lines),
    and the reduction reads the C real channels only: wt = pack_channel_panels(W, B) (O / B, C * KH * KW, B)."""
    n_n, c_n, h, w = x.shape
    _conv2d_blocked(x.reshape(-1), n_n, -(-c_n // out.shape[4]), c_n, h, w, True, wt, bias, residual, out, kernel,
                    stride, padding, dilation, act, alpha, beta, post, post_alpha, post_beta, out_channels, 0)


@numba.njit(**SEQ)
def _conv2d_blocked(xf, n_n, cb_n, c_n, h, w, nchw, wt, bias, residual, out, kernel, stride, padding, dilation,
                    act, alpha, beta, post, post_alpha, post_beta, out_channels, group_lanes):
    """conv2d_blocked of an input at xf whose first c_n lanes (blocked, cb_n blocks) or c_n channels (NCHW,
    cb_n = the blocks they would fill) the reduction reads (grouped: c_n lanes from an output block's group's
    first input block)."""
    (kh, kw), (sh, sw), (dh, dw), pt, pl = kernel, stride, dilation, padding[0], padding[1]
    b = out.shape[4]
    ob_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    k = c_n * kh * kw
    if b != taps_width() or wt.shape != (ob_n, k, b) or out.shape[0] != n_n:
        raise ValueError("conv2d_blocked: blocks of another width, or operands of mismatched shapes")
    half_q = _half_block(out_channels, ob_n, b)
    wp = (ow - 1) * sw + (kw - 1) * dw + 1  # a gathered row: every column a window reads
    macs = n_n * oh * ow * ob_n * b * k
    serial = macs < PARALLEL_MIN_MACS
    # tasks: an NCHW input's few channels (a stem's) gather cheaply, and fewer tasks balanced worse (3 -> 32
    # channels from 64 x 64 1.09x the time, 3 -> 24 from 96 x 96 1.16x)
    least = MIN_TASKS if nchw else min(MIN_TASKS, max(WINDOW_MIN_TASKS, macs // WINDOW_TASK_MACS))
    groups = -(-oh * ow // MR)
    # a grouped conv's tasks take one group's output blocks each (when parallel), and gather only its input
    # blocks: a band's bytes counted over all the input blocks made ResNeXt-50's 1024 -> 1024 3x3 stride 2
    # (groups of 32) a band an MR-pixel group, every band reading all the weights again
    group_blocks = -(-group_lanes // b)
    gathered = group_blocks if group_blocks and not serial else cb_n  # the input blocks a task gathers
    # every band reads all the weights: where they are large, the tasks split the output blocks first, and take
    # whole images where the (image, block) pairs give every thread two tasks (_one_band)
    heavy = ob_n * k * b * 4 > WINDOW_WEIGHT_BYTES
    many = (1 if _one_band(n_n * ob_n) else -(-least // (n_n * ob_n))) if heavy else -(-least // n_n)
    bands = 1 if serial else max(1, min(groups, many))
    gpb = -(-groups // bands)  # groups per band
    while gpb > 1 and (gpb * MR // ow + 2) * sh * gathered * b * wp * 4 > BAND_BYTES:
        gpb = -(-gpb // 2)
    bands = -(-groups // gpb)
    hin = 0  # the most rows a band gathers
    for bi in range(bands):
        y0, y1 = bi * gpb * MR // ow, (min(oh * ow, (bi + 1) * gpb * MR) - 1) // ow
        hin = max(hin, (y1 - y0) * sh + (kh - 1) * dh + 1)
    if gathered < cb_n:  # a group's output blocks a task
        n_g, per = -(-ob_n // group_blocks), group_blocks
    else:
        n_g, per = _block_groups(n_n * bands, ob_n, serial)
    # a pixel's stride in the scratch: a block's on the layout; an NCHW input's channels are gathered as planes,
    # so that the pixels a tap reads share cache lines (as lanes of blocks, each line held one float a
    # channel: AlexNet's 11x11 stride-4 stem ran at 0.6 of the machine's peak)
    ps = 1 if nchw else b
    # unpadded, the windows read the input where it lies (direct), rows of pitch w in planes of h rows;
    # else the band's rows gathered into scratch, rows of pitch wp in planes of hin rows
    direct = pt == 0 and pl == 0 and padding[2] == 0 and padding[3] == 0
    pitch, plane = (w, h * w) if direct else (wp, hin * wp)
    rows = np.empty(k, np.int64)  # reduction step (c, i, j): channel c's tap (i, j) from the window
    lanes = _lane_rows(c_n, plane, 1 if nchw else b)  # channel c's offset: c * plane on NCHW
    for c in range(c_n):
        for i in range(kh):
            for j in range(kw):
                rows[(c * kh + i) * kw + j] = lanes[c] + (i * dh * pitch + j * dw) * ps
    tasks = n_n * bands * n_g
    size = 0 if direct else (c_n if nchw else gathered * b) * hin * wp
    scratch_n = 1 if serial else min(num_threads(), tasks)
    scratch = aligned_empty(scratch_n * size, np.float32)
    held = np.full(scratch_n, -1, np.int64)  # the band (image * bands + band) each thread's scratch holds
    data = (xf, wt.reshape(-1), bias, residual_run(residual, out), out.reshape(-1), rows,
            (n_n, cb_n, h, w, b, ob_n, oh, ow, k, c_n, nchw, direct, half_q, group_lanes),
            (kh, dh, sh, sw, pt, pl, hin, wp, gpb, bands, n_g, per, gathered, kw, dw),
            (act, post), (alpha, beta, post_alpha, post_beta), scratch, held)
    run_tasks(_conv2d_task, tasks, data, serial)


@numba.njit(inline="always", **SEQ)
def _one_band(pairs):
    """Whether a conv2d_blocked of large weights (WINDOW_WEIGHT_BYTES) takes each (image, output block) pair as
    one task, all of the image's pixels: each block's weights are then read once an image, where bands of pixels
    read them once a band each, from memory in a model (its weights do not stay in cache from one forward to the
    next). Kernel alone, weights cycled over 12 copies, 2 threads, Intel Xeon, batch 1, two bands -> one:
    512 -> 512 3x3 on 7 x 7 1.78-1.95 -> 1.46-1.53 ms, 448 on 7 x 7 (7 blocks, 4 tasks on one thread and 3 on
    the other) 1.37-1.40 -> 1.16-1.20, 320 on 14 x 14 (5 blocks) 1.79-1.81 -> 1.57-1.70, 256 on 14 x 14
    1.03-1.05 -> 0.97-0.98, 256 stride 2 from 28 x 28 1.15-1.17 -> 1.10; 512 stride 2 from 14 x 14 level.
    Whole forwards at batch 1 (alternating processes, two each): ResNet-50 0.957, RegNetX-400MF 0.936, ResNeXt-50
    0.969. With fewer pairs than two a thread the threads need the bands."""
    return pairs >= 2 * num_threads()


@numba.njit(**SEQ)
def _conv2d_task(t, xf, wf, bias, rf, of, rows, dims, window, acts, params, scratch, held):
    """Task t of conv2d_blocked: the input rows its band's windows read into this thread's scratch
    (zeros outside the image; unless the conv is unpadded: direct, or the thread's last task gathered the same
    band: held), then its output blocks (_blocked_out)."""
    n_n, cb_n, h, w, b, ob_n, oh, ow, k, c_n, nchw, direct, half_q, group_lanes = dims
    group_blocks = -(-group_lanes // b)  # the input blocks a group reads (half blocks: one)
    kh, dh, sh, sw, pt, pl, hin, wp, gpb, bands, n_g, per, gathered, kw, dw = window
    row = (ow, sw, kw, dw, group_lanes)  # an output row's geometry and the groups' lanes (_row_call)
    gi, bi, n = t % n_g, (t // n_g) % bands, t // (n_g * bands)
    ps = 1 if nchw else b  # a pixel's stride in the scratch: an NCHW input's channels gathered as planes
    p0 = bi * gpb * MR
    p1 = min(oh * ow, p0 + gpb * MR)
    y0 = p0 // ow
    iy0 = y0 * sh - pt  # the band's first gathered row in the image
    # each pixel's window: in the image itself (direct: rows of pitch w from the band's first), or in the
    # scratch (rows of pitch wp); MR past the band, the first's
    pitch = w if direct else wp
    pix = np.zeros(p1 - p0 + MR, np.int64)
    oy, ox = 0, p0 - y0 * ow  # pixel p's row from the band's first, and column
    for p in range(p1 - p0):
        pix[p] = (oy * sh * pitch + ox * sw) * ps
        ox += 1
        if ox == ow:
            oy, ox = oy + 1, 0
    q0, q1 = gi * per, min(ob_n, (gi + 1) * per)
    if direct:  # (two calls, not one of either array: a read-only input would not unify with scratch)
        a0 = (n * (c_n if nchw else cb_n) * h + iy0) * w * ps
        _window_out(xf, a0, h * w * b, group_lanes, pix, p0, p1, rows, k, wf, bias, rf, of, n * ob_n, oh * ow, b, q0,
                    q1, acts, params, half_q, row)
        return
    size = (c_n if nchw else gathered * b) * hin * wp
    src = _band_scratch(scratch, size)
    own = thread_id()
    own = own if own < held.size else 0  # as _band_scratch picks the scratch
    # the input blocks the task's output blocks read: all, or (grouped) their groups' only, which tasks of other
    # output blocks of the band do not share
    c0, c1 = (0, cb_n) if group_blocks == 0 else (q0 - q0 % group_blocks, min(cb_n, q1 + -q1 % group_blocks))
    band = n * bands + bi if group_blocks == 0 else (n * bands + bi) * n_g + gi
    if held[own] != band:  # consecutive tasks share a band: t % n_g is the task's group of blocks
        held[own] = band
        n_rows = ((p1 - 1) // ow - y0) * sh + (kh - 1) * dh + 1
        if nchw:
            for c in range(c_n):
                _gather_rows(src, c * hin * wp, xf, (n * c_n + c) * h * w, iy0, n_rows, h, w, wp, pl, 1)
        else:  # input block cb into the scratch's block cb - c0
            for cb in range(c0, c1):
                _gather_rows(src, (cb - c0) * hin * wp * b, xf, (n * cb_n + cb) * h * w * b, iy0, n_rows, h, w, wp,
                             pl, b)
    _window_out(src, -c0 * hin * wp * b, hin * wp * b, group_lanes, pix, p0, p1, rows, k, wf, bias, rf, of, n * ob_n,
                oh * ow, b, q0, q1, acts, params, half_q, row)


@numba.njit(inline="always", **SEQ)
def _window_out(a, a0, block_size, group_lanes, pix, p0, p1, rows, k, wf, bias, rf, of, ob0, hw, b, q0, q1, acts,
                params, half_q, row):
    """_conv2d_task's output blocks [q0, q1) from its windows at a[a0:] (an input block every block_size
    elements): in one _blocked_out call, or (grouped: group_lanes) each block from its group's first input
    block on, or (groups of half blocks) each block's halves from the same halves of its input block."""
    if group_lanes == 0:
        _blocked_out(a, a0, pix, 0, p0, p1, rows, k, wf, bias, rf, of, ob0, hw, b, q0, q1, acts, params, half_q)
    elif _vector_groups(group_lanes, b):
        _vector_groups_out(a, a0, block_size, group_lanes, pix, p0, p1, rows, k, wf, bias, rf, of, ob0, hw, b, q0, q1,
                           acts, params, half_q, row)
    elif _lane_groups(group_lanes):
        _lane_groups_out(a, a0, block_size, group_lanes, pix, p0, p1, rows, k, wf, bias, rf, of, ob0, hw, b, q0, q1,
                         acts, params, half_q, row)
    elif group_lanes < b:
        for q in range(q0, q1):
            _half_groups_out(a, a0 + q * block_size, pix, p0, p1, rows, k, wf, bias, rf, of, ob0, hw, b, q, acts,
                             params, half_q)
    else:
        group_blocks = group_lanes // b
        for q in range(q0, q1):
            _blocked_out(a, a0 + (q - q % group_blocks) * block_size, pix, 0, p0, p1, rows, k, wf, bias, rf, of, ob0,
                         hw, b, q, q + 1, acts, params, half_q)


@numba.njit(inline="always", **SEQ)
def _vector_groups(group_lanes, b):
    """Whether a conv's groups of group_lanes channels are whole vectors of a block of b lanes, fewer than half of
    it, a power of two (ir/ops/layout.py's vector_groups, in a kernel)."""
    return group_lanes < b // 2 and group_lanes % vector_floats() == 0 and group_lanes & (group_lanes - 1) == 0


@numba.njit(inline="always", **SEQ)
def _lane_groups(group_lanes):
    """Whether a conv's groups of group_lanes channels are 2 or 4 lanes of a vector (ir/ops/layout.py's
    lane_groups, in a kernel)."""
    return group_lanes == 2 or group_lanes == 4


def _small_groups_out_for(lanes: bool, name: str):
    """_vector_groups_out (lanes false) or _lane_groups_out: one source, two functions, each compiled with its own
    kernels only (every kernel intrinsic is inlined into its caller)."""

    def out(a, a0, block_size, g, pix, p0, p1, rows, k, wf, bias, rf, of, ob0, hw, b, q0, q1, acts, params, half_q,
            row):
        """Output pixels [p0, p1) of output blocks [q0, q1) of a conv in groups of g channels, whole vectors of a
        block (_vector_groups) or 2 or 4 lanes of a vector (_lane_groups, lanes true). Block q from input block q
        (at a[a0 + q * block_size:]), pixel p's step r (lane r < g of group 0, and the tap) at pix[p - p0] +
        rows[r], each vector of the block over its own group's lanes (micro_gemm_taps_grouped, MR pixels a call),
        or each lane over its group's, the input vectors shuffled in registers (micro_gemm_taps_lanes, over the
        k / g taps, LANE_GROUP_PIXELS pixels a call), stored from the registers through the one-pass epilogue;
        the last partial call's pixels through scratch, out one by one. Groups of vectors compute block half_q
        (the last, where the real channels fill half of it at most; -1 for none) half wide and zero its other
        lanes (micro_gemm_taps_grouped_half): RegNetX-400MF's 32-channel stage, 400 = 6 * 64 + 16. Groups of lanes
        compute every block whole: the lanes that pad the last one have zero weights and bias."""
        act, post = acts
        alpha, beta, post_alpha, post_beta = params
        one_pass, (lo, hi, top), res = _one_pass(acts, params, rf)
        n = LANE_GROUP_PIXELS if lanes else MR
        whole = p0 + (p1 - p0) // n * n
        acc = aligned_empty(n * b, np.float32)
        for q in range(q0, q1):
            aq, w0, o0 = a0 + q * block_size, q * k * b, (ob0 + q) * hw * b
            if not lanes and q == half_q:
                _vector_groups_half(a, aq, g, pix, p0, p1, whole, rows, k, wf, w0, bias, q * b, of, o0, b, lo, hi,
                                    top, res, acc, row)
                if not one_pass:
                    epilogue_run(of, o0 + p0 * b, (p1 - p0) * b, of, o0 + p0 * b, 0.0, rf, act, alpha, beta, post,
                                 post_alpha, post_beta)
                continue
            for p in range(p0, whole, n):
                if lanes:
                    _lanes_call(g, k // g, a, aq, pix, p - p0, rows, wf, w0, b, of, o0 + p * b, bias, q * b, lo, hi,
                                top, res)
                elif not _row_call(False, row, p, k, a, aq + pix[p - p0], rows, wf, w0, b, of, o0 + p * b, bias, q * b,
                                   lo, hi, top, res):
                    micro_gemm_taps_out_grouped(k, a, aq, pix, p - p0, rows, 0, wf, w0, b, of, o0 + p * b, b, bias,
                                                q * b, lo, hi, top, res, g)
            if whole < p1:  # (pix holds MR entries past p1)
                if lanes:
                    _lanes_call(g, k // g, a, aq, pix, whole - p0, rows, wf, w0, b, acc, 0, None, 0, lo, hi, top, res)
                else:
                    micro_gemm_taps_grouped(k, a, aq, pix, whole - p0, rows, 0, wf, w0, b, acc, 0, b, False, g)
                for i in range(p1 - whole):
                    _pixel_out(acc, i * b, of, o0 + (whole + i) * b, bias, q * b, lo, hi, top, res)
            if not one_pass:
                epilogue_run(of, o0 + p0 * b, (p1 - p0) * b, of, o0 + p0 * b, 0.0, rf, act, alpha, beta, post,
                             post_alpha, post_beta)

    return compiled_as(out, name)


@numba.njit(inline="always", **SEQ)
def _vector_groups_half(a, aq, g, pix, p0, p1, whole, rows, k, wf, w0, bias, bias0, of, o0, b, lo, hi, top, res, acc,
                        row):
    """_vector_groups_out's pixels [p0, p1) of a block computed half wide (MR a call up to `whole`, the rest
    through acc), its other lanes zeroed."""
    for p in range(p0, whole, MR):
        if not _row_call(True, row, p, k, a, aq + pix[p - p0], rows, wf, w0, b, of, o0 + p * b, bias, bias0, lo, hi,
                         top, res):
            micro_gemm_taps_out_grouped_half(k, a, aq, pix, p - p0, rows, 0, wf, w0, b, of, o0 + p * b, b, bias, bias0,
                                             lo, hi, top, res, g)
    if whole < p1:
        micro_gemm_taps_grouped_half(k, a, aq, pix, whole - p0, rows, 0, wf, w0, b, acc, 0, b, False, g)
        for i in range(p1 - whole):
            _pixel_out_half(acc, i * b, of, o0 + (whole + i) * b, bias, bias0, lo, hi, top, res)
    for p in range(p0, p1):
        of[o0 + p * b + b // 2:o0 + p * b + b] = 0.0


@numba.njit(inline="always", **SEQ)
def _row_call(half, row, p, k, a, a0, rows, wf, w0, b, of, o0, bias, bias0, lo, hi, top, res):
    """_vector_groups_out's MR pixels from p through micro_gemm_taps_out_grouped_row (or its _half kind), each input
    column's lanes broadcast once for the window columns that read it, where they lie in one output row, the
    window is 3 columns wide, undilated, at stride 1 or 2 (the literals the kernel unrolls), and each group is
    one vector (the kernel reads vector v's lanes at v * W): whether it ran.
    RegNetX-400MF's convs in groups of 16 alone (AVX-512, Zen 5, 2 threads, batch 1, against
    micro_gemm_taps_out_grouped on every pixel): 64 channels on 28 x 28 52-54 -> 38 us, 160 on 14 x 14 35-36 -> 28,
    384 on 7 x 7 (rows of 7: one row group each) 22-24 -> 22, 32 on 56 x 56 (half wide) 98-110 -> 75-79. Whole
    forwards, alternating processes: RegNetX-400MF 0.88-0.98 of the time at batch 1, 0.91-0.97 at 8; RegNetY-800MF
    0.92-0.95 and 0.88-0.92."""
    ow, sw, kw, dw, g = row
    if kw != 3 or dw != 1 or sw > 2 or p % ow + MR > ow or g != vector_floats():  # (its groups' lanes: v * W)
        return False
    if half:
        if sw == 1:
            micro_gemm_taps_out_grouped_row_half(k // 3, a, a0, rows, 0, wf, w0, b, of, o0, b, bias, bias0, lo, hi,
                                                 top, res, 1, 3, 1)
        else:
            micro_gemm_taps_out_grouped_row_half(k // 3, a, a0, rows, 0, wf, w0, b, of, o0, b, bias, bias0, lo, hi,
                                                 top, res, 2, 3, 1)
    elif sw == 1:
        micro_gemm_taps_out_grouped_row(k // 3, a, a0, rows, 0, wf, w0, b, of, o0, b, bias, bias0, lo, hi, top, res,
                                        1, 3, 1)
    else:
        micro_gemm_taps_out_grouped_row(k // 3, a, a0, rows, 0, wf, w0, b, of, o0, b, bias, bias0, lo, hi, top, res,
                                        2, 3, 1)
    return True


@numba.njit(inline="always", **SEQ)
def _lanes_call(g, kt, a, a0, pix, q0, rows, wf, w0, b, c, c0, bias, bias0, lo, hi, top, res):
    """micro_gemm_taps_lanes_out into c through the epilogue, or (bias None) micro_gemm_taps_lanes into scratch c;
    g (2 or 4) as the literal the kernels unroll."""
    if bias is None:
        if g == 4:
            micro_gemm_taps_lanes(kt, a, a0, pix, q0, rows, 0, wf, w0, b, c, c0, b, 4)
        else:
            micro_gemm_taps_lanes(kt, a, a0, pix, q0, rows, 0, wf, w0, b, c, c0, b, 2)
    elif g == 4:
        micro_gemm_taps_lanes_out(kt, a, a0, pix, q0, rows, 0, wf, w0, b, c, c0, b, bias, bias0, lo, hi, top, res, 4)
    else:
        micro_gemm_taps_lanes_out(kt, a, a0, pix, q0, rows, 0, wf, w0, b, c, c0, b, bias, bias0, lo, hi, top, res, 2)


_vector_groups_out = _small_groups_out_for(False, "_vector_groups_out")
_lane_groups_out = _small_groups_out_for(True, "_lane_groups_out")


@numba.njit(**SEQ)
def conv_transpose_blocked(x, wt, bias, out, stride):
    """conv_transpose2d on the blocked layout whose kernel is its stride (no padding, groups or dilation: a
    UNet's 2x2 stride-2 upsampling): no two taps write one output pixel, so each tap (i, j) is a 1x1 conv of
    the input whose output pixels land `stride` apart, stored from the registers with that pixel stride.
    x (N, C / B, H, W, B), wt = pack_transpose_blocked(W, B) (KH * KW, O / B, C, B), out (N, O / B, H * KH,
    W * KW, B), bias of whole blocks. Tasks: (image, input row, group of output blocks); a row's last partial
    group of MR pixels goes through scratch."""
    n_n, cb_n, h, w, b = x.shape
    sh, sw = stride
    ob_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    k = wt.shape[2]  # the reduction's lanes (pad_to_blocks)
    if (b != taps_width() or out.shape[4] != b or out.shape[0] != n_n or wt.shape != (sh * sw, ob_n, k, b)
            or not _reads_lanes(k, cb_n, b) or (oh, ow) != (h * sh, w * sw) or bias.size != ob_n * b):
        raise ValueError("conv_transpose_blocked: blocks of another width, or operands of mismatched shapes")
    serial = n_n * h * w * sh * sw * ob_n * b * k < PARALLEL_MIN_MACS
    n_g, per = _block_groups(n_n * h, ob_n, serial)
    pix = np.zeros(w + MR, np.int64)  # a row's pixel x from the row's start; MR past the row, the first's
    for p in range(w):
        pix[p] = p * b
    rows = _lane_rows(k, h * w, b)
    tasks = n_n * h * n_g
    dims = (n_n, cb_n, k, h, w, b, ob_n, sh, sw, n_g, per)
    data = (x.reshape(-1), wt.reshape(-1), bias, out.reshape(-1), pix, rows, dims)
    run_tasks(_conv_transpose_task, tasks, data, serial)


@numba.njit(**SEQ)
def _conv_transpose_task(t, xf, wf, bias, of, pix, rows, dims):
    """Task t of conv_transpose_blocked: one input row's pixels, each tap, the task's output blocks."""
    n_n, cb_n, k, h, w, b, ob_n, sh, sw, n_g, per = dims
    gi, m = t % n_g, t // n_g
    n, y = m // h, m % h
    oh, ow = h * sh, w * sw
    a0 = (n * cb_n * h + y) * w * b  # the row's first pixel in block 0
    lo, hi = np.float32(-np.inf), np.float32(np.inf)
    whole = w // MR * MR
    acc = aligned_empty(MR * b, np.float32)
    for tap in range(sh * sw):
        i, j = tap // sw, tap % sw
        for q in range(gi * per, min(ob_n, (gi + 1) * per)):
            w0 = (tap * ob_n + q) * k * b
            o0 = (((n * ob_n + q) * oh + y * sh + i) * ow + j) * b  # output pixel (y * sh + i, j)
            for p in range(0, whole, MR):
                micro_gemm_taps_out(k, xf, a0, pix, p, rows, 0, wf, w0, b, of, o0 + p * sw * b, sw * b, bias, q * b,
                                    lo, hi, lo, of[:0])
            if whole < w:
                micro_gemm_taps(k, xf, a0, pix, whole, rows, 0, wf, w0, b, acc, 0, b, False)
                for p in range(w - whole):
                    d = o0 + (whole + p) * sw * b
                    for jj in range(b):
                        of[u(d + jj)] = acc[p * b + jj] + bias[q * b + jj]


def pack_transpose_blocked(weight: np.ndarray, block: int, segments=None) -> np.ndarray:
    """A conv_transpose2d's (C, O, KH, KW) weight (ungrouped) as conv_transpose_blocked takes it: each tap's
    (O, C) 1x1 conv, its input channels in `segments` (pad_to_blocks), packed by pack_channel_panels:
    (KH * KW, O / block, K, block), K the input's lanes to its last real one."""
    c_n, o_n, kh, kw = weight.shape
    taps = [pad_to_blocks(np.ascontiguousarray(weight[:, :, i, j].T)[:, :, None, None], block, segments=segments)
            for i in range(kh) for j in range(kw)]
    return np.stack([pack_channel_panels(t, block) for t in taps])


@numba.njit(inline="always", **SEQ)
def _gather_rows(src, d0, xf, x0, iy0, n_rows, h, w, wp, pl, b, fill=0.0):
    """Rows iy0 .. iy0 + n_rows - 1 of one block of an image (at xf[x0:], h rows of w pixels' B channels)
    into src[d0:] as rows of wp pixels, the image's column 0 at column pl; `fill` outside the image."""
    left, right = min(pl, wp), max(min(pl, wp), min(wp, pl + w))  # a row's columns inside the image
    for r in range(n_rows):
        iy, d = iy0 + r, d0 + r * wp * b
        if iy < 0 or iy >= h:
            src[d:d + wp * b] = fill
            continue
        src[d:d + left * b] = fill
        if right > left:
            copy_run(src, d + left * b, xf, x0 + iy * w * b + (left - pl) * b, (right - left) * b)
        src[d + right * b:d + wp * b] = fill


@intrinsic
def _window_transform(typingctx, src, e, row, col, vf, o, plane, tile):
    """Winograd's input transform of one a x a window (a = tile + 2: F(2x2, 3x3) for tile 2, F(4x4, 3x3) for
    4, a constant), W channels (a vector) at once: d[r][q] = src[e + r*row + q*col:][:W]; vf[o + (a*i +
    j)*plane:][:W] = (B^T d B)[i, j]. In LLVM IR, as winograd.py's _input_vector (numba's loop over the
    channels stays scalar behind overlap checks)."""
    if not (all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (src, vf))
            and isinstance(tile, types.IntegerLiteral) and tile.literal_value in (2, 4)):
        return None
    a = tile.literal_value + 2

    def codegen(context, builder, signature, args):
        _, load, store = _vector_step(context, builder, signature, args, (0, 4))
        e_, row_, col_, o_, plane_ = _int64s(context, builder, signature, args, (1, 2, 3, 5, 6))
        i64 = ir.IntType(64)
        d = [[load(0, builder.add(e_, builder.add(builder.mul(ir.Constant(i64, r), row_),
                                                     builder.mul(ir.Constant(i64, q), col_)))) for q in range(a)]
             for r in range(a)]
        for k, value in enumerate(input_transform(builder, d) if a == 4 else input_transform4(builder, d)):
            store(value, 4, builder.add(o_, builder.mul(ir.Constant(i64, k), plane_)))
        return context.get_dummy_value()

    return types.void(src, e, row, col, vf, o, plane, tile), codegen


@intrinsic
def _tile_out(typingctx, mf, q, plane, of, d, row, col, bias, bias0, lo, hi, top, res, tile):
    """Winograd's output transform of one tile x tile tile (tile 2 or 4, a constant; a = tile + 2), W
    channels (a vector) at once: m[k] = mf[q + k*plane:][:W] for k < a^2, Y = A^T m A, Y[i, j] stored at
    of[d + i*row + j*col:][:W] through the one-pass epilogue from the registers (microkernel.py's, the
    bias along the vector from bias[bias0:]; res indexed as of, empty for none, may be of itself)."""
    if not (all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (mf, of, res))
            and isinstance(tile, types.IntegerLiteral) and tile.literal_value in (2, 4)
            and (isinstance(bias, types.NoneType) or (isinstance(bias, types.Array) and bias.dtype == types.float32))):
        return None
    n = tile.literal_value

    def codegen(context, builder, signature, args):
        _, load, _ = _vector_step(context, builder, signature, args, (0,))
        q_, plane_, d_, row_, col_ = _int64s(context, builder, signature, args, (1, 2, 4, 5, 6))
        i64 = ir.IntType(64)
        m = [load(0, builder.add(q_, builder.mul(ir.Constant(i64, k), plane_))) for k in range((n + 2) ** 2)]
        of_data = cgutils.create_struct_proxy(signature.args[3])(context, builder, value=args[3]).data
        rows = output_transform(builder, m) if n == 2 else output_transform4(builder, m)
        for i, y in enumerate(rows):  # output row i's pixels, col apart
            c0 = builder.add(d_, builder.mul(ir.Constant(i64, i), row_))
            _store_through_epilogue(context, builder, args[7:13], signature.args[7:13], list(y), n, 1,
                                    builder.gep(of_data, [c0]), c0, col_, bias_columns=True)
        return context.get_dummy_value()

    return types.void(mf, q, plane, of, d, row, col, bias, bias0, lo, hi, top, res, tile), codegen


# Blocked 3x3 stride-1 convs run Winograd F(4x4, 3x3) with this many (input, output) channel pairs at least
# and this many 4x4 tiles a batch: kernels alone, F(4x4) / direct conv2d_blocked (2 threads, Zen 3 EPYC,
# AVX2): 32 -> 16 channels on 64 x 64 0.89, 16 -> 32 on 32 x 32 0.94, 32 -> 32 0.73, 64 -> 64 on 16 x 16
# 0.63, on 56 x 56 0.43, 128 -> 128 on 28 x 28 0.34, 256 -> 256 on 14 x 14 0.46 (F(2x2): 0.51-1.27 on
# those); 16 -> 16 on 64 x 64 1.13; with 4 tiles (8 x 8 and 7 x 7 images) F(2x2) did as well or better
# (64 -> 128 on 8 x 8: 0.87 against 0.91; 512 -> 512 on 7 x 7 0.73 against 0.79)
F4_MIN_CHANNEL_PAIRS = 512
F4_MIN_TILES = 16


def winograd_f4_pays(n: int, c: int, o: int, oh: int, ow: int) -> bool:
    """Whether a blocked 3x3 stride-1 conv of c -> o channels with n output planes oh x ow runs F(4x4, 3x3)."""
    return c * o >= F4_MIN_CHANNEL_PAIRS and n * -(-oh // 4) * -(-ow // 4) >= F4_MIN_TILES


def pad_to_blocks(weight: np.ndarray, block: int, depthwise: bool = False, segments=None) -> np.ndarray:
    """A conv's (O, C, KH, KW) weight with zero channels added, so that its output channels are whole blocks
    and (but for a depthwise conv's) its input channels are the input's lanes up to its last real one: its
    channels in `segments` (a concat's parts, each from a block's first lane: ir/ops/layout.py; default
    one), zero weights for the lanes that pad a segment but the last. The lanes after the last real one are
    left out: the blocked convs' reductions run over an input's first k lanes (the weight's), so that 24
    channels reduce over 24 steps, not a padded block's 32 (conv1x1_blocked 24 -> 144 on 56 x 56: 0.85 of
    the time). A depthwise conv's channels in its segments. The channels that pad a value's blocks neither
    reach a real channel nor get anything but act(0 + 0) themselves."""
    o_n, c_n, kh, kw = weight.shape
    if depthwise:
        lanes, total = segment_lanes(segments or (o_n,), block)
        padded = np.zeros((total, 1, kh, kw), weight.dtype)
        padded[lanes] = weight
        return padded
    lanes, _ = segment_lanes(segments or (c_n,), block)
    reduced = int(lanes[-1]) + 1 if len(lanes) else 0  # the reduction's lanes: to the last real one
    if reduced == c_n and o_n % block == 0:
        return weight
    padded = np.zeros((-(-o_n // block) * block, reduced, kh, kw), weight.dtype)
    padded[:o_n, lanes] = weight
    return padded


def group_lanes(groups: int, channels: int, block: int) -> int:
    """conv2d_blocked's group_lanes for a conv of `groups` groups of `channels` input and output channels in
    all: a group's channels, or 0 where they are neither whole blocks, half ones, whole vectors of one nor a
    few lanes of a vector (ir/ops/layout.py's vector_groups and lane_groups)."""
    g = channels // groups
    return g if g * groups == channels and (g % block == 0 or 2 * g == block or vector_groups(g, block)
                                            or lane_groups(g, block)) else 0


def pack_grouped_blocked(weight: np.ndarray, groups: int, block: int) -> np.ndarray:
    """A grouped conv's (O, O / groups, KH, KW) weight (as many input channels as output, groups of whole
    blocks, half ones, whole vectors of one or a few lanes of a vector) for conv2d_blocked's group_lanes: (O / B,
    O / groups * KH * KW, B), each output block's panel over its groups' input lanes (a block in smaller groups
    than a block: each lane over its own group's), as pack_channel_panels packs an ungrouped conv's, the last
    block padded with zero channels."""
    if group_lanes(groups, weight.shape[0], block) == 0:
        raise ValueError(f"pack_grouped_blocked: groups of {weight.shape[1]} channels are neither whole blocks of "
                         f"{block}, half ones, whole vectors of one nor 2 or 4 lanes of a vector")
    return pack_channel_panels(weight, block)


def pad_bias(bias: np.ndarray, block: int, segments=None) -> np.ndarray:
    """A blocked conv's bias with zeros in the lanes padding its output's blocks (its channels in `segments`:
    a depthwise conv's input's; default one)."""
    lanes, total = segment_lanes(segments or (bias.shape[0],), block)
    padded = np.zeros(total, bias.dtype)
    padded[lanes] = bias
    return padded


def pack_winograd_blocked(weight: np.ndarray, block: int, tile: int = 2, segments=None) -> np.ndarray:
    """The Winograd-transformed weight U = G g G^T of a (O, C, 3, 3) float32 weight (winograd.py's
    weight_transform; F(2x2, 3x3) for tile 2, F(4x4, 3x3) for 4) as winograd_blocked takes it: (a^2, O /
    block, K, block), a = tile + 2, O padded to whole blocks, K the input's lanes to its last real one
    (pad_to_blocks), U[k]'s output block q's weights for input lane c side by side: each of the a^2
    products is a blocked 1x1 conv."""
    padded = pad_to_blocks(weight, block, segments=segments)  # (O, C, 3, 3), O whole blocks
    (o_n, c_n), a = padded.shape[:2], tile + 2
    up = np.empty((a * a, o_n // block, c_n, block), np.float32)
    for o0, o1, chunk in transform_chunks(padded, tile, block):  # (a^2, o1 - o0, C) each: no 4x copy of it all
        up[:, o0 // block:o1 // block] = chunk.reshape(a * a, (o1 - o0) // block, block, c_n).transpose(0, 1, 3, 2)
    return up


@numba.njit(**SEQ)
def winograd_blocked(x, up, bias, residual, out, pt, pl, act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, 3x3 weight, stride 1, padding top pt / left pl) + bias) + residual) by
    Winograd (winograd.py) on the blocked layout: x (N, C / B, H, W, B), up = pack_winograd_blocked(weight,
    B, tile), out and residual (N, O / B, OH, OW, B); bias may be None, residual None or empty for none.
    F(2x2, 3x3) for up's 16 planes, F(4x4, 3x3) for 36 (tile x tile outputs from a = tile + 2 square
    windows). The tiles take the pixels' place: V[k] (C / B, tiles, B) and the products M[k] = V[k] U[k]
    (O / B, tiles, B), each a blocked 1x1 conv over the tiles (_blocked_out), and both transforms run
    over a block's B channels at once, a vector per window's pixel. Runs of tile rows (of all the
    images, one after another) keep V and M under RUN_BYTES each."""
    n_n, cb_n, h, w, b = x.shape
    ob_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    c_n, planes, k = cb_n * b, up.shape[0], up.shape[2]  # the products' lanes (pad_to_blocks)
    if (b != taps_width() or planes not in (16, 36) or up.shape[1] != ob_n or up.shape[3] != b
            or not _reads_lanes(k, cb_n, b) or out.shape[0] != n_n or out.shape[4] != b):
        raise ValueError("winograd_blocked: blocks of another width, or operands of mismatched shapes")
    tile = 2 if planes == 16 else 4
    th, tw = -(-oh // tile), -(-ow // tile)
    rows_n = n_n * th  # tile rows, image after image
    per_row = planes * max(c_n, ob_n * b) * tw * 4  # bytes of V or M per tile row
    run = max(1, min(rows_n, RUN_BYTES // per_row))
    t_max = run * tw
    vbuf = aligned_empty(planes * cb_n * t_max * b, np.float32)
    mbuf = aligned_empty(planes * ob_n * t_max * b, np.float32)
    pix = np.zeros(t_max + MR, np.int64)  # tile t's block of channels at t * B
    pix[:t_max] = np.arange(t_max) * b
    rows = np.empty(k, np.int64)
    xf, uf, of, rf = x.reshape(-1), up.reshape(-1), out.reshape(-1), residual_run(residual, out)
    dims = (n_n, cb_n, h, w, b, ob_n, oh, ow, th, tw, pt, pl, tile)
    serial = planes * n_n * th * tw * k * ob_n * b < PARALLEL_MIN_MACS  # the products' multiply-adds
    for r0 in range(0, rows_n, run):
        r1 = min(rows_n, r0 + run)
        t_n = (r1 - r0) * tw
        rows[:] = _lane_rows(k, t_n, b)
        v_plane, m_plane = cb_n * t_n * b, ob_n * t_n * b
        run_tasks(_wino_input_task, cb_n * (r1 - r0), (xf, vbuf, dims, r0, r1, v_plane), serial)
        chunks, cg = _pixel_chunks(t_n, k)
        n_g, per = _block_groups(planes * chunks, ob_n, serial)
        products = (uf, vbuf, mbuf, pix, rows, (k, ob_n, b, t_n, chunks, cg, n_g, per, v_plane, m_plane))
        outputs = (mbuf, of, bias, rf, dims, r0, r1, m_plane, (act, post), (alpha, beta, post_alpha, post_beta))
        run_tasks(_wino_products_task, planes * chunks * n_g, products, serial)
        run_tasks(_wino_output_task, ob_n * (r1 - r0), outputs, serial)


@numba.njit(**SEQ)
def _wino_input_task(t, xf, vf, dims, r0, r1, v_plane):
    """Task t of winograd_blocked's input transform: block cb's B channels of one tile row, V[a*r + q]
    = (B^T d B)[r, q] for each tile's a x a window d, a vector of channels at a time (_window_transform):
    read where it lies inside the image, from a zero-padded copy at its edges."""
    n_n, cb_n, h, w, b, ob_n, oh, ow, th, tw, pt, pl, tile = dims
    a = tile + 2
    cb, rr = t % cb_n, r0 + t // cb_n
    n, ty = rr // th, rr % th
    t_n = (r1 - r0) * tw
    n_v = vector_floats()
    d = aligned_empty(a * a * b, np.float32)  # an edge window: pixel (r, q)'s B channels at (a*r + q) * B
    x0 = (n * cb_n + cb) * h * w * b
    iy0 = tile * ty - pt
    for tx in range(tw):
        ix0 = tile * tx - pl
        o = cb * t_n * b + ((rr - r0) * tw + tx) * b
        if iy0 >= 0 and iy0 + a <= h and ix0 >= 0 and ix0 + a <= w:
            for j in range(0, b, n_v):
                if tile == 2:
                    _window_transform(xf, x0 + (iy0 * w + ix0) * b + j, w * b, b, vf, o + j, v_plane, 2)
                else:
                    _window_transform(xf, x0 + (iy0 * w + ix0) * b + j, w * b, b, vf, o + j, v_plane, 4)
            continue
        for r in range(a):
            for q in range(a):
                iy, ix, e = iy0 + r, ix0 + q, (a * r + q) * b
                if iy >= 0 and iy < h and ix >= 0 and ix < w:
                    copy_run(d, e, xf, x0 + (iy * w + ix) * b, b)
                else:
                    d[e:e + b] = 0
        for j in range(0, b, n_v):
            if tile == 2:
                _window_transform(d, j, a * b, b, vf, o + j, v_plane, 2)
            else:
                _window_transform(d, j, a * b, b, vf, o + j, v_plane, 4)


@numba.njit(**SEQ)
def _wino_products_task(t, uf, vf, mf, pix, rows, dims):
    """Task t of winograd_blocked's products: M[k] = V[k] U[k] for plane k, a chunk of tiles and a
    group of output blocks, as a blocked 1x1 conv over the tiles (c_n steps: V's first c_n lanes)."""
    c_n, ob_n, b, t_n, chunks, cg, n_g, per, v_plane, m_plane = dims
    gi, ci, k = t % n_g, (t // n_g) % chunks, t // (n_g * chunks)
    p0 = ci * cg * MR
    _blocked_out(vf[k * v_plane:(k + 1) * v_plane], 0, pix, p0, p0, min(t_n, p0 + cg * MR), rows, c_n,
                 uf[k * ob_n * c_n * b:(k + 1) * ob_n * c_n * b], None, mf[k * m_plane:(k + 1) * m_plane][:0],
                 mf[k * m_plane:(k + 1) * m_plane], 0, t_n, b, gi * per, min(ob_n, (gi + 1) * per), (0, 0),
                 (0.0, 0.0, 0.0, 0.0))


@numba.njit(**SEQ)
def _wino_output_task(t, mf, of, bias, rf, dims, r0, r1, m_plane, acts, params):
    """Task t of winograd_blocked's output transform: block ob's B channels of one tile row, each
    tile's outputs A^T m A a vector of channels at a time, stored through the one-pass epilogue
    from the registers (_tile_out); a tile past the output's last row or column through scratch;
    activations of more than one pass by epilogue_run over the tile row's output rows after."""
    n_n, cb_n, h, w, b, ob_n, oh, ow, th, tw, pt, pl, tile = dims
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    one_pass = act <= ONE_PASS and post <= 1
    bounds = one_pass_bounds(act, alpha, beta, post) if one_pass else (-np.inf, np.inf, -np.inf)
    lo, hi, top = np.float32(bounds[0]), np.float32(bounds[1]), np.float32(bounds[2])
    res = rf if one_pass else rf[:0]
    ob, rr = t % ob_n, r0 + t // ob_n
    n, ty = rr // th, rr % th
    t_n = (r1 - r0) * tw
    n_v = vector_floats()
    y = aligned_empty(tile * tile * b, np.float32)  # an edge tile's outputs (i, jx) at (tile * i + jx) * B
    no = np.float32(-np.inf)
    o0 = (n * ob_n + ob) * oh * ow * b
    for tx in range(tw):
        m0 = ob * t_n * b + ((rr - r0) * tw + tx) * b
        d = o0 + (tile * ty * ow + tile * tx) * b
        if tile * ty + tile <= oh and tile * tx + tile <= ow:
            for j in range(0, b, n_v):
                if tile == 2:
                    _tile_out(mf, m0 + j, m_plane, of, d + j, ow * b, b, bias, ob * b + j, lo, hi, top, res, 2)
                else:
                    _tile_out(mf, m0 + j, m_plane, of, d + j, ow * b, b, bias, ob * b + j, lo, hi, top, res, 4)
            continue
        for j in range(0, b, n_v):
            if tile == 2:
                _tile_out(mf, m0 + j, m_plane, y, j, tile * b, b, bias, ob * b + j, no, -no, no, y[:0], 2)
            else:
                _tile_out(mf, m0 + j, m_plane, y, j, tile * b, b, bias, ob * b + j, no, -no, no, y[:0], 4)
        for i in range(tile):
            for jx in range(tile):
                if tile * ty + i < oh and tile * tx + jx < ow:
                    _pixel_out(y, (tile * i + jx) * b, of, d + (i * ow + jx) * b, None, 0, lo, hi, top, res)
    if not one_pass:
        for i in range(tile):
            oy = tile * ty + i
            if oy < oh:
                e = o0 + oy * ow * b
                epilogue_run(of, e, ow * b, of, e, 0.0, rf, act, alpha, beta, post, post_alpha, post_beta)


PIXEL_SPLIT = 4  # interleaved runs of pixels _block_sums sums apart
DEPTHWISE_GROUP = MR  # output pixels _depthwise_taps sums at once: MR x (B / W) independent vector sums


@intrinsic
def _depthwise_taps(typingctx, src, base, step, offsets, wt, w0, of, o0, bias, bias0, lo, hi, top, res, group):
    """`group` (a constant) output pixels of a depthwise conv on the blocked layout, a block's B channels
    each: pixel k's tap t reads src[base + k * step + offsets[t]:][:B] times wt[w0 + t * B:][:B], its sums
    in group x (B / W) vector registers, then stored at of[o0 + k * B:][:B] through the one-pass epilogue
    (microkernel.py's, the bias along the vector from bias[bias0:]; res indexed as of, empty for none, may
    be of itself). In LLVM IR: numba's loops over a block's lanes keep the sums in memory."""
    if not (all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (src, wt, of, res))
            and isinstance(offsets, types.Array) and offsets.dtype == types.int64
            and isinstance(group, types.IntegerLiteral)
            and (isinstance(bias, types.NoneType) or (isinstance(bias, types.Array) and bias.dtype == types.float32))):
        return None
    pixels = group.literal_value

    def codegen(context, builder, signature, args):
        width = vector_width(context)
        nv = taps_channels(width) // width
        vec, i64 = ir.VectorType(ir.FloatType(), width), ir.IntType(64)
        base_, step_, w0_, o0_ = _int64s(context, builder, signature, args, (1, 2, 5, 7))
        fma = fma_intrinsic(builder, vec)
        src_ptr, off_ptr, wt_ptr, of_ptr = (cgutils.create_struct_proxy(signature.args[k])(
            context, builder, value=args[k]).data for k in (0, 3, 4, 6))
        taps = cgutils.create_struct_proxy(signature.args[3])(context, builder, value=args[3]).nitems

        def vector_at(pointer, index):
            return builder.load(builder.bitcast(builder.gep(pointer, [index]), vec.as_pointer()), align=4)

        def tap(t):
            at = builder.add(base_, builder.load(builder.gep(off_ptr, [t])))
            w_at = builder.add(w0_, builder.mul(t, ir.Constant(i64, nv * width)))
            weights = [vector_at(wt_ptr, builder.add(w_at, ir.Constant(i64, j * width))) for j in range(nv)]
            pixel = [builder.add(at, builder.mul(step_, ir.Constant(i64, k))) for k in range(pixels)]
            return [(weights[j], vector_at(src_ptr, builder.add(pixel[k], ir.Constant(i64, j * width))))
                    for k in range(pixels) for j in range(nv)]

        sums = fma_sums(builder, taps, vec, fma, tap, pixels * nv)
        _store_through_epilogue(context, builder, args[8:14], signature.args[8:14], sums, pixels, nv,
                                builder.gep(of_ptr, [o0_]), o0_, ir.Constant(i64, nv * width), bias_columns=True)
        return context.get_dummy_value()

    return types.void(src, base, step, offsets, wt, w0, of, o0, bias, bias0, lo, hi, top, res, group), codegen


def pack_depthwise_blocked(weight: np.ndarray, block: int, segments=None) -> np.ndarray:
    """A depthwise conv's (C, 1, KH, KW) weight as depthwise_blocked takes it: (blocks, KH * KW, block), each
    tap's weights of a block's channels side by side (its channels in `segments`, zero in the lanes padding
    them)."""
    if weight.ndim != 4 or weight.shape[1] != 1:
        raise ValueError(f"pack_depthwise_blocked: a {weight.shape} weight is not a depthwise one")
    weight = pad_to_blocks(weight, block, depthwise=True, segments=segments)
    c_n, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    return np.ascontiguousarray(weight.reshape(c_n // block, block, kh * kw).transpose(0, 2, 1), dtype=np.float32)


@numba.njit(**SEQ)
def depthwise_blocked(x, wt, bias, residual, out, kernel, stride, padding, dilation,
                      act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, W, groups=C) + bias) + residual) on the blocked layout: x (N, C / B, H, W, B),
    wt = pack_depthwise_blocked(W, B) (C / B, KH * KW, B), out and residual (N, C / B, OH, OW, B), padding
    (top, left, bottom, right) zeros; bias may be None, residual None or empty for none (it may be out).
    Each pixel's block of channels is one vector per W channels, so every tap is a vector multiply-add
    (_depthwise_taps, DEPTHWISE_GROUP pixels at once). Tasks: (image, block, band of output rows), at least
    MIN_TASKS where the rows allow (below PARALLEL_MIN_ELEMENTS outputs, one); each copies the input rows
    its band reads into scratch, zero-padded, where every tap lies at a fixed offset from its window."""
    kh, kw = kernel
    n_n, cb_n, h, w, b = x.shape
    oh, ow = out.shape[2], out.shape[3]
    if b != taps_width() or wt.shape != (cb_n, kh * kw, b) or out.shape[:2] != (n_n, cb_n) or out.shape[4] != b:
        raise ValueError("depthwise_blocked: blocks of another width, or operands of mismatched shapes")
    serial = out.size < PARALLEL_MIN_ELEMENTS
    window, offsets, scratch, tasks = _depthwise_bands(n_n, cb_n, b, oh, ow, kernel, stride, padding, dilation,
                                                       serial)
    data = (x.reshape(-1), wt.reshape(-1), bias, residual_run(residual, out), out.reshape(-1), offsets,
            (n_n, cb_n, h, w, b, oh, ow), window, (act, post), (alpha, beta, post_alpha, post_beta), scratch)
    run_tasks(_depthwise_task, tasks, data, serial)


@numba.njit(inline="always", **SEQ)
def _depthwise_bands(n_n, cb_n, b, oh, ow, kernel, stride, padding, dilation, serial):
    """(window, offsets, scratch, tasks) of a depthwise conv's tasks of (image, block, band of output rows):
    at least MIN_TASKS where the rows allow (one when serial), each band's input rows (hin of wp pixels, the
    image's column 0 at pl) at most BAND_BYTES where one output row's fit; the taps' offsets in them, and
    scratch for each thread's band. window = (sh, sw, pt, pl, hin, wp, rpb, bands)."""
    (kh, kw), (sh, sw), (dh, dw), pt, pl = kernel, stride, dilation, padding[0], padding[1]
    bands = 1 if serial else max(1, min(oh, -(-MIN_TASKS // (n_n * cb_n))))
    rpb = -(-oh // bands)  # output rows per band
    while rpb > 1 and ((rpb - 1) * sh + (kh - 1) * dh + 1) * ((ow - 1) * sw + (kw - 1) * dw + 1) * b * 4 > BAND_BYTES:
        rpb = -(-rpb // 2)
    bands = -(-oh // rpb)
    hin = (rpb - 1) * sh + (kh - 1) * dh + 1  # input rows a band reads
    wp = (ow - 1) * sw + (kw - 1) * dw + 1  # a gathered row: every column a window reads
    offsets = np.empty(kh * kw, np.int64)
    for i in range(kh):
        for j in range(kw):
            offsets[i * kw + j] = (i * dh * wp + j * dw) * b
    tasks = n_n * cb_n * bands
    scratch = aligned_empty((1 if serial else min(num_threads(), tasks)) * hin * wp * b, np.float32)
    return (sh, sw, pt, pl, hin, wp, rpb, bands), offsets, scratch, tasks


@numba.njit(**SEQ)
def _depthwise_task(t, xf, wf, bias, rf, of, offsets, dims, window, acts, params, scratch):
    """Task t of depthwise_blocked: its band's input rows into this thread's scratch (zeros outside the
    image), then its output rows (_depthwise_rows)."""
    n_n, cb_n, h, w, b, oh, ow = dims
    sh, sw, pt, pl, hin, wp, rpb, bands = window
    bi, m = t % bands, t // bands  # m: (image, block)
    src = _band_scratch(scratch, hin * wp * b)
    y0, y1 = bi * rpb, min(oh, (bi + 1) * rpb)
    _gather_rows(src, 0, xf, m * h * w * b, y0 * sh - pt, (y1 - 1 - y0) * sh + (hin - (rpb - 1) * sh), h, w, wp, pl, b)
    _depthwise_rows(src, m, m % cb_n, y0, y1, wf, bias, rf, of, offsets, dims, window, acts, params)


@numba.njit(inline="always", **SEQ)
def _band_scratch(scratch, size):
    """This thread's `size` floats of scratch (the first's where the calling thread is not a worker)."""
    tid = thread_id()
    own = (tid if tid < scratch.size // size else 0) * size
    return scratch[own:own + size]


@numba.njit(**SEQ)
def _depthwise_rows(src, m, cb, y0, y1, wf, bias, rf, of, offsets, dims, window, acts, params):
    """Output rows y0 .. y1 - 1 of (image, block) pair m (block cb) of a depthwise conv from its band's input
    rows in src, each row in groups of DEPTHWISE_GROUP pixels (the rest in pairs, then one) stored through
    the one-pass epilogue from the registers; activations of more than one pass by epilogue_run over the
    band after."""
    n_n, cb_n, h, w, b, oh, ow = dims
    sh, sw, pt, pl, hin, wp, rpb, bands = window
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    one_pass = act <= ONE_PASS and post <= 1
    bounds = one_pass_bounds(act, alpha, beta, post) if one_pass else (-np.inf, np.inf, -np.inf)
    lo, hi, top = np.float32(bounds[0]), np.float32(bounds[1]), np.float32(bounds[2])
    res = rf if one_pass else rf[:0]
    w0 = cb * offsets.size * b
    whole = ow // DEPTHWISE_GROUP * DEPTHWISE_GROUP
    for oy in range(y0, y1):
        s0 = (oy - y0) * sh * wp * b
        o0 = (m * oh + oy) * ow * b
        for ox in range(0, whole, DEPTHWISE_GROUP):
            _depthwise_taps(src, s0 + ox * sw * b, sw * b, offsets, wf, w0, of, o0 + ox * b, bias, cb * b,
                            lo, hi, top, res, DEPTHWISE_GROUP)
        for ox in range(whole, ow - 1, 2):  # the rest in pairs, then one
            _depthwise_taps(src, s0 + ox * sw * b, sw * b, offsets, wf, w0, of, o0 + ox * b, bias, cb * b,
                            lo, hi, top, res, 2)
        if (ow - whole) % 2:
            _depthwise_taps(src, s0 + (ow - 1) * sw * b, sw * b, offsets, wf, w0, of, o0 + (ow - 1) * b, bias,
                            cb * b, lo, hi, top, res, 1)
    if not one_pass:
        e = (m * oh + y0) * ow * b
        epilogue_run(of, e, (y1 - y0) * ow * b, of, e, 0.0, rf, act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**SEQ)
def expand_depthwise_blocked(x, we, be, wt, bias, residual, out, kernel, stride, padding, dilation, expand_acts,
                             act, alpha, beta, post, post_alpha, post_beta):
    """A MobileNet block's expansion and depthwise conv in one: out = depthwise_blocked(e) for e =
    act_e(conv1x1(x, We) + be), e never stored whole. x (N, C / B, H, W, B); we = pack_channel_panels(We, B)
    (M / B, C, B), be its bias (M, not None); wt, bias, residual, out, the depthwise conv's operands as
    depthwise_blocked takes them (M channels); expand_acts = (code, alpha, beta) of act_e. Each task (image,
    block of e, band of output rows) computes the expansion's rows its band reads, that block only, by
    _blocked_out, gathers them into its scratch as depthwise_blocked gathers its input's, then computes the
    depthwise rows from there. A band's halo rows are computed twice (by the band above too). Below
    PARALLEL_MIN_ELEMENTS outputs and PARALLEL_MIN_MACS of the expansion, one task in the calling thread."""
    kh, kw = kernel
    n_n, cb_n, h, w, b = x.shape
    mb_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    c_n = we.shape[1]  # the expansion's lanes (pad_to_blocks)
    if (b != taps_width() or we.shape != (mb_n, c_n, b) or not _reads_lanes(c_n, cb_n, b) or be.size != mb_n * b
            or wt.shape != (mb_n, kh * kw, b) or out.shape[0] != n_n or out.shape[4] != b):
        raise ValueError("expand_depthwise_blocked: blocks of another width, or operands of mismatched shapes")
    serial = out.size < PARALLEL_MIN_ELEMENTS and n_n * h * w * mb_n * b * c_n < PARALLEL_MIN_MACS
    window, offsets, scratch, tasks = _depthwise_bands(n_n, mb_n, b, oh, ow, kernel, stride, padding, dilation,
                                                       serial)
    hin = window[4]
    # each thread's expansion rows (hin of w pixels), after its band's scratch
    scratch = aligned_empty(scratch.size // (hin * window[5] * b) * hin * (window[5] + w) * b, np.float32)
    pix = np.zeros(h * w + MR, np.int64)  # pixel p of the image (MR entries past it for the last group's calls)
    for p in range(h * w):
        pix[p] = p * b
    rows = _lane_rows(c_n, h * w, b)  # reduction step c: input channel c of each pixel
    data = (x.reshape(-1), cb_n * h * w * b, we.reshape(-1), be, pix, rows, expand_acts, wt.reshape(-1), bias,
            residual_run(residual, out), out.reshape(-1), offsets, (n_n, mb_n, h, w, b, oh, ow), window,
            (act, post), (alpha, beta, post_alpha, post_beta), scratch)
    run_tasks(_expand_depthwise_task, tasks, data, serial)


@numba.njit(**SEQ)
def _expand_depthwise_task(t, xf, x_image, wef, be, pix, rows, expand_acts, wf, bias, rf, of, offsets, dims, window,
                           acts, params, scratch):
    """Task t of expand_depthwise_blocked: the expansion's rows its band reads, block mb of them, in one run
    of pixels (_blocked_out; x_image floats an image of the input, whose first rows.size lanes it reads),
    gathered into its band's scratch as depthwise_blocked gathers its input's (zeros outside the image),
    then its output rows."""
    n_n, mb_n, h, w, b, oh, ow = dims
    sh, sw, pt, pl, hin, wp, rpb, bands = window
    e_act, e_alpha, e_beta = expand_acts
    bi, m = t % bands, t // bands  # m: (image, block of the expansion)
    mb, n = m % mb_n, m // mb_n
    c_n = rows.size
    own = _band_scratch(scratch, hin * (wp + w) * b)
    src, expanded = own[:hin * wp * b], own[hin * wp * b:]
    y0, y1 = bi * rpb, min(oh, (bi + 1) * rpb)
    iy0 = y0 * sh - pt
    n_rows = (y1 - 1 - y0) * sh + (hin - (rpb - 1) * sh)
    lo, hi = max(0, iy0), min(h, iy0 + n_rows)  # the rows inside the image
    if hi > lo:
        _blocked_out(xf, n * x_image, pix, lo * w, 0, (hi - lo) * w, rows, c_n, wef, be, expanded[:0], expanded,
                     0, 0, b, mb, mb + 1, (e_act, 0), (e_alpha, e_beta, 0.0, 0.0))
    _gather_rows(src, 0, expanded, -lo * w * b, iy0, n_rows, h, w, wp, pl, b)
    _depthwise_rows(src, m, mb, y0, y1, wf, bias, rf, of, offsets, dims, window, acts, params)


@numba.njit(**SEQ)
def pool_blocked(x, out, kernel, stride, padding, dilation, is_max, count_include_pad, divisor):
    """Window max (is_max) or average pooling of a blocked float32 x into a blocked out (N, C / B, OH, OW, B),
    as depthwise_blocked runs a depthwise conv: each task (image, block, band of output rows) gathers its
    band's input rows into scratch, -inf (max) or 0 (average) outside the image, and combines each window's
    taps a vector of a block's channels at a time, DEPTHWISE_GROUP pixels in registers (_window_taps). A
    max propagates NaN (pool.py's _pmax); an average divides by divisor if > 0, else by torch's count (the
    window clipped to the padded input, and to the input unless pads count)."""
    n_n, cb_n, h, w, b = x.shape
    oh, ow = out.shape[2], out.shape[3]
    if b != taps_width() or out.shape[0] != n_n or out.shape[1] != cb_n or out.shape[4] != b:
        raise ValueError("pool_blocked: blocks of another width, or the output not blocked as the input is")
    serial = out.size < PARALLEL_MIN_ELEMENTS
    window, offsets, scratch, tasks = _depthwise_bands(n_n, cb_n, b, oh, ow, kernel, stride, padding, dilation,
                                                       serial)
    counts = np.empty(oh * ow, np.float32)  # each window's divisor, for averages
    for oy in range(oh):
        y0 = oy * stride[0] - padding[0]
        y1 = min(y0 + kernel[0], h + padding[2])
        if not count_include_pad:
            y0, y1 = max(y0, 0), min(y1, h)
        for ox in range(ow):
            x0 = ox * stride[1] - padding[1]
            x1 = min(x0 + kernel[1], w + padding[3])
            if not count_include_pad:
                x0, x1 = max(x0, 0), min(x1, w)
            counts[oy * ow + ox] = divisor if divisor > 0 else (y1 - y0) * (x1 - x0)
    data = (x.reshape(-1), out.reshape(-1), offsets, (n_n, cb_n, h, w, b, oh, ow), window, is_max, counts, scratch)
    run_tasks(_pool_window_task, tasks, data, serial)


@numba.njit(**SEQ)
def _pool_window_task(t, xf, of, offsets, dims, window, is_max, counts, scratch):
    """Task t of pool_blocked: its band's input rows into this thread's scratch, then each output row in
    groups of DEPTHWISE_GROUP pixels (the rest one at a time), averages divided after."""
    n_n, cb_n, h, w, b, oh, ow = dims
    sh, sw, pt, pl, hin, wp, rpb, bands = window
    bi, m = t % bands, t // bands  # m: (image, block)
    src = _band_scratch(scratch, hin * wp * b)
    y0, y1 = bi * rpb, min(oh, (bi + 1) * rpb)
    _gather_rows(src, 0, xf, m * h * w * b, y0 * sh - pt, (y1 - 1 - y0) * sh + (hin - (rpb - 1) * sh), h, w, wp, pl, b,
                 -np.inf if is_max else 0.0)
    whole = ow // DEPTHWISE_GROUP * DEPTHWISE_GROUP
    for oy in range(y0, y1):
        s0 = (oy - y0) * sh * wp * b
        o0 = (m * oh + oy) * ow * b
        for ox in range(0, whole, DEPTHWISE_GROUP):
            if is_max:
                _window_taps(src, s0 + ox * sw * b, sw * b, offsets, of, o0 + ox * b, True, DEPTHWISE_GROUP)
            else:
                _window_taps(src, s0 + ox * sw * b, sw * b, offsets, of, o0 + ox * b, False, DEPTHWISE_GROUP)
        for ox in range(whole, ow):
            if is_max:
                _window_taps(src, s0 + ox * sw * b, sw * b, offsets, of, o0 + ox * b, True, 1)
            else:
                _window_taps(src, s0 + ox * sw * b, sw * b, offsets, of, o0 + ox * b, False, 1)
        if not is_max:
            for ox in range(ow):
                c = counts[oy * ow + ox]
                for j in range(b):
                    of[u(o0 + ox * b + j)] /= c


@intrinsic
def _window_taps(typingctx, src, base, step, offsets, of, o0, is_max, group):
    """`group` (a constant) output pixels of a window pool on the blocked layout, a block's B channels each:
    pixel k's tap t reads src[base + k * step + offsets[t]:][:B]; the max (is_max, a constant: NaN
    propagating, as pool.py's _pmax) or the sum over the taps, in group x (B / W) vector registers, stored
    at of[o0 + k * B:][:B]. In LLVM IR: numba's loops over a block's lanes keep the values in memory."""
    if not (all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (src, of))
            and isinstance(offsets, types.Array) and offsets.dtype == types.int64
            and isinstance(group, types.IntegerLiteral) and isinstance(is_max, types.BooleanLiteral)):
        return None
    pixels, maximum = group.literal_value, is_max.literal_value

    def codegen(context, builder, signature, args):
        width = vector_width(context)
        nv = taps_channels(width) // width
        vec, i64 = ir.VectorType(ir.FloatType(), width), ir.IntType(64)
        base_, step_, o0_ = _int64s(context, builder, signature, args, (1, 2, 5))
        src_ptr, off_ptr, of_ptr = (cgutils.create_struct_proxy(signature.args[k])(
            context, builder, value=args[k]).data for k in (0, 3, 4))
        taps = cgutils.create_struct_proxy(signature.args[3])(context, builder, value=args[3]).nitems

        def at(pointer, index):
            return builder.bitcast(builder.gep(pointer, [index]), vec.as_pointer())

        def combine(acc, v):
            if not maximum:
                return builder.fadd(acc, v)
            keep = builder.or_(builder.fcmp_ordered(">=", acc, v), builder.fcmp_unordered("uno", acc, acc))
            return builder.select(keep, acc, v)

        def tap(t, accs):
            at_t = builder.add(base_, builder.load(builder.gep(off_ptr, [t])))
            return [combine(accs[k * nv + j], builder.load(at(src_ptr, builder.add(
                builder.add(at_t, builder.mul(step_, ir.Constant(i64, k))), ir.Constant(i64, j * width))), align=4))
                for k in range(pixels) for j in range(nv)]

        start = ir.Constant(vec, [float("-inf") if maximum else 0.0] * width)
        accs = vector_loop(builder, "taps", taps, 1, [start] * (pixels * nv), tap)
        for k in range(pixels):
            for j in range(nv):
                offset = ir.Constant(i64, k * nv * width + j * width)
                builder.store(accs[k * nv + j], at(of_ptr, builder.add(o0_, offset)), align=4)
        return context.get_dummy_value()

    return types.void(src, base, step, offsets, of, o0, is_max, group), codegen


@numba.njit(**SEQ)
def global_avg_pool_blocked(x, out, segments):
    """out[n, c, 0, 0] = the mean over the pixels of the lane of x[n] that holds channel c, x's C channels in
    `segments` (a tuple: one, (C,), for an unsegmented value): a blocked x's global average pool into (N, C,
    1, 1) (_block_sums). Tasks of one (image, block)."""
    n_n, cb_n, h, w, b = x.shape
    c_n, blocks = 0, 0
    for count in segments:
        c_n += count
        blocks += -(-count // b)
    if blocks != cb_n or out.size != n_n * c_n:
        raise ValueError("global_avg_pool_blocked: the output is not one value per image and channel")
    xf, of = x.reshape(-1), out.reshape(-1)
    run_tasks(_pool_task, n_n * cb_n, (xf, of, segments, c_n, cb_n, h * w, b), x.size < PARALLEL_MIN_ELEMENTS)


@numba.njit(**SEQ)
def _pool_task(m, xf, of, segments, c_n, cb_n, hw, b):
    """Pair m (image, block) of global_avg_pool_blocked: the block's sums straight into the output where its
    lanes are all channels, else through a block of scratch."""
    c0, real = _block_channels(m % cb_n, segments, b)
    o0 = (m // cb_n) * c_n + c0
    if real == b:
        _block_sums(xf, m * hw * b, hw, of, o0, 1.0 / hw)
        return
    sums = aligned_empty(b, np.float32)
    _block_sums(xf, m * hw * b, hw, sums, 0, 1.0 / hw)
    for j in range(real):
        of[u(o0 + j)] = sums[j]


@numba.njit(inline="always", **SEQ)
def _block_channels(q, segments, b):
    """(first channel, channels) of block q of a value whose channels lie in `segments`, each from a block's
    first lane: the block's lanes past them pad it."""
    c0 = 0
    for count in segments:
        blocks = -(-count // b)
        if q < blocks:
            return c0 + q * b, min(b, count - q * b)
        q -= blocks
        c0 += count
    return c0, 0


@numba.njit(**SEQ)
def channel_scale_blocked(x, scale, out):
    """out = x * scale on the blocked layout, scale (N, C, 1, 1): each image's channel c times scale[n, c]
    (a squeeze-and-excitation block's scale), the lanes past C (the last block's padding) zero. out may be x.
    Tasks of one (image, block)."""
    n_n, cb_n, h, w, b = x.shape
    c_n = scale.shape[1]
    if scale.shape != (n_n, c_n, 1, 1) or not (cb_n - 1) * b < c_n <= cb_n * b or out.shape != x.shape:
        raise ValueError("channel_scale_blocked: operands of mismatched shapes")
    sf = aligned_empty(n_n * cb_n * b, np.float32)  # each image's scale, its padding lanes' zero
    for n in range(n_n):
        s0 = n * cb_n * b
        sf[s0:s0 + c_n] = scale[n, :, 0, 0]
        sf[s0 + c_n:s0 + cb_n * b] = 0.0
    xf, of = x.reshape(-1), out.reshape(-1)
    run_tasks(_scale_task, n_n * cb_n, (xf, sf, of, h * w, b), x.size < PARALLEL_MIN_ELEMENTS)


@numba.njit(**SEQ)
def _scale_task(m, xf, sf, of, hw, b):
    _scale_block(xf, m * hw * b, hw, sf, m * b, of)


@intrinsic
def _block_sums(typingctx, x, x0, pixels, out, o0, factor):
    """out[o0:o0 + B] = factor * the sum over p < pixels of x[x0 + p * B:][:B] (B = taps_width()): B / W
    vectors of sums, each over PIXEL_SPLIT interleaved runs of pixels (independent additions, and
    float32 sums a quarter as long), in LLVM IR (numba's loop over a block's lanes keeps the sums in memory)."""
    if not (isinstance(x, types.Array) and isinstance(out, types.Array) and x.dtype == out.dtype == types.float32):
        return None

    def codegen(context, builder, signature, args):
        width = vector_width(context)
        nv = taps_channels(width) // width
        vec, i64 = ir.VectorType(ir.FloatType(), width), ir.IntType(64)
        x_ptr, out_ptr = (cgutils.create_struct_proxy(signature.args[k])(context, builder, value=args[k]).data
                          for k in (0, 3))
        x0_, pixels_, o0_ = _int64s(context, builder, signature, args, (1, 2, 4))
        factor = context.cast(builder, args[5], signature.args[5], types.float32)

        def at(pointer, index):
            return builder.bitcast(builder.gep(pointer, [index]), vec.as_pointer())

        block = ir.Constant(i64, nv * width)
        whole = builder.mul(builder.sdiv(pixels_, ir.Constant(i64, PIXEL_SPLIT)), ir.Constant(i64, PIXEL_SPLIT))

        def step(p, accs, runs):
            base = builder.add(x0_, builder.mul(p, block))
            return [builder.fadd(accs[r * nv + j], builder.load(at(x_ptr, builder.add(
                base, ir.Constant(i64, r * nv * width + j * width))), align=4)) for r in range(runs) for j in range(nv)]

        zero = ir.Constant(vec, [0.0] * width)
        accs = vector_loop(builder, "sums", whole, PIXEL_SPLIT, [zero] * (PIXEL_SPLIT * nv),
                           lambda p, accs: step(p, accs, PIXEL_SPLIT))
        rest = vector_loop(builder, "rest", builder.sub(pixels_, whole), 1, [zero] * nv,
                           lambda p, accs: step(builder.add(p, whole), accs, 1))
        lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), factor, ir.Constant(ir.IntType(32), 0))
        scale = builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined), ir.Constant(
            ir.VectorType(ir.IntType(32), width), [0] * width))
        for j in range(nv):
            total = rest[j]
            for r in range(PIXEL_SPLIT):
                total = builder.fadd(total, accs[r * nv + j])
            builder.store(builder.fmul(total, scale), at(out_ptr, builder.add(o0_, ir.Constant(i64, j * width))),
                          align=4)
        return context.get_dummy_value()

    return types.void(x, x0, pixels, out, o0, factor), codegen


@intrinsic
def _scale_block(typingctx, x, x0, pixels, s, s0, out):
    """out[x0 + p * B:][:B] = x[x0 + p * B:][:B] * s[s0:s0 + B] for p < pixels (B = taps_width()), the scale
    in registers; in LLVM IR."""
    if not (all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (x, s, out))):
        return None

    def codegen(context, builder, signature, args):
        width = vector_width(context)
        nv = taps_channels(width) // width
        vec, i64 = ir.VectorType(ir.FloatType(), width), ir.IntType(64)
        x_ptr, s_ptr, out_ptr = (cgutils.create_struct_proxy(signature.args[k])(context, builder, value=args[k]).data
                                 for k in (0, 3, 5))
        x0_, pixels_, s0_ = _int64s(context, builder, signature, args, (1, 2, 4))

        def at(pointer, index):
            return builder.bitcast(builder.gep(pointer, [index]), vec.as_pointer())

        scale = [builder.load(at(s_ptr, builder.add(s0_, ir.Constant(i64, j * width))), align=4) for j in range(nv)]

        def step(p, accs):
            base = builder.add(x0_, builder.mul(p, ir.Constant(i64, nv * width)))
            for j in range(nv):
                i = builder.add(base, ir.Constant(i64, j * width))
                builder.store(builder.fmul(builder.load(at(x_ptr, i), align=4), scale[j]), at(out_ptr, i), align=4)
            return []

        vector_loop(builder, "scale", pixels_, 1, [], step)
        return context.get_dummy_value()

    return types.void(x, x0, pixels, s, s0, out), codegen
