"""Convolution with the output channels in the vectors, for small images: each microkernel call
computes MR output pixels (the broadcasts) by a panel of output channels (the vectors), so an
image's pixels pad to a multiple of MR, not to a multiple of a vector as conv2d_packed's do.

conv2d_packed puts the pixels in the vectors and reads them from phase planes whose rows are
wq = ow + KW - 1 apart, computing the columns past each output row too: a 7 x 7 image's 49
pixels fill 64 columns on AVX-512 (9 x 7 padded to whole half panels), a 14 x 14 image's 196
fill 224. Here they fill 54 and 198 rows.

- conv1x1_by_channels: a 1x1 stride-1 conv, the pixels read where they lie (micro_gemm_a_rows on
  gemm.transpose_padded's weight).
- conv2d_by_channels: any kernel, stride, dilation and zero padding, and groups (each group's channels
  in panels of their own, pack_channel_panels(weight, panel, groups); the reduction a group's): each task
  gathers its images' channels into zero-padded planes (planes.py; one plane a channel whatever the
  stride: the pixel table steps by it), then micro_gemm_taps reads pixel i's reduction step (channel,
  tap) at pix[i] + taps[step] in them, times the weight packed by pack_channel_panels at compile
  time. Strided, one plane a channel gathers as row copies, where phase planes split every row: a
  grouped 96-channel conv stride 2 from 8 x 8 at batch 8 took 106 us with them, 67 without.

Both leave a (pixel, channel) block of sums, which _channels_out transposes into the output
through the epilogue.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import SEQ, aligned_empty, aligned_zeros, blocks, line_floats, num_threads, thread_id, u
from codegen.kernels.conv_packed import MIN_PANELS
from codegen.kernels.epilogue import ONE_PASS, epilogue_run, one_pass_bounds, residual_run
from codegen.kernels.gemm import PACKED_K_CHUNK, PACKED_ROWS, PARALLEL_MIN_MACS, gemm_row_groups
from codegen.kernels.microkernel import (
    MR,
    half_panels,
    micro_gemm_taps,
    micro_gemm_taps_half,
    micro_gemm_taps_vector,
    panel_width,
    taps_channels,
    taps_width,
)
from codegen.kernels.planes import tap_table
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vectors import copy_run, transpose_out, vector_floats

# floats between the rows of a block of sums past its channels (one cache line): _channels_out reads
# n rows at once (transpose_out) and the rest down a column, and rows a multiple of 2 KiB apart would
# all fall into two sets of the L1 cache
ACC_PAD = 16
IMAGE_BLOCK_BYTES = 1 << 19  # a task's images' phase planes, at most (or one image's): half of a core's L2
MIN_GROUPS = 4  # pixel groups (of MR) per task, at least, when an image's pixels are split between tasks


def pack_channel_panels(weight: np.ndarray, panel: int | None = None, groups: int = 1) -> np.ndarray:
    """A conv weight (O, C, KH, KW) as conv2d_by_channels takes it: panels of `panel` output channels
    (default: the taps_width() of the CPU numba compiles for, 64 on AVX-512, 16 on AVX2), each
    (K, panel) contiguous with K = C * KH * KW in (c, kh, kw) order (wt[P, r, i] = weight[P * panel
    + i, r]), the last panel padded with zero channels; with groups, each group's O / groups channels
    in panels of their own (K = C / groups * KH * KW). A microkernel call then reads its weights as
    one contiguous stream. AVX2's 16-channel calls on 64-channel panels read a quarter of each 256-byte
    row. On 16-channel panels, the same kernel: a 512 -> 512 3x3 conv on 7 x 7 at batch 1 3.70 -> 2.27
    ms (conv2d_packed 2.5-2.7), 256 -> 256 on 10 x 10 1.61 -> 1.09, DenseNet's 128 -> 32 on 7 x 7 at
    batch 8 0.34 -> 0.30 (Zen 3 EPYC, AVX2, 2 threads, in-process A/B, medians)."""
    if panel is None:
        from codegen.kernels.vectors import target_vector_floats

        panel = taps_channels(target_vector_floats())
    o_n = weight.shape[0]
    og, k = o_n // groups, int(np.prod(weight.shape[1:]))
    per = -(-og // panel)  # each group's panels: a group's channels never share a panel with another's
    padded = np.zeros((groups, per * panel, k), np.float32)
    padded[:, :og] = weight.reshape(groups, og, k)
    return np.ascontiguousarray(padded.reshape(groups * per, panel, k).transpose(0, 2, 1))


@numba.njit(**SEQ)
def _channels_out(acc, a0, ldc, p, c0, c1, of, o0, hw, rf, bias, acts, params):
    """A block of sums (pixel r, channel j at acc[a0 + r * ldc + j], r < p, j < c1 - c0) into the output,
    channel c0 + j's p pixels from of[o0 + j * hw], through the epilogue (bias, activation, residual).
    ReLU, ReLU6 and a residual then ReLU (ResNet) go on the way, reading each residual element just
    before writing the output over it (the memory plan may give the output the residual's buffer);
    the others after, in place: one run if the p pixels are the whole image (its channels lie end
    to end), else one per channel. Whole blocks of n x n (the vector's floats) go out transposed in
    registers (transpose_out), the rest one element at a time. Against a strided scalar read of every
    sum: 1x1 convs on 7 x 7 at batch 8, 48 -> 192 channels 126 -> 102 us, 16 -> 960 at batch 1 46 -> 36,
    a 32 -> 32 3x3 conv on 31 x 31 at batch 8 0.83-0.95x the time (Zen 3 EPYC, AVX2, 2 threads,
    in-process A/B, medians); 512 -> 2048 on 7 x 7, whose reduction dwarfs the output, level."""
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    one_pass = act <= ONE_PASS and post <= 1
    bounds = one_pass_bounds(act, alpha, beta, post) if one_pass else (-np.inf, np.inf, -np.inf)
    lo, hi, top = np.float32(bounds[0]), np.float32(bounds[1]), np.float32(bounds[2])
    res = one_pass and rf.size != 0
    n = vector_floats()
    whole_c, whole_p = (c1 - c0) // n * n, p // n * n  # whole n x n blocks: transposed in registers
    for jb in range(0, whole_c, n):
        for rb in range(0, whole_p, n):
            a, d = a0 + rb * ldc + jb, o0 + jb * hw + rb
            if res:
                transpose_out(acc, a, ldc, of, d, hw, bias, c0 + jb, lo, hi, top, rf)
            else:
                transpose_out(acc, a, ldc, of, d, hw, bias, c0 + jb, lo, hi, top, None)
    for j in range(c1 - c0):  # the rest one element at a time: the pixels past the whole blocks, then the channels
        bv = np.float32(0.0) if bias is None else np.float32(bias[c0 + j])
        d = o0 + j * hw
        for r in range(whole_p if j < whole_c else 0, p):
            v = min(max(acc[u(a0 + r * ldc + j)] + bv, lo), hi)
            of[u(d + r)] = max(v + rf[u(d + r)] if res else v, top)
    if not one_pass:
        runs, run = (1, (c1 - c0) * hw) if p == hw else (c1 - c0, p)
        for j in range(runs):
            epilogue_run(of, o0 + j * hw, run, of, o0 + j * hw, 0.0, rf, act, alpha, beta,
                         post, post_alpha, post_beta)


@numba.njit(**SEQ)
def conv2d_by_channels(x, wt, bias, residual, out, kernel, stride, padding, dilation,
                       act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, weight) + bias) + residual) for a float32 conv, wt =
    pack_channel_panels(weight, panel, groups) (groups: as many as the panels' reduction steps make);
    bias may be None, residual None or empty for none; padding
    (top, left, bottom, right) zeros. Tasks: (block of images, block of channel panels, block of
    pixel groups), shared out evenly (below PARALLEL_MIN_MACS multiply-adds, one task in the calling
    thread); each gathers its images' phase planes whole, so this is for
    small images (a few hundred KB of planes: they stay in L2).

    The pixels of a block of images are one run of MR-pixel groups (pix: where each pixel's window
    starts in the block's planes), so each chunk of a weight panel, in L1, meets all of them: a
    batch of 8 7 x 7 images, 512 -> 512 channels, image by image streamed the 9 MB of weights
    through L3 once an image."""
    (kh, kw), (sh, sw), (dh, dw), pt, pl = kernel, stride, dilation, padding[0], padding[1]
    n_n, c_n, h, w = x.shape
    o_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    k, p_n = wt.shape[1], oh * ow  # k: a group's reduction steps
    groups = c_n * kh * kw // k
    tw = taps_width()
    if wt.shape[2] % tw != 0:
        raise ValueError("conv2d_by_channels: weight panels narrower than the microkernel's channels")
    # one zero-padded plane a channel (no phase planes: the pixel table carries the stride), hq rows from
    # the top padding of pitch wq; unpadded, the input's own planes (direct: no gather, a copy of the
    # input, which took a fifth of a 64 -> 24 3x3 stride-2 conv from 15 x 15 at batch 8)
    direct = pt == 0 and pl == 0 and padding[2] == 0 and padding[3] == 0
    if direct:
        hq, wq = h, w
    else:
        hq, wq = (oh - 1) * sh + (kh - 1) * dh + 1, max((ow - 1) * sw + (kw - 1) * dw + 1, pl + w)
    size = hq * wq
    taps = tap_table(c_n // groups, kh, kw, 1, 1, dh, dw, hq, wq)  # where a group's reduction steps read
    # below PARALLEL_MIN_MACS one task in the calling thread: a split of one image gathers its planes in
    # each task, and with the wake-up that cost more than the halved products saved (after a 48 -> 48 conv
    # on 7 x 7, workers spinning as in a forward: 16 -> 16 3x3 on 7 x 7 9.8 -> 8.3 us, 8 -> 16 7.4 -> 6.1;
    # 24 -> 24, 254k, level; Zen 3 EPYC, AVX2, 2 threads)
    serial = n_n * p_n * o_n * k < PARALLEL_MIN_MACS
    # blocks of images whose planes fit IMAGE_BLOCK_BYTES, as many blocks as share out evenly
    n_b = max(1, min(n_n, -(-(c_n * size * x.itemsize * n_n) // IMAGE_BLOCK_BYTES)))
    while not serial and n_b % num_threads() != 0 and n_b < n_n:
        n_b += 1
    nb = -(-n_n // n_b)
    n_b = -(-n_n // nb)
    rows = -(-nb * p_n // MR) * MR
    # an image's planes in the input (direct) or scratch: a grouped conv gathers one group's channels at a time
    # into the same planes, so they stay in L1 and their padding is zeroed once a task
    image = (c_n if direct or groups == 1 else c_n // groups) * size
    pix = np.empty(rows, np.int64)  # where each pixel's window starts; the last repeated past the block
    for q in range(rows):
        m, pq = min(q, nb * p_n - 1) // p_n, min(q, nb * p_n - 1) % p_n
        pix[q] = m * image + pq // ow * sh * wq + pq % ow * sw
    panels = groups * -(-(o_n // groups) // tw)
    n_c, cpt = (1, panels) if serial else blocks(n_b, panels, 1)
    if panels % n_c != 0:  # blocks of unequal panels (3 as 2 and 1 kept a thread idle a third of the time)
        n_c, cpt = 1, panels
    # too few images and panels for the threads (DenseNet's 128 -> 32 channels): blocks of pixel groups
    n_g, gpt = (1, rows // MR) if serial else blocks(n_b * n_c, rows // MR, MIN_GROUPS)
    kc = -(-k // -(-k // PACKED_K_CHUNK))  # reduction chunks of equal length (144 steps: 72 and 72, not 128 and 16)
    ldc = tw + ACC_PAD
    planes, accs = line_floats(0 if direct else nb * image), line_floats(gpt * MR * ldc)  # each on a cache line
    tasks = n_b * n_c * n_g
    scratch = aligned_empty((1 if serial else min(num_threads(), tasks)) * (planes + accs), np.float32)
    data = (x.reshape(-1), wt.reshape(-1), bias, residual_run(residual, out), out.reshape(-1),
            (n_n, c_n, h, w, o_n, p_n, k, wt.shape[2], groups), (pt, pl, hq, wq, direct), taps, pix,
            (nb, n_c, cpt, n_g, gpt, ldc, kc), (act, post), (alpha, beta, post_alpha, post_beta), scratch,
            (planes, accs))
    run_tasks(_taps_task, tasks, data, serial)


@numba.njit(**SEQ)
def _taps_task(t, xf, wf, bias, rf, of, dims, window, taps, pix, split, acts, params, scratch, sizes):
    """Task t of conv2d_by_channels: its images' phase planes into this thread's scratch (unless the
    conv reads the input directly), then each of its block's channel panels through the whole reduction
    (in chunks whose weights stay in L1 across the pixel groups) into a block of sums, and out
    (_channels_out) image by image."""
    n_n, c_n, h, w, o_n, p_n, k, cp, groups = dims  # cp: the weight's channels per panel
    nb, n_c, cpt, n_g, gpt, ldc, chunk = split
    planes, accs = sizes
    tw = taps_width()
    ci, gi, bi = t % n_c, (t // n_c) % n_g, t // (n_c * n_g)
    n0 = bi * nb
    n1 = min(n_n, n0 + nb)
    v1 = (n1 - n0) * p_n  # the block's pixels, image after image
    g0 = gi * gpt
    g1 = min(-(-v1 // MR), g0 + gpt)
    v0 = g0 * MR  # the task's pixels: v0 to min(v1, g1 * MR)
    tid = thread_id()  # a thread id past the parts: a loop nested in another's, on one thread
    own = (tid if tid < scratch.size // (planes + accs) else 0) * (planes + accs)
    direct = window[4]
    size = window[2] * window[3]
    src = scratch[own:own + planes]  # (empty when direct)
    og, cg = o_n // groups, c_n // groups
    per, per_cp = -(-og // tw), -(-og // cp)  # a group's panels of tw channels, and of the weight's cp
    j0, j1 = ci * cpt, min(groups * per, (ci + 1) * cpt)  # the task's panels
    if groups == 1 and not direct:
        _gather_channels(xf, src, n0, n1, 0, c_n, dims, window, True)
    acc = scratch[own + planes:own + planes + accs]
    for j in range(j0, j1):
        grp, jj = j // per, j % per
        if groups > 1 and not direct and (j == j0 or jj == 0):  # a group's channels before its panels, in L1
            _gather_channels(xf, src, n0, n1, grp * cg, grp * cg + cg, dims, window, j == j0)
        c0 = grp * og + jj * tw
        c1 = min(grp * og + og, c0 + tw)
        width = call_channels(c1 - c0, tw, vector_floats())
        a0 = grp * cg * size if direct else 0  # the group's first channel's planes (pix: each image's)
        b0 = (grp * per_cp + jj * tw // cp) * k * cp + jj * tw % cp
        if direct:  # (two calls, not one of either array: a read-only input would not unify with scratch)
            _panel_sums(xf, n0 * c_n * size + a0, pix, g0, g1, taps, k, chunk, wf, b0, cp, acc, ldc, width)
        else:
            _panel_sums(src, a0, pix, g0, g1, taps, k, chunk, wf, b0, cp, acc, ldc, width)
        v = v0
        while v < min(v1, g1 * MR):  # each image's part of the task's pixels
            m, pv = v // p_n, v % p_n
            run = min(p_n - pv, min(v1, g1 * MR) - v)
            _channels_out(acc, (v - v0) * ldc, ldc, run, c0, c1, of, ((n0 + m) * o_n + c0) * p_n + pv, p_n, rf, bias,
                          acts, params)
            v += run


@numba.njit(**SEQ)
def call_channels(n, panel, vector):
    """The channels of the narrowest micro_gemm_taps call that covers n of a panel's: the panel's, half of them,
    or one vector (AVX-512's 16, where a half call would compute twice the products)."""
    return panel if n > panel // 2 else panel // 2 if n > vector else vector


@numba.njit(**SEQ)
def _panel_sums(src, a0, pix, g0, g1, taps, k, chunk, wf, b0, cp, acc, ldc, width):
    """A panel's sums for pixel groups [g0, g1) into acc (group g at (g - g0) * MR rows of ldc): the
    reduction in chunks, each chunk's weights (at b0 + step * cp) in L1 across the groups; pixel i's
    step reads src[a0 + pix[i] + taps[step]]. width: the channels of a call, taps_width(), half of it or
    one vector."""
    for kb in range(0, k, chunk):
        kc = min(chunk, k - kb)
        for g in range(g0, g1):
            r = (g - g0) * MR * ldc
            if width == taps_width():
                micro_gemm_taps(kc, src, a0, pix, g * MR, taps, kb, wf, b0 + kb * cp, cp, acc, r, ldc, kb > 0)
            elif width == taps_width() // 2:
                micro_gemm_taps_half(kc, src, a0, pix, g * MR, taps, kb, wf, b0 + kb * cp, cp, acc, r, ldc, kb > 0)
            else:
                micro_gemm_taps_vector(kc, src, a0, pix, g * MR, taps, kb, wf, b0 + kb * cp, cp, acc, r, ldc, kb > 0)


@numba.njit(**SEQ)
def _gather_channels(xf, src, n0, n1, ca, cb, dims, window, zero):
    """Channels [ca, cb) of images [n0, n1) into zero-padded planes in src, image n's channel c at
    ((n - n0) * (cb - ca) + c - ca) * size: only the rows inside the image are written, so the padding
    must be zero already (zero: src's planes zeroed first). A grouped conv gathers each group over the
    last one's planes, zeroed once a task: 96 channels in groups of 8, stride 2 from 8 x 8, had zeroed and
    gathered 96 planes of their own through gather_planes, one call a channel (half the conv's time)."""
    c_n, h, w = dims[1], dims[2], dims[3]
    pt, pl, hq, wq, _ = window
    size = hq * wq
    cn = cb - ca
    if zero:
        src[:(n1 - n0) * cn * size] = 0
    r0, r1 = max(0, pt), min(hq, pt + h)  # the plane's rows inside the image
    for n in range(n0, n1):
        for c in range(ca, cb):
            x0, p0 = (n * c_n + c) * h * w + (r0 - pt) * w, ((n - n0) * cn + c - ca) * size + r0 * wq + pl
            for r in range(r1 - r0):
                copy_run(src, p0 + r * wq, xf, x0 + r * w, w)


@numba.njit(**SEQ)
def conv1x1_by_channels(x, wt, bias, residual, out, act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv1x1(x, W) + bias) + residual) for a 1x1 stride-1 unpadded float32 conv,
    wt = gemm.transpose_padded(W as (O, C)) made at compile time: the output channels in the
    vectors, MR pixels a microkernel call (linear_packed's orientation, the pixels read where they
    lie: a channel's pixels side by side). For small images, where conv2d_packed pads the pixels
    to whole half panels: a 7 x 7 image's 49 pixels fill 64 columns on AVX-512, 54 rows here.
    Tasks: (image, tile of up to PACKED_ROWS pixels, block of channel panels), shared out evenly."""
    n_n, k, h, w = x.shape
    o_n, hw = out.shape[1], h * w
    n_p = -(-hw // PACKED_ROWS)
    serial = n_n * hw * o_n * k < PARALLEL_MIN_MACS
    panels = -(-o_n // panel_width())  # in the calling thread, one block of every channel
    n_c, cpt = (1, panels) if serial else blocks(n_n * n_p, panels, MIN_PANELS)
    rf = residual_run(residual, out)
    data = (x.reshape(-1), wt.reshape(-1), bias, rf, out.reshape(-1), (n_n, k, hw, o_n), (act, post),
            (alpha, beta, post_alpha, post_beta))
    run_tasks(_by_channels_task, n_n * n_p * n_c, (n_p, n_c, cpt, *data), serial)


@numba.njit(**SEQ)
def _by_channels_task(t, n_p, n_c, cpt, xf, wf, bias, rf, of, dims, acts, params):
    """Task t of conv1x1_by_channels: pixels [p0, p0 + p) of image n times channels [c0, c1), into
    a (pixel, channel) block (gemm_row_groups), then out channel by channel through the epilogue."""
    n_n, k, hw, o_n = dims
    nr = panel_width()
    ci, pi, n = t % n_c, (t // n_c) % n_p, t // (n_c * n_p)
    p0 = pi * PACKED_ROWS
    p = min(PACKED_ROWS, hw - p0)
    c0 = ci * cpt * nr
    c1 = min(o_n, c0 + cpt * nr)
    width = half_panels(c1 - c0)
    groups = -(-p // MR)
    x0 = n * k * hw + p0
    partial = p % MR != 0
    last = aligned_zeros(k * MR if partial else 0, np.float32)  # the last pixels, zero-padded to MR: [c][i]
    if partial:
        full = (groups - 1) * MR
        for c in range(k):
            for i in range(p - full):
                last[u(c * MR + i)] = xf[u(x0 + c * hw + full + i)]
    ldc = width + ACC_PAD  # rows a multiple of 2 KiB apart: 512 -> 2048 channels
    acc = aligned_empty(groups * MR * ldc, np.float32)
    gemm_row_groups(xf, x0, 1, hw, groups, last, 1, MR, wf, k, c0, width, acc, ldc)
    # (not a literal: common.py)
    _channels_out(acc, np.int64(0), ldc, p, c0, c1, of, (n * o_n + c0) * hw + p0, hw, rf, bias, acts, params)
