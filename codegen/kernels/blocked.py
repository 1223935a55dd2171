"""Kernels on the channel-blocked layout: a (N, C, H, W) tensor stored as (N, C / B, H, W, B), each
pixel's B channels of one block side by side, B = taps_width() (16 on AVX2, 64 on AVX-512; C a
multiple of B).

It is onnxruntime's NCHWc. A 1x1 conv on it is micro_gemm_taps with the pixels in the broadcasts and
the channels in the vectors, as conv2d_by_channels, but without the transposes: the input's MR pixels
of a reduction step are B floats apart in one contiguous block, and the output's MR x B block of
sums is one contiguous run of the output, stored from the registers through the epilogue
(micro_gemm_taps_out: bias along the vector, residual in the same layout). Against conv1x1_packed
on NCHW, in-process, 2 threads, Zen 3 EPYC (AVX2), with bias, residual and ReLU: 64 -> 256 channels
on 56 x 56 0.93-0.98 against 1.27-1.46 ms with the operands in cache, 1.37-1.41 against 2.05-2.28
with the caches evicted first; 256 -> 64 on 56 x 56 0.99 against 1.30; 128 -> 512 on 28 x 28 0.87
against 1.10; level on 14 x 14 (1024 -> 256, 256 -> 1024).

- to_blocked / from_blocked: the reorders at the edges of a blocked chain.
- conv1x1_blocked: a 1x1 stride-1 unpadded ungrouped conv with its epilogue, blocked in and out.
- conv2d_blocked: any other ungrouped conv (kernel, stride, dilation, zero padding): each task copies
  its band of output rows' input rows, zero-padded, into scratch, where every (channel, tap) of
  every output pixel lies at a fixed offset from the pixel's window.

Both take the weight as conv_channels.pack_channel_panels(weight, B) packs it.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import SEQ, num_threads, thread_id, u
from codegen.kernels.epilogue import ONE_PASS, epilogue_run, one_pass_bounds, residual_run
from codegen.kernels.gemm import PACKED_K_CHUNK, PARALLEL_MIN_MACS
from codegen.kernels.microkernel import MR, micro_gemm_taps, micro_gemm_taps_out, taps_width
from codegen.kernels.tasks import run_tasks

CHUNK_GROUPS = 16  # MR-pixel groups per task's chunk of an image: 96 pixels, a 6 KB block of each input block
MIN_TASKS = 16  # tasks at least (8 a thread on 2), by splitting the output blocks into groups
BAND_BYTES = 1 << 18  # a conv2d_blocked task's gathered input rows, at most (where one output row's fit)


@numba.njit(**SEQ)
def to_blocked(x, out):
    """out[n, c // B, h, w, c % B] = x[n, c, h, w]: NCHW into the blocked layout (B = out.shape[4])."""
    n_n, c_n, h, w = x.shape
    b = out.shape[4]
    if c_n % b != 0 or out.shape[1] * b != c_n or out.shape[0] != n_n or out.shape[2:4] != (h, w):
        raise ValueError("to_blocked: the output is not the input's blocked shape")
    hw = h * w
    xf, of = x.reshape(-1), out.reshape(-1)
    for m in range(n_n * c_n // b):  # each (image, block): B planes into one run
        s, d = m * b * hw, m * hw * b
        for p in range(hw):
            for j in range(b):
                of[u(d + p * b + j)] = xf[u(s + j * hw + p)]


@numba.njit(**SEQ)
def from_blocked(x, out):
    """out[n, c, h, w] = x[n, c // B, h, w, c % B]: the blocked layout back into NCHW (B = x.shape[4])."""
    n_n, c_n, h, w = out.shape
    b = x.shape[4]
    if c_n % b != 0 or x.shape[1] * b != c_n or x.shape[0] != n_n or x.shape[2:4] != (h, w):
        raise ValueError("from_blocked: the input is not the output's blocked shape")
    hw = h * w
    xf, of = x.reshape(-1), out.reshape(-1)
    for m in range(n_n * c_n // b):
        s, d = m * hw * b, m * b * hw
        for j in range(b):
            for p in range(hw):
                of[u(d + j * hw + p)] = xf[u(s + p * b + j)]


@numba.njit(**SEQ)
def conv1x1_blocked(x, wt, bias, residual, out, act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv1x1(x, W) + bias) + residual) on the blocked layout: x (N, C / B, H, W, B),
    wt = conv_channels.pack_channel_panels(W, B) (O / B, C, B), out and residual (N, O / B, H, W, B) (residual None
    or empty for none; it may be out itself), B = taps_width(). Tasks: (image, chunk of CHUNK_GROUPS
    MR-pixel groups, group of output blocks), at least MIN_TASKS of them (below PARALLEL_MIN_MACS,
    one, in the calling thread)."""
    n_n, cb_n, h, w, b = x.shape
    ob_n, hw = out.shape[1], h * w
    c_n = cb_n * b
    if b != taps_width() or wt.shape != (ob_n, c_n, b) or out.shape != (n_n, ob_n, h, w, b):
        raise ValueError("conv1x1_blocked: blocks of another width, or operands of mismatched shapes")
    groups = -(-hw // MR)
    chunks = -(-groups // CHUNK_GROUPS)
    serial = n_n * hw * ob_n * b * c_n < PARALLEL_MIN_MACS
    n_g = 1  # groups of output blocks
    while not serial and n_n * chunks * n_g < MIN_TASKS and n_g < ob_n:
        n_g *= 2
    per = -(-ob_n // n_g)
    n_g = -(-ob_n // per)
    pix = np.zeros(hw + MR, np.int64)  # pixel p at p * B; MR past the image, for the last group's calls
    pix[:hw] = np.arange(hw) * b
    rows = np.empty(c_n, np.int64)  # reduction step c: input channel c of each pixel
    for c in range(c_n):
        rows[c] = (c // b) * hw * b + c % b
    tasks = n_n * chunks * n_g
    data = (x.reshape(-1), wt.reshape(-1), bias, residual_run(residual, out), out.reshape(-1), pix, rows,
            (n_n, c_n, hw, ob_n, b, chunks, n_g, per), (act, post), (alpha, beta, post_alpha, post_beta))
    if serial:
        for t in range(tasks):
            _conv1x1_task(t, *data)
    else:
        run_tasks(_conv1x1_task, tasks, data)


@numba.njit(**SEQ)
def _conv1x1_task(t, xf, wf, bias, rf, of, pix, rows, dims, acts, params):
    """Task t of conv1x1_blocked: its chunk of pixels times its group of output blocks (_blocked_out)."""
    n_n, c_n, hw, ob_n, b, chunks, n_g, per = dims
    gi, ci, n = t % n_g, (t // n_g) % chunks, t // (n_g * chunks)
    p0 = ci * CHUNK_GROUPS * MR
    _blocked_out(xf, n * c_n * hw, pix, p0, p0, min(hw, p0 + CHUNK_GROUPS * MR), rows, c_n, wf, bias, rf, of,
                 n * ob_n, hw, b, gi * per, min(ob_n, (gi + 1) * per), acts, params)


@numba.njit(**SEQ)
def _blocked_out(a, a0, pix, pix0, p0, p1, rows, k, wf, bias, rf, of, ob0, hw, b, q0, q1, acts, params):
    """Output pixels [p0, p1) of output blocks [q0, q1) of one image (its first block ob0 of the output):
    pixel p's reduction step r at a[a0 + pix[pix0 + p - p0] + rows[r]] (pix: MR entries past p1, any
    offset inside a), k steps, times wf's panel q. MR pixels by B channels a call: stored from the
    registers through the one-pass epilogue where the reduction is one chunk (PACKED_K_CHUNK steps),
    else summed chunk by chunk (the chunk's weights stay in L1 across the pixels) into a block of
    sums, then out; the last partial group likewise; activations of more than one pass after, over
    the pixels' run."""
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    one_pass = act <= ONE_PASS and post <= 1
    bounds = one_pass_bounds(act, alpha, beta, post) if one_pass else (-np.inf, np.inf, -np.inf)
    lo, hi, top = np.float32(bounds[0]), np.float32(bounds[1]), np.float32(bounds[2])
    res = rf if one_pass else rf[:0]  # a residual after an activation of more than one pass: epilogue_run's
    chunked = k > PACKED_K_CHUNK
    whole = p0 if chunked else p0 + (p1 - p0) // MR * MR  # the groups stored from the registers end here
    n_acc = -(-(p1 - whole) // MR) * MR
    kc = -(-k // -(-k // PACKED_K_CHUNK))  # chunks of equal length
    acc = np.empty(n_acc * b, np.float32)
    for q in range(q0, q1):
        w0 = q * k * b
        o0 = (ob0 + q) * hw * b
        for p in range(p0, whole, MR):
            micro_gemm_taps_out(k, a, a0, pix, pix0 + p - p0, rows, 0, wf, w0, b, of, o0 + p * b, b, bias, q * b,
                                lo, hi, top, res)
        if whole < p1:
            for kb in range(0, k, kc):
                for g in range(0, n_acc, MR):
                    micro_gemm_taps(min(kc, k - kb), a, a0, pix, pix0 + whole - p0 + g, rows, kb, wf, w0 + kb * b, b,
                                    acc, g * b, b, kb > 0)
            for i in range(p1 - whole):
                d = o0 + (whole + i) * b
                for j in range(b):
                    bv = np.float32(0.0) if bias is None else np.float32(bias[q * b + j])
                    v = min(max(acc[i * b + j] + bv, lo), hi)
                    of[u(d + j)] = max(v + res[u(d + j)] if res.size != 0 else v, top)
        if not one_pass:
            epilogue_run(of, o0 + p0 * b, (p1 - p0) * b, of, o0 + p0 * b, 0.0, rf, act, alpha, beta, post,
                         post_alpha, post_beta)


@numba.njit(**SEQ)
def conv2d_blocked(x, wt, bias, residual, out, kernel, stride, padding, dilation,
                   act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, W) + bias) + residual) on the blocked layout, ungrouped: x (N, C / B, H,
    W, B), wt = pack_channel_panels(W, B) (O / B, C * KH * KW, B), out and residual (N, O / B, OH, OW,
    B); padding (top, left, bottom, right) zeros. Tasks: (image, band of MR-pixel groups, group of
    output blocks), at least MIN_TASKS where the pixels allow (below PARALLEL_MIN_MACS, one); each
    gathers the input rows its band's windows read (BAND_BYTES at most, or one output row's) into
    scratch, zeros outside the image."""
    (kh, kw), (sh, sw), (dh, dw), pt, pl = kernel, stride, dilation, padding[0], padding[1]
    n_n, cb_n, h, w, b = x.shape
    ob_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    c_n, k = cb_n * b, cb_n * b * kh * kw
    if b != taps_width() or wt.shape != (ob_n, k, b) or out.shape[0] != n_n or out.shape[4] != b:
        raise ValueError("conv2d_blocked: blocks of another width, or operands of mismatched shapes")
    wp = (ow - 1) * sw + (kw - 1) * dw + 1  # a gathered row: every column a window reads
    serial = n_n * oh * ow * ob_n * b * k < PARALLEL_MIN_MACS
    groups = -(-oh * ow // MR)
    bands = 1 if serial else max(1, min(groups, -(-MIN_TASKS // n_n)))
    gpb = -(-groups // bands)  # groups per band
    while gpb > 1 and (gpb * MR // ow + 2) * sh * c_n * wp * 4 > BAND_BYTES:
        gpb = -(-gpb // 2)
    bands = -(-groups // gpb)
    hin = 0  # the most rows a band gathers
    for bi in range(bands):
        y0, y1 = bi * gpb * MR // ow, (min(oh * ow, (bi + 1) * gpb * MR) - 1) // ow
        hin = max(hin, (y1 - y0) * sh + (kh - 1) * dh + 1)
    n_g = 1
    while not serial and n_n * bands * n_g < MIN_TASKS and n_g < ob_n:
        n_g *= 2
    per = -(-ob_n // n_g)
    n_g = -(-ob_n // per)
    rows = np.empty(k, np.int64)  # reduction step (c, i, j): channel c's tap (i, j) from the window
    for c in range(c_n):
        for i in range(kh):
            for j in range(kw):
                rows[(c * kh + i) * kw + j] = (c // b) * hin * wp * b + (i * dh * wp + j * dw) * b + c % b
    tasks = n_n * bands * n_g
    size = cb_n * hin * wp * b
    scratch = np.empty((1 if serial else min(num_threads(), tasks)) * size, np.float32)
    data = (x.reshape(-1), wt.reshape(-1), bias, residual_run(residual, out), out.reshape(-1), rows,
            (n_n, cb_n, h, w, b, ob_n, oh, ow, k), (kh, dh, sh, sw, pt, pl, hin, wp, gpb, bands, n_g, per),
            (act, post), (alpha, beta, post_alpha, post_beta), scratch)
    if serial:
        for t in range(tasks):
            _conv2d_task(t, *data)
    else:
        run_tasks(_conv2d_task, tasks, data)


@numba.njit(**SEQ)
def _conv2d_task(t, xf, wf, bias, rf, of, rows, dims, window, acts, params, scratch):
    """Task t of conv2d_blocked: the input rows its band's windows read into this thread's scratch
    (zeros outside the image), then its output blocks (_blocked_out)."""
    n_n, cb_n, h, w, b, ob_n, oh, ow, k = dims
    kh, dh, sh, sw, pt, pl, hin, wp, gpb, bands, n_g, per = window
    gi, bi, n = t % n_g, (t // n_g) % bands, t // (n_g * bands)
    size = cb_n * hin * wp * b
    tid = thread_id()  # a thread id past the parts: a loop nested in another's, on one thread
    own = (tid if tid < scratch.size // size else 0) * size
    src = scratch[own:own + size]
    p0 = bi * gpb * MR
    p1 = min(oh * ow, p0 + gpb * MR)
    y0 = p0 // ow
    iy0 = y0 * sh - pt  # the band's first gathered row in the image
    n_rows = ((p1 - 1) // ow - y0) * sh + (kh - 1) * dh + 1
    for cb in range(cb_n):
        for r in range(n_rows):
            iy, d = iy0 + r, (cb * hin + r) * wp * b
            s = ((n * cb_n + cb) * h + iy) * w * b
            for cx in range(wp):
                ix = cx - pl
                if iy >= 0 and iy < h and ix >= 0 and ix < w:
                    for j in range(b):
                        src[u(d + cx * b + j)] = xf[u(s + ix * b + j)]
                else:
                    for j in range(b):
                        src[u(d + cx * b + j)] = 0
    pix = np.zeros(p1 - p0 + MR, np.int64)  # each pixel's window in the scratch; MR past the band, the first's
    for p in range(p0, p1):
        pix[p - p0] = (((p // ow - y0) * sh) * wp + p % ow * sw) * b
    _blocked_out(src, 0, pix, 0, p0, p1, rows, k, wf, bias, rf, of, n * ob_n, oh * ow, b, gi * per,
                 min(ob_n, (gi + 1) * per), acts, params)
