"""Convolution on our own microkernel (microkernel.py), for float32 convs whose weights
are known at compile time: the weights are packed into MR-channel panels once, when the
model is compiled (microkernel.pack_weights), so no run repacks them.

The output of each image and group is cut into tiles of pixels (whole output rows, or
any pixels for a 1x1 stride-1 conv), times blocks of MR-channel panels when there are
too few tiles to keep every thread busy. A 1x1 conv on a batch of small images whose pixels
fill their last half panel badly (7 x 7: 49 of 56 columns on AVX2) cuts the batch's pixels
as one row instead, its tiles and panels crossing from image to image (spans_images). Each
task of one parallel loop
  1. gathers its tile's input into zero-padded phase planes (planes.py): the microkernel
     reads reduction step (channel, tap) at that tap's offset in them (micro_gemm_rows),
     computing the wq - ow columns past each output row too; a 1x1 stride-1 conv reads its
     input where it lies (only a last partial half panel of pixels is copied, zero-padded);
  2. multiplies its block of channel panels (two at a call on AVX-512: micro_gemm2) by the
     tile's pixels on the microkernel, in chunks of K_CHUNK reduction steps whose weights stay
     in L1, the pixels read where they lie; on AVX2 (one panel a call), a block of many panels
     (many output channels) packs the tile's pixels into panels first, each of which then meets
     every channel panel in turn from L1 (BLIS's loop order: _panels_by_pixels);
  3. drops the columns past each row, and applies the epilogue (bias, activation, residual)
     on the way from the block to the output (_block_out; a windowed conv's block a chunk of
     CHUNK_COLUMNS columns at a time, from L1: _planes_out). A 1x1 conv of one reduction chunk
     with a one-pass epilogue (none, ReLU, clamp; a residual; a post ReLU) skips the block: the
     microkernel stores each whole panel of pixels into the output through it (_pointwise_out);
     so does one with an activation of more passes (SiLU) and no residual or second activation,
     stored with its bias, the activation then run in place over the rows just written.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import SEQ, aligned_empty, blocks, compiled_as, line_floats, num_threads, thread_id, u
from codegen.kernels.epilogue import ONE_PASS, activate_block, activate_run, epilogue_run, one_pass_bounds, residual_run
from codegen.kernels.gemm import PARALLEL_MIN_MACS
from codegen.kernels.microkernel import (
    MR,
    gemm_panels,
    gemm_panels2,
    gemm_panels2_rows,
    gemm_panels_rows,
    half_panels,
    micro_gemm,
    micro_gemm2_out,
    micro_gemm2_out_rows,
    micro_gemm_half,
    micro_gemm_out,
    micro_gemm_out_rows,
    panel_width,
    panels_per_call,
)
from codegen.kernels.planes import gather_planes, plane_pitch, tap_table, zero_margins
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vectors import copy_run

TILE_BYTES = 1 << 19  # a tile's im2col matrix (or input block of a 1x1 conv): about half of a core's L2
# a 1x1 conv's input (or accumulators) up to this size are one tile, its channels split between tasks:
# a 14 x 14 plane cut into tiles of 128 and 68 pixels kept one thread idle a third of the time
# (1024 -> 256 channels: 0.62 -> 0.51 ms, AVX-512 EPYC, 2 threads)
WHOLE_POINTWISE_BYTES = 1 << 20
# a 1x1 conv that reads more than it writes, on fewer images than threads, cuts its pixels between the
# threads when each gets this many at least, however few bytes they are: its channels split in blocks of
# whole panels shared out unevenly (64 channels: 11 panels, 6 and 5; pairs of them on AVX-512), and each
# task read all of an input the last layer's threads had just written. In MobileNetV2 at batch 1 (profiled
# per node, 2 processes each, Intel Xeon AVX-512, 2 threads): 144 -> 32 on 28 x 28 0.72, 384 -> 64 on
# 14 x 14 0.82-0.91, 384 -> 96 0.84-0.89, 576 -> 96 0.89-0.95; the whole forward 0.975 (alternating
# processes, 5-6 each); kernel alone 480 -> 80 0.84-0.87, 200 -> 80 0.83. Not where a task's block of every
# panel packs its pixels (AVX2, PACK_MIN_PANELS: 576 -> 96 1.06, 384 -> 96 1.10 with haswell's features on
# that Xeon; 384 -> 64 0.90, 144 -> 32 0.91 there)
CUT_MIN_PIXELS = 64
WHOLE_IMAGE_BYTES = 1 << 21  # a tile's input (phase planes) up to this size is the whole image
# with fewer images than threads a whole image has its channels split between tasks, each gathering all
# of it: then only up to this size, else tiles of rows. 2 MiB made 128 -> 128 channels 3x3 stride 2
# from 56 x 56 one tile, 2.86 ms against 1.35 ms in tiles of rows (AVX-512 Xeon, 2 threads, batch 1)
SHARED_IMAGE_BYTES = 1 << 18
K_CHUNK = 256  # reduction steps per microkernel call: a weight panel chunk (6 KB) stays in L1
MIN_PANELS = 2  # channel panels per block when a tile is split between tasks, at least
# with one panel a microkernel call (AVX2), blocks of this many channel panels or more, over this many
# reduction steps, pack their pixels (_panels_by_pixels); fewer panels reuse the packed panels too little
# to pay for the copy (64 -> 64 channels on 56 x 56: 1.5x slower packed), and fewer steps make a
# microkernel call too short for the scattered stores of the packed loop order (16 -> 96 on 112 x 112:
# 1.16x) (AVX-512 Xeon, 1 thread, before micro_gemm2). Two panels a call (AVX-512) read the pixels in
# place faster than packing them, on every shape measured: 2 threads, 64 -> 128 3x3 stride 2 on 56 x 56
# 0.344 -> 0.278 ms, 128 -> 256 on 28 x 28 0.368 -> 0.304, 512 -> 128 1x1 on 32 x 32 (rows 4 KiB apart,
# which packing was for) 0.344 -> 0.291, 256 -> 256 3x3 on 14 x 14 0.660 -> 0.588 (Zen 5 EPYC)
PACK_MIN_PANELS = 16
PACK_MIN_STEPS = 64
# a strided conv whose taps fall on few rows of each phase plane (a 3x3 stride 2: 9 taps over 4 planes), with
# planes larger than this a tile (which L2 does not hold beside the block's weights and accumulators), packs
# its pixels from this many channel panels on: read in place, each step's pixels come from L3 again, and
# each line read serves few taps. 32 -> 64 channels 3x3 stride 2 from 160 x 160 (11 panels, 456 KiB of
# planes a tile), 2 threads: 2.92-3.05 -> 2.50-2.73 ms at batch 1; 48 -> 64 from 112 x 112 at batch 8
# 25.8 -> 22.2 ms; 64 -> 80 from 148 x 148 5.91 -> 5.26 ms (Zen 3 EPYC, AVX2, in-process A/B). Not where
# more taps share a plane's rows (3x3 stride 1 on 160 x 160 1.04-1.07x slower packed, 5x5 stride 2 from
# 112 x 112 1.06-1.08x), for small planes (ResNet's stem, 7x7 stride 2, 116 KiB: 1.1-1.2x), nor for 1x1
# convs, whose input rows read in place were level with packing at 8-15 panels over repeated runs
PACK_MIN_PANELS_LARGE_PLANES = 8
LARGE_PLANES_BYTES = 1 << 18
LARGE_PLANES_MAX_TAPS = 3  # taps per phase plane, at most: KH * KW <= this * SH * SW
# a batch of images whose pixels fill their last half panel this badly or worse (the share of computed
# columns wasted) runs its pixels as one row, tiles crossing from image to image (spans_images)
SPAN_MIN_WASTE = 0.05
# a windowed conv's block of sums (two panels' 2 MR rows) goes out through the epilogue every this many
# columns of its phase planes (_planes_out), from L1, rather than once for the tile, from L2 (a tile of 28
# rows of 113 columns: 152 KiB a pair of panels, written, compacted, read back). Kernel alone, in-process
# A/B, 2 threads, Intel Xeon: MobileNetV2's stem 3 -> 32 3x3 stride 2 on 224 x 224 0.92 at batch 1, 0.85 at
# batch 8; YOLOv5s's 6x6 stride 2 on 320 x 320 0.945, 32 -> 32 3x3 on 80 x 80 0.955; longer reductions level
# (256 -> 256 3x3 on 14 x 14 1.01, 512 -> 512 on 7 x 7 0.97); 256 and 1024 columns no better. AVX2 code (the
# haswell features on that Xeon) 0.94-0.99
CHUNK_COLUMNS = 512
# only tiles of more than one chunk, whose output rows take this many reduction steps times pixels at least:
# each piece of an output row goes out in a call of its own, which on short rows of a short reduction costs
# more than the block's pass through L2 saved (3 -> 32 3x3 stride 2 to 31 x 31, 27 x 31: 1.11x the time)
CHUNK_MIN_ROW_WORK = 2048
# a tile's phase planes up to this size are zeroed whole before the gather, larger ones only in their padding
# columns (planes.zero_margins: a loop a row, which on small planes cost more than the whole zeroing: 16 -> 16
# 3x3 on 7 x 7 0.87, 24 -> 24 on 15 x 15 0.90 of the time zeroed whole; 32 KiB of planes or more 0.95-0.97 by
# their margins: 64 -> 64 3x3 stride 2 on 56 x 56, 32 -> 32 on 80 x 80; in-process A/B, Intel Xeon)
WHOLE_ZEROING_FLOATS = 8192
SUB_BYTES = 1 << 17  # a chunk of packed pixel panels: K_CHUNK steps of this many bytes' columns
# floats between a copied tile's input rows past their pixels (one cache line): rows a multiple of
# 2 KiB apart (512 pixels) would fall into two sets of the L1 cache, which the microkernel reads
# down a column of
ROW_PAD = 16


@numba.njit(**SEQ)
def _even_count(jobs, count):
    """count, or the next larger count for which jobs * count tasks share out evenly over the
    threads, while the tasks are few enough (under 4 per thread) for an uneven last round to cost."""
    threads = num_threads()
    while jobs * count % threads != 0 and jobs * count < 4 * threads:
        count += 1
    return count


def is_pointwise(kernel, stride, padding) -> bool:
    """Whether a conv is 1x1 at stride 1, unpadded (its output its input's size): conv1x1_packed's."""
    return tuple(kernel) == (1, 1) and tuple(stride) == (1, 1) and not any(padding)


def _conv2d_packed_for(pointwise: bool, name: str):
    """The kernel `name`: conv2d_packed (phase planes), or (pointwise) conv1x1_packed and
    conv1x1_packed_prologue, which read a 1x1 conv's input in place. Each is the body itself, not a call
    of it: numba compiles a callee's code again into each caller, which took 3 of conv2d_packed's 22.5 s."""

    def conv(x, wp, bias, residual, out, kernel, stride, padding, dilation, act, alpha, beta, post, post_alpha,
             post_beta, prologue):
        """out = post(act(conv2d(x, weight) + bias) + residual), wp = pack_weights(weight, groups); bias may
        be None, residual None or empty for none; padding (top, left, bottom, right) zeros (other modes are
        padded by the forward first: pad5). prologue: None, or (conv1x1_packed_prologue's) (scale, shift,
        in_act): x through in_act(x * scale + shift) per input channel first (in_act 1: ReLU, 0: none)."""
        if prologue is None:  # (None's own type: numba compiles one branch)
            none = np.empty(0, np.float32)
            pro = (none, none, 0)
        else:
            pro = prologue
        (kh, kw), (sh, sw), (dh, dw), pt, pl = kernel, stride, dilation, padding[0], padding[1]
        n_n, c_n, h, w = x.shape
        groups, n_mb, k = wp.shape[0], wp.shape[1], wp.shape[2]
        o_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
        og, cg, p_n = o_n // groups, c_n // groups, oh * ow
        nr = panel_width()
        if pointwise and not (kh == 1 and kw == 1 and sh == 1 and sw == 1 and pt == 0 and pl == 0 and oh == h
                              and ow == w):
            raise ValueError("a 1x1 kernel of conv_packed.py: the conv is not 1x1 at stride 1, unpadded")
        # a tile's bytes per pixel: of its input (the phase planes: about C * SH * SW floats a pixel), or
        # of its accumulator block, whichever is larger (few inputs and many outputs: an expansion)
        per_pixel = x.itemsize * max(k if pointwise else cg * sh * sw, og)
        # fewer images (or groups) than threads: an image's work is split between tasks. A 1x1 conv that
        # reads more than it writes (k > og) then cuts its pixels between them rather than its channels:
        # each task reads only its pixels of an input the last layer's threads just wrote (192 -> 32
        # channels on 28 x 28: 0.14 -> 0.10 ms, 1024 -> 256 on 14 x 14: 0.61 -> 0.49 ms, the input written
        # by two threads; AVX-512 Xeon); an expansion keeps its channels split (32 -> 192: 0.076 against
        # 0.093 ms by pixels). With images enough, each stays whole (a batch of 14 x 14 planes cut into
        # tiles of 128 and 68 pixels ran slower)
        shared = n_n * groups < num_threads()
        if pointwise:  # a copied input (a prologue's) stays in L2 at most TILE_BYTES at a time
            whole = 0 if shared and k > og else WHOLE_POINTWISE_BYTES if pro[0].size == 0 else TILE_BYTES
        else:
            whole = SHARED_IMAGE_BYTES if shared else WHOLE_IMAGE_BYTES
        # fewer channel panels than the threads need blocks of: the images are cut between them instead
        # (UNet's 16-channel convs on 64 x 64 ran on one thread)
        few_panels = n_n * groups * n_mb < MIN_PANELS * num_threads()
        # small images of a batch, whose last half panels of pixels compute many columns past them, run
        # as one row of the batch's pixels in tiles crossing from image to image (spans_images)
        spans = pointwise and spans_images(n_n, groups, p_n, k, n_mb, per_pixel * p_n <= whole, pro[0].size)
        jobs = 1 if spans else n_n * groups  # the tasks' images (and groups), each cut into n_p tiles
        if spans:
            tile = min(n_n * p_n, max(nr, TILE_BYTES // per_pixel // nr * nr))
        elif pointwise and (per_pixel * p_n > whole or few_panels):  # tiles of any whole panels of pixels:
            tile = min(p_n, max(nr, TILE_BYTES // per_pixel // nr * nr))  # the input is read where it lies
            if shared and k > og and p_n >= CUT_MIN_PIXELS * num_threads() and not packs_pixels(n_mb, k, 0, 1, 1):
                tile = min(tile, -(-p_n // num_threads()))  # a tile per thread at least
        elif per_pixel * p_n <= whole and not few_panels:  # small images: split the channels between tasks
            tile = p_n  # (7 rows cut into tiles of 4 and 3 keep one thread idle 1/7 of the time)
        else:  # tiles of whole output rows
            tile = max(1, min(oh, TILE_BYTES // (per_pixel * ow))) * ow
        pixels = n_n * p_n if spans else p_n  # the pixels the tiles cut
        n_p = -(-pixels // tile)
        if few_panels and not spans:  # a tile per thread at least, as far as there are panels (or rows) of pixels
            n_p = max(n_p, min(-(-p_n // nr) if pointwise else oh, -(-num_threads() // (n_n * groups))))
        if n_p > 1:  # as many tiles as share out evenly over the threads: 4 tiles, not 3.5, for 2 threads
            n_p = _even_count(jobs, n_p)
            unit = nr // 2 if pointwise else ow  # tiles of whole half panels, or of whole rows
            per_tile = -(-pixels // n_p)
            tile = -(-per_tile // unit) * unit
            n_p = -(-pixels // tile)
        if pointwise and not spans:  # whole half panels shared out evenly, the last tile taking the rest
            n_p = max(1, min(n_p, pixels // (nr // 2)))  # (tile_start); `tile` the largest, for the scratch
            tile = max(pixels - tile_start(n_p - 1, n_p, pixels), -(-(pixels // (nr // 2)) // n_p) * (nr // 2))
        n_o, mbb = blocks(jobs * n_p, n_mb, MIN_PANELS)
        # the phase planes of a tile (planes.py): hq rows of pitch wq per plane, sh * sw planes per
        # input channel; taps[(c*KH + i)*KW + j]: where reduction step (c, i, j) reads, from pixel 0
        wq = plane_pitch(ow, w, kw, sw, dw, pl)
        hq = tile // ow + (kh - 1) * dh // sh
        taps = tap_table(0 if pointwise else cg, kh, kw, sh, sw, dh, dw, hq, wq)
        xf, wf, of = x.reshape(-1), wp.reshape(-1), out.reshape(-1)
        rf = residual_run(residual, out)
        # each thread's part of the scratch (thread_id): the largest tile input (phase planes, or a 1x1
        # conv's pixels when a partial half panel ends them and they are copied) and block of accumulators
        # any of its tasks needs. Made inside the tasks, the accumulators were counted atomically at each
        # of the epilogue's calls, one per output channel: 1600 atomic operations a call of a 16 -> 384 1x1
        # conv on 14 x 14 (26.6 -> 24.4 us on one thread; 576 -> 96 on 14 x 14 64 -> 61 us on two; Zen 5)
        pp = half_panels(tile if pointwise else tile // ow * wq)
        # a prologue's tile is copied whole; otherwise a 1x1 conv's last partial half panel of pixels only (the
        # last tile's: tile_start), k rows of a half panel. (A spanned tile is never copied: its packing reads
        # the input in place)
        if pointwise and pro[0].size != 0:
            inputs = k * (pp + ROW_PAD)
        elif pointwise:
            inputs = k * nr // 2 if not spans and pixels % (nr // 2) != 0 else 0
        else:
            inputs = cg * sh * sw * hq * wq + pp + wq
        accs = max(panels_per_call(), mbb) * MR * pp
        inputs, accs = line_floats(inputs), line_floats(accs)  # each thread's part of the scratch on a line
        # below PARALLEL_MIN_MACS multiply-adds, the tasks in order in the calling thread, as the other kernels
        # run theirs: a wake-up and an uneven share cost more than the half saved (48 -> 96 1x1 on 4 x 4 and
        # 24 -> 48 on 8 x 8, 74k each, RegNetY's: 4.5-6.2 us on 2 threads against 3.9-4.6 on one, Zen 3 AVX2)
        serial = n_n * o_n * k * p_n < PARALLEL_MIN_MACS
        scratch = aligned_empty((1 if serial else min(num_threads(), jobs * n_p * n_o)) * (inputs + accs), x.dtype)
        args = (xf, wf, of, rf, bias, (c_n, h, w, o_n, oh, ow, groups, n_mb, k), (kh, kw, sh, sw, pt, pl, dh, dw),
                (tile, n_p, n_o, mbb, n_n * p_n if spans else 0), (hq, wq), taps, (act, post),
                (alpha, beta, post_alpha, post_beta), scratch, (inputs, accs), pro)
        if pointwise:  # (the tasks are module globals, not closure variables: common.compiled_as)
            run_tasks(_pointwise_task, jobs * n_p * n_o, args, serial)
        else:
            run_tasks(_planes_task, jobs * n_p * n_o, args, serial)

    return compiled_as(conv, name)


@numba.njit(**SEQ)
def tile_start(i, n_p, pixels):
    """The first pixel of a 1x1 conv's tile i of n_p over `pixels` (i = n_p: the end): the whole half panels
    shared out as evenly as they go, the last tile taking the pixels past them too, so that only its last
    half panel is partial (and copied). Equal tiles of whole half panels left the last tile short, copied
    whole: a 14 x 14 image's 196 pixels as 112 + 84 instead of 96 + 100."""
    if i >= n_p:
        return pixels
    return i * (pixels // (panel_width() // 2)) // n_p * (panel_width() // 2)


@numba.njit(**SEQ)
def spans_images(n_n, groups, p_n, k, n_mb, small, prologue):
    """Whether a 1x1 conv's tiles cut its batch's pixels as one row, crossing from image to image, rather
    than each image's pixels: for a batch of n_n > 1 small images (each one tile), whose p_n pixels leave
    SPAN_MIN_WASTE or more of the columns of their half panels unused (7 x 7: 49 of 56 on AVX2), without
    groups or a prologue, where a tile packs its pixels (packs_pixels: AVX2, PACK_MIN_PANELS channel
    panels and PACK_MIN_STEPS steps at least), as a spanned tile must (_pack_columns). In-process A/B,
    2 threads, batch 8, Zen 3: 192 -> 1152 channels on 7 x 7 1.51 -> 1.39 ms, 320 -> 1280 3.89 -> 3.53,
    1152 -> 192 1.56 -> 1.25, 256 -> 512 on 6 x 6 0.73 -> 0.60, 576 -> 96 on 3 x 3 0.20 -> 0.13; with
    fewer channel panels packing costs more than the columns save (160 -> 24 on 7 x 7: 74 us spanned, 50 not)."""
    columns = half_panels(p_n)
    return (n_n > 1 and groups == 1 and prologue == 0 and small and packs_pixels(n_mb, k, 0, 1, 1)
            and columns - p_n >= SPAN_MIN_WASTE * columns)


@numba.njit(**SEQ)
def packs_pixels(panels, k, planes_bytes, taps, phases):
    """Whether a task's block of `panels` channel panels over k reduction steps packs its tile's pixels
    into panels first (_panels_by_pixels) rather than reading them where they lie: on AVX2 (one panel a
    microkernel call), over PACK_MIN_STEPS steps at least, for PACK_MIN_PANELS panels, or for
    PACK_MIN_PANELS_LARGE_PLANES when the tile's phase planes (planes_bytes; 0 for a 1x1 conv read in
    place) are over LARGE_PLANES_BYTES and the kernel's taps (KH * KW) over its phases (SH * SW) are few."""
    if panels_per_call() != 1 or k < PACK_MIN_STEPS:
        return False
    return panels >= PACK_MIN_PANELS or (panels >= PACK_MIN_PANELS_LARGE_PLANES and planes_bytes > LARGE_PLANES_BYTES
                                         and taps <= LARGE_PLANES_MAX_TAPS * phases)


def _packed_task_for(pointwise: bool, name: str):
    """The task function of _conv2d_packed_for(pointwise), named `name`."""

    def task(t, xf, wf, of, rf, bias, dims, window, split, planes, taps, acts, params, scratch, sizes, prologue):
        """Task t of conv_packed: one tile of pixels of one image and group, times one block of
        channel panels: the tile's input (phase planes, or the input in place, or a 1x1 conv's input
        through its prologue into scratch), the microkernel, the epilogue. A block of enough channel
        panels and steps packs its pixels first (packs_pixels, _panels_by_pixels)."""
        c_n, h, w, o_n, oh, ow, groups, n_mb, k = dims
        kh, kw, sh, sw, pt, pl, dh, dw = window
        tile, n_p, n_o, mbb, spanned = split  # spanned: the batch's pixels, cut as one row (spans_images), or 0
        hq, wq = planes
        cg, p_n = c_n // groups, oh * ow
        oi, pi = t % n_o, (t // n_o) % n_p
        g, n = (t // (n_o * n_p)) % groups, t // (n_o * n_p * groups)  # (0 and 0 when spanned)
        if pointwise and spanned == 0:  # whole half panels each, the last tile the rest
            p0 = tile_start(pi, n_p, p_n)
            p = tile_start(pi + 1, n_p, p_n) - p0
        else:
            p0 = pi * tile  # of image n, or of the batch's row when spanned
            p = min(tile, (spanned if spanned > 0 else p_n) - p0)
        mb0 = oi * mbb
        mb1 = min(n_mb, mb0 + mbb)
        x0 = (n * c_n + g * cg) * h * w
        # _panels_by_pixels (a spanned tile always: only its packing follows the pixels from image to image)
        packs = spanned > 0 or packs_pixels(mb1 - mb0, k, 0 if pointwise else xf.itemsize * cg * sh * sw * hq * wq,
                                            kh * kw, sh * sw)
        columns = np.empty(p if spanned > 0 else 0, np.int64)  # where each pixel of a spanned tile lies:
        for j in range(columns.size):  # the batch's pixel p0 + j, image i's pixel p0 + j - i * p_n
            i = (p0 + j) // p_n
            columns[j] = i * c_n * h * w + p0 + j - i * p_n
        inputs, accs = sizes
        # this thread's part of the scratch: its input, then its accumulators. A thread id past the parts
        # is a loop nested in another's, which runs its tasks on one thread: part 0 is then its own
        tid = thread_id()
        own = (tid if tid < scratch.size // (inputs + accs) else 0) * (inputs + accs)
        # the tile's input as k rows of pp columns: reduction step r at src[rows[r]:rows[r] + pp]; a 1x1 conv's
        # columns from `main` on (its last partial half panel) as k rows of a half panel: step r at tail[r * half:]
        half = panel_width() // 2
        tail = scratch[:0]
        main = 0
        if pointwise:  # each channel's pixels where they lie: row c at x0 + c * H * W + p0
            pp = half_panels(p)  # the tile's pixels, padded to whole half panels
            main = pp
            rows = np.empty(k, np.int64)
            for c in range(k):
                rows[c] = x0 + c * h * w + (0 if spanned > 0 else p0)  # (a spanned tile's pixels: columns)
            src, ldb = xf, h * w
            scale, shift, in_act = prologue
            if scale.size != 0:  # each channel's pixels through the prologue into scratch, zeros past the tile
                ldb = pp + ROW_PAD
                src = scratch[own:own + k * ldb]
                lo = np.float32(0.0 if in_act == 1 else -np.inf)
                for c in range(k):
                    sc, sf, r = scale[c], shift[c], rows[c]
                    for i in range(p):
                        src[u(c * ldb + i)] = max(xf[u(r + i)] * sc + sf, lo)
                    for i in range(p, pp):
                        src[u(c * ldb + i)] = 0
                    rows[c] = c * ldb
            elif pp > p and not packs:  # a partial last half panel: copied, so the columns past the tile read
                # zeros (packing zero-fills them itself, reading the input in place). Copying the whole tile instead
                # cost 10-20% of a 14 x 14 image's 1x1 conv (576 -> 96, 384 -> 64 channels; 2 threads, AVX-512 Xeon)
                main = pp - half
                tail = scratch[own:own + k * half]
                for c in range(k):
                    copy_run(tail, c * half, xf, rows[c] + main, p - main)
                    for i in range(p - main, half):
                        tail[u(c * half + i)] = 0
        else:  # the phase planes: pixel y * wq + x; the wq - ow columns past each output row are dropped
            pp = half_panels(p // ow * wq)
            size = sh * sw * hq * wq
            # zeros: the padding columns, which the gather does not write; past the last plane, what the last
            # panel reads (only columns past the tile's output rows)
            src = scratch[own:own + cg * size + pp + wq]
            margins = cg * size > WHOLE_ZEROING_FLOATS
            if not margins:
                src[:] = 0
            for c in range(cg):
                if margins:
                    zero_margins(src, c * size, hq, wq, w, sh, sw, pl)
                gather_planes(xf, x0 + c * h * w, h, w, p0 // ow * sh - pt, sh, sw, pl, src, c * size, hq, wq)
            src[cg * size:] = 0
            rows, ldb = taps, 0
        a0 = (g * n_mb + mb0) * k * MR  # the block's first weight panel
        out = (n, g, p0, p, pp)
        if packs:
            acc = scratch[own + inputs:own + inputs + (mb1 - mb0) * MR * pp]
            _panels_by_pixels(wf, a0, mb1 - mb0, k, src, rows, columns, acc, pp, p if pointwise else pp)
            for mb in range(mb0, mb1):
                if spanned > 0:
                    _spanned_out(acc, (mb - mb0) * MR * pp, mb, of, rf, bias, dims, out, acts, params)
                else:
                    _block_out(acc, (mb - mb0) * MR * pp, mb, of, rf, bias, dims, ow, wq, pointwise, out, acts, params)
        else:  # each panel of channels (two at once on AVX-512) through the whole reduction, then out
            pairs = panels_per_call()
            acc = scratch[own + inputs:own + inputs + pairs * MR * pp]
            act, post = acts
            # a 1x1 conv's single reduction chunk with a one-pass epilogue: straight into the output
            # (or an activation of more passes, SiLU say, with no residual or second activation: applied in place
            # to the panels' rows of the output once stored, _pointwise_out)
            direct = pointwise and k <= K_CHUNK and (act <= ONE_PASS and post <= 1 or post == 0 and rf.size == 0)
            mb = mb0
            while mb < mb1:
                two = pairs == 2 and mb + 1 < mb1
                if not pointwise and pp > CHUNK_COLUMNS and k * ow >= CHUNK_MIN_ROW_WORK:
                    _planes_out(wf, a0 + (mb - mb0) * k * MR, k, two, src, rows, acc, pp, mb, of, rf, bias, dims, ow,
                                wq, out, acts, params)
                    mb += 2 if two else 1
                    continue
                if direct:  # (a last panel's padding channels not stored: micro_gemm_out_rows)
                    _pointwise_out(wf, a0 + (mb - mb0) * k * MR, k, two, src, rows[0], ldb, main, tail, acc, pp, mb,
                                   of, rf, bias, dims, out, acts, params)
                    mb += 2 if two else 1
                    continue
                for kb in range(0, k, K_CHUNK):
                    kc, a = min(K_CHUNK, k - kb), a0 + ((mb - mb0) * k + kb) * MR
                    if pointwise:  # rows ldb apart; then the tail's half panel, rows a half panel apart
                        _tile_panels(kc, wf, a, k * MR, two, src, rows[kb], ldb, main, tail, kb * half, acc, pp, kb > 0)
                    elif two:
                        gemm_panels2_rows(kc, wf, a, k * MR, src, 0, rows, kb, acc, 0, pp, pp, kb > 0)
                    else:
                        gemm_panels_rows(kc, wf, a, src, 0, rows, kb, acc, 0, pp, pp, kb > 0)
                for q in range(2 if two else 1):
                    _block_out(acc, q * MR * pp, mb + q, of, rf, bias, dims, ow, wq, pointwise, out, acts, params)
                mb += 2 if two else 1

    return compiled_as(task, name)


_planes_task = _packed_task_for(False, "_planes_task")
_pointwise_task = _packed_task_for(True, "_pointwise_task")
# Any conv, its input gathered into phase planes; the emit rule sends a 1x1 stride-1 unpadded conv
# (is_pointwise) to conv1x1_packed, which reads its input in place. Two kernels, not one branching at
# run time: each compiles only its own path (one kernel for both took 28 s of numba's time on a first
# use; a 2-core AVX2 EPYC).
conv2d_packed = _conv2d_packed_for(False, "conv2d_packed")
conv1x1_packed = _conv2d_packed_for(True, "conv1x1_packed")
# conv1x1_packed with a prologue, for a float32 1x1 stride-1 unpadded conv without groups: a pre-activation
# BatchNorm and ReLU (DenseNet's norm1, relu1 before conv1) applied per input channel as each task copies
# its tile's input rows into its scratch, which the microkernel then reads. The separate pass wrote the
# whole normalised input and the conv read it back: a DenseNet-121 at batch 8 spent 10 ms of 147 in it.
conv1x1_packed_prologue = _conv2d_packed_for(True, "conv1x1_packed_prologue")


@numba.njit(**SEQ)
def _planes_out(wf, a, k, two, src, rows, acc, pp, mb, of, rf, bias, dims, ow, wq, out, acts, params):
    """Channel panel mb (and mb + 1 if two) of a windowed conv over its tile's phase planes (pp columns, output
    rows wq apart, reduction step r's at src[rows[r]:]), CHUNK_COLUMNS columns at a time: each chunk's block of
    sums (acc, rows CHUNK_COLUMNS apart) goes out through the epilogue, the columns past each output row
    dropped, before the next chunk is computed."""
    o_n, groups = dims[3], dims[6]
    n, g, p0, p, _ = out
    act, alpha, beta = acts[0], params[0], params[1]
    og, p_n = o_n // groups, dims[4] * dims[5]
    blocked = act > ONE_PASS  # bias and activation over the chunk's block first (activate_block)
    cc = min(pp, CHUNK_COLUMNS)
    for c0 in range(0, pp, cc):
        cn = min(cc, pp - c0)
        for kb in range(0, k, K_CHUNK):
            kc = min(K_CHUNK, k - kb)
            if two:
                gemm_panels2_rows(kc, wf, a + kb * MR, k * MR, src, c0, rows, kb, acc, 0, cc, cn, kb > 0)
            else:
                gemm_panels_rows(kc, wf, a + kb * MR, src, c0, rows, kb, acc, 0, cc, cn, kb > 0)
        for q in range(2 if two else 1):
            r0 = g * og + (mb + q) * MR  # the panel's first output channel
            rows_n, blk = min(g * og + og, r0 + MR) - r0, q * MR * cc
            if blocked:
                activate_block(acc[blk:blk + MR * cc], rows_n, cc, bias, r0, act, alpha, beta)
            y = c0 // wq
            while y < p // ow and y * wq < c0 + cn:  # the pieces of output rows in these columns
                s, e = max(c0, y * wq), min(c0 + cn, y * wq + ow)
                if e > s:
                    _rows_out(acc, blk + s - c0, cc, rows_n, of, (n * o_n + r0) * p_n + p0 + y * ow + s - y * wq, p_n,
                              e - s, bias, r0, blocked, rf, acts, params)
                y += 1


@numba.njit(inline="always", **SEQ)
def _tile_panels(kc, wf, a, ps, two, src, b0, ldb, n, tail, t0, acc, pp, accumulate):
    """A 1x1 conv's block of sums (acc, rows pp apart) over kc reduction steps from weight panel a (and a + ps if
    two): columns 0.. n from src (step r's at src[b0 + r * ldb], n whole half panels), then, if the tile's last
    partial half panel was copied (tail not empty), its half panel of columns from tail (step r's at
    tail[t0 + r * NR / 2])."""
    half = panel_width() // 2
    if two:
        gemm_panels2(kc, wf, a, ps, src, b0, ldb, acc, 0, pp, n, accumulate)
    else:
        gemm_panels(kc, wf, a, src, b0, ldb, acc, 0, pp, n, accumulate)
    if tail.size != 0 and two:
        gemm_panels2(kc, wf, a, ps, tail, t0, half, acc, n, pp, half, accumulate)
    elif tail.size != 0:
        gemm_panels(kc, wf, a, tail, t0, half, acc, n, pp, half, accumulate)


@numba.njit(**SEQ)
def _pointwise_out(wf, a, k, two, src, b0, ldb, main, tail, acc, pp, mb, of, rf, bias, dims, out, acts, params):
    """Channel panel mb (and mb + 1 if two) of a 1x1 conv over its tile's p pixels (step r's at src[b0
    + r * ldb], those from column `main` on at tail[r * NR / 2] instead) in one reduction chunk of k steps,
    with a one-pass epilogue: each whole panel of pixels
    goes from the registers into the output through the epilogue (micro_gemm_out); the last columns,
    under a panel, through the accumulators (acc, rows pp apart) and _one_pass_rows. Copied out of the
    accumulators, an expansion's blocks stalled on the output's cache misses after each row of
    panels: 128 -> 512 channels on 28 x 28, 245 us, 216 us with no output written at all."""
    c_n, h, w, o_n, oh, ow, groups, n_mb, _ = dims
    n, g, p0, p, _ = out
    act, post = acts
    alpha, beta = params[0], params[1]
    og, p_n, nr = o_n // groups, oh * ow, panel_width()
    late = act > ONE_PASS  # (no residual, no second activation: the task's `direct`) stored with its bias only
    bounds = one_pass_bounds(0 if late else act, alpha, beta, post)
    lo, hi, top = np.float32(bounds[0]), np.float32(bounds[1]), np.float32(bounds[2])
    c0 = g * og + mb * MR  # the first output channel
    o0 = (n * o_n + c0) * p_n + p0
    full = min(p, main) // nr * nr
    rows = min(og - mb * MR, (2 if two else 1) * MR)  # the panels' channels, but their padding
    for j in range(0, full, nr):
        if two and rows < 2 * MR:
            micro_gemm2_out_rows(k, wf, a, k * MR, src, b0 + j, ldb, of, o0 + j, p_n, bias, c0, lo, hi, top, rf, rows)
        elif two:
            micro_gemm2_out(k, wf, a, k * MR, src, b0 + j, ldb, of, o0 + j, p_n, bias, c0, lo, hi, top, rf)
        elif rows < MR:
            micro_gemm_out_rows(k, wf, a, src, b0 + j, ldb, of, o0 + j, p_n, bias, c0, lo, hi, top, rf, rows)
        else:
            micro_gemm_out(k, wf, a, src, b0 + j, ldb, of, o0 + j, p_n, bias, c0, lo, hi, top, rf)
    if full < p:  # (np.int64, np.bool_: not literals, common.py) columns full.. main in place, then the tail's
        _tile_panels(k, wf, a, k * MR, two, src, b0 + full, ldb, min(main, pp) - full, tail, np.int64(0), acc, pp,
                     np.bool_(False))
        _one_pass_rows(acc, np.int64(0), pp, rows, of, o0 + full, p_n, p - full, bias, c0, np.bool_(True), rf, bounds)
    if late:  # each channel's run of the tile's pixels, just written (in L2), through the activation in place
        for r in range(rows):
            activate_run(of, o0 + r * p_n, p, np.float32(0.0), act, np.float32(alpha), np.float32(beta))


@numba.njit(**SEQ)
def _panels_by_pixels(wf, a0, nb, k, src, rows, columns, acc, pp, valid):
    """acc[i * pp + j] = sum_r wf[panels] * src[rows[r] + j] for the nb channel panels from a0 (row i:
    channel i of the block) and j < pp, src read as zeros from column `valid` on: BLIS's loop order.
    Column j read at src[rows[r] + columns[j]] instead where `columns` is not empty (a spanned tile).
    Per chunk of K_CHUNK reduction steps and SUB_BYTES of columns, the columns are packed into
    panels (_pack_rows); each panel, in L1, meets every channel panel's weights in turn, which come
    from L2. Reading the input in place instead, every microkernel step loads its pixels from L2 at
    the input's pitch, split across cache lines (and a 32 x 32 image's rows 4 KiB apart alias in L1):
    512 -> 128 channels on 32 x 32, 1.73 -> 0.91 ms (AVX-512 Xeon, 1 thread)."""
    nr = panel_width()
    kcs = min(k, K_CHUNK)
    sub = min(pp, max(nr, SUB_BYTES // (src.itemsize * kcs) // nr * nr))
    bp = aligned_empty(kcs * sub, src.dtype)
    for c0 in range(0, pp, sub):
        cn = min(sub, pp - c0)
        full = cn // nr * nr
        for kb in range(0, k, K_CHUNK):
            kc = min(K_CHUNK, k - kb)
            if columns.size == 0:
                _pack_rows(bp, src, rows, kb, kc, c0, cn, min(cn, max(0, valid - c0)))
            else:
                _pack_columns(bp, src, rows, columns, kb, kc, c0, cn, min(cn, max(0, valid - c0)))
            for j in range(0, full, nr):
                for mb in range(nb):
                    micro_gemm(kc, wf, a0 + (mb * k + kb) * MR, bp, j * kc, nr, acc, mb * MR * pp + c0 + j, pp,
                               kb > 0)
            if full < cn:
                for mb in range(nb):
                    micro_gemm_half(kc, wf, a0 + (mb * k + kb) * MR, bp, full * kc, nr // 2, acc,
                                    mb * MR * pp + c0 + full, pp, kb > 0)


@numba.njit(**SEQ)
def _pack_rows(bp, src, rows, r0, kc, c0, cn, n):
    """Columns c0.. c0 + cn of reduction steps r0.. r0 + kc as microkernel panels: column c0 + j of
    step r0 + r at bp[(j // NR) * kc * NR + r * NR + j % NR] (a half last panel NR / 2 wide); the
    columns from c0 + n on are zeros, not read (a 1x1 conv's pixels past its tile, in place)."""
    nr = panel_width()
    full = cn // nr * nr
    whole = min(full, n // nr * nr)  # the panels read whole
    for r in range(kc):
        s = rows[r0 + r] + c0
        for j in range(0, whole, nr):
            d = j * kc + r * nr
            for i in range(nr):
                bp[u(d + i)] = src[u(s + j + i)]
        if n >= cn and full < cn:
            d = full * kc + r * (nr // 2)
            for i in range(nr // 2):
                bp[u(d + i)] = src[u(s + full + i)]
        elif n < cn:  # the last panels column by column, zeros past n
            for j in range(whole, cn):
                width = nr if j < full else nr // 2
                start = j // nr * nr
                bp[u(start * kc + r * width + j - start)] = src[u(s + j)] if j < n else 0


@numba.njit(**SEQ)
def _pack_columns(bp, src, rows, columns, r0, kc, c0, cn, n):
    """_pack_rows with column c0 + j of step r0 + r read at src[rows[r0 + r] + columns[c0 + j]]: a spanned
    tile's pixels, whose panels may cross from one image to the next (those read column by column)."""
    nr = panel_width()
    full = cn // nr * nr
    whole = min(full, n // nr * nr)  # the panels read whole
    for r in range(kc):
        s = rows[r0 + r]
        for j in range(0, whole, nr):
            d, c = j * kc + r * nr, columns[c0 + j]
            if columns[c0 + j + nr - 1] == c + nr - 1:  # within one image
                for i in range(nr):
                    bp[u(d + i)] = src[u(s + c + i)]
            else:
                for i in range(nr):
                    bp[u(d + i)] = src[u(s + columns[c0 + j + i])]
        for j in range(whole, cn):  # the last panels column by column, zeros past n
            width = nr if j < full else nr // 2
            start = j // nr * nr
            bp[u(start * kc + r * width + j - start)] = src[u(s + columns[c0 + j])] if j < n else 0


@numba.njit(**SEQ)
def _spanned_out(acc, blk, mb, of, rf, bias, dims, out, acts, params):
    """_block_out for a spanned tile (pointwise, one group): its pixels p0.. p0 + p of the batch's row
    (out = (0, 0, p0, p, pp)) written image by image."""
    o_n, oh, ow = dims[3], dims[4], dims[5]
    _, _, p0, p, pp = out
    act, alpha, beta = acts[0], params[0], params[1]
    p_n = oh * ow
    r0, r1 = mb * MR, min(o_n, mb * MR + MR)
    blocked = act > ONE_PASS
    if blocked:  # once over the whole block: the images' runs below then only copy it out
        activate_block(acc[blk:blk + MR * pp], r1 - r0, pp, bias, r0, act, alpha, beta)
    q = p0
    while q < p0 + p:  # the run of image n's pixels from q
        n = q // p_n
        run = min(p0 + p, (n + 1) * p_n) - q
        _rows_out(acc, blk + q - p0, pp, r1 - r0, of, (n * o_n + r0) * p_n + q - n * p_n, p_n, run, bias, r0,
                  blocked, rf, acts, params)
        q += run


@numba.njit(**SEQ)
def _block_out(acc, blk, mb, of, rf, bias, dims, ow, wq, pointwise, out, acts, params):
    """Channel panel mb's block of accumulators (MR rows of pp at acc[blk:]) into the output: the
    columns past each output row dropped, then the epilogue (bias, activation, residual)."""
    o_n, oh, groups = dims[3], dims[4], dims[6]
    n, g, p0, p, pp = out
    act, alpha, beta = acts[0], params[0], params[1]
    og, p_n = o_n // groups, oh * ow
    r0, r1 = mb * MR, min(og, mb * MR + MR)
    if not pointwise and wq != ow:  # each channel's output rows side by side, as the output lies
        for r in range(r1 - r0):
            for y in range(1, p // ow):
                copy_run(acc, blk + r * pp + y * ow, acc, blk + r * pp + y * wq, ow)
    blocked = act > ONE_PASS  # bias and activation over the whole panel first (activate_block)
    if blocked:
        activate_block(acc[blk:blk + MR * pp], r1 - r0, pp, bias, g * og + r0, act, alpha, beta)
    _rows_out(acc, blk, pp, r1 - r0, of, (n * o_n + g * og + r0) * p_n + p0, p_n, p, bias, g * og + r0, blocked,
              rf, acts, params)


@numba.njit(**SEQ)
def _rows_out(acc, a0, pitch, rows, of, d0, p_n, p, bias, c0, blocked, rf, acts, params):
    """The rest of the epilogue of rows r < rows of p sums (acc[a0 + r * pitch:]) into output channels
    c0 + r (of[d0 + r * p_n:]): bias and activation unless `blocked` (activate_block did them), the
    residual and the second activation."""
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    if post > 1:  # a second activation of more than one pass: epilogue_run's passes
        for r in range(rows):
            bv = 0.0 if bias is None or blocked else bias[c0 + r]
            epilogue_run(of, d0 + r * p_n, p, acc, a0 + r * pitch, bv, rf, 0 if blocked else act, alpha, beta,
                         post, post_alpha, post_beta)
        return
    # the rest of the epilogue in one pass over the block: a call of epilogue_run per channel cost more
    # than the channel's sums on small images (48 -> 288 channels on 4 x 4 at batch 8, Hardswish: 50 us
    # against onnxruntime's 16)
    _one_pass_rows(acc, a0, pitch, rows, of, d0, p_n, p, bias, c0, not blocked, rf,
                   one_pass_bounds(0 if blocked else act, alpha, beta, post))


@numba.njit(**SEQ)
def _one_pass_rows(acc, a0, pitch, rows, of, d0, p_n, p, bias, c0, add_bias, rf, bounds):
    """Rows r < rows of p sums (acc[a0 + r * pitch:]) into output channels c0 + r (of[d0 + r * p_n:])
    through a one-pass epilogue: max(min(max(v + bias, lo), hi) + residual, top), bounds = (lo, hi,
    top) (one_pass_bounds), the bias only if add_bias (and bias is not None). The residual is read
    just before the output is written over it: when it is the output's own buffer, it is read there,
    so that the loop still vectorises."""
    lo, hi, top = np.float32(bounds[0]), np.float32(bounds[1]), np.float32(bounds[2])
    over_residual = rf.size != 0 and rf.ctypes.data == of.ctypes.data
    for r in range(rows):
        bv = np.float32(0.0 if bias is None or not add_bias else bias[c0 + r])
        d, a = d0 + r * p_n, a0 + r * pitch
        if over_residual:
            for i in range(p):
                of[u(d + i)] = max(min(max(acc[u(a + i)] + bv, lo), hi) + of[u(d + i)], top)
        elif rf.size != 0:
            for i in range(p):
                of[u(d + i)] = max(min(max(acc[u(a + i)] + bv, lo), hi) + rf[u(d + i)], top)
        else:
            for i in range(p):
                of[u(d + i)] = max(min(max(acc[u(a + i)] + bv, lo), hi), top)
