"""Matrix products: linear, fused_linear and matmul (torch semantics).

A float32 linear layer whose weight is known at compile time runs on our microkernel
(linear_packed), its weight laid out in panels once (transpose_padded). The other products
run in single-threaded OpenBLAS (common.gemm), one block of rows (or of output features)
per task of a parallel loop, but for batches of small float32 matrices (attention over a few
tokens: matmul_small, on the microkernel). A product too small to repay waking the
other threads (PARALLEL_MIN_MACS) runs its tasks in the calling thread. Integer or
mixed-dtype matmuls fall back to a plain loop.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import (
    SEQ,
    aligned_empty,
    aligned_zeros,
    blocks,
    gemm,
    gemm_blocks,
    line_floats,
    num_threads,
    thread_id,
    u,
)
from codegen.kernels.epilogue import ONE_PASS, activate_copy_run, epilogue_run, residual_run
from codegen.kernels.microkernel import (
    MR,
    half_panels,
    micro_gemm_a_rows,
    micro_gemm_a_rows_half,
    micro_gemm_a_rows_vector,
    panel_width,
    rows_width,
    taps_channels,
)
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vectors import copy_run, prefetch_run, target_vector_floats, vector_floats

MIN_ROWS = 8  # rows (or output features) per block of a split product, at least
GEMV_MAX_ROWS = 2  # products of this many rows or fewer run as dot products (see linear)
# the dot product's sum may be reordered into vector lanes (reassoc) and use fused multiply-adds
DOT = {**SEQ, "fastmath": {"reassoc", "contract"}}
# below this many multiply-adds (a few microseconds on one core) a product runs in the calling
# thread: waking the others for a parallel loop costs more (an MLP's layers, a transformer's heads)
PARALLEL_MIN_MACS = 1 << 17
PACKED_ROWS = 16 * MR  # rows per task of linear_packed, at most: a (96, 256) accumulator block, 96 KB
PACKED_K_CHUNK = 128  # reduction steps per microkernel call: the weight panel (32 KB on AVX-512) stays in L1
# with this many row groups or more, gemm_row_groups asks for the next block's weights a share before each
# group: only the first group to read a block would otherwise stream it from memory, the others computing
# from L1 with the memory idle. A 7 x 7 conv's 9 groups, 2048 -> 512 channels with its weights out of
# cache (as in a model): 310 -> 254-279 us, 512 -> 2048: 340-349 -> 295-301 (AVX-512 EPYC, 2 threads).
# One group (a linear layer on one row) runs 20-30% slower with the whole next block asked for at once.
PREFETCH_MIN_GROUPS = 3
# float32 matmuls of at most this many multiply-adds a matrix run matmul_small: a BLAS call costs about a
# microsecond before it multiplies (ViT-mini's attention at batch 8, 32 products of 17 x 16 x 17: 0.8 us
# each on a thread)
SMALL_MATMUL_MACS = 1 << 17


# transpose_padded's panel width inside a kernel: the widest micro_gemm_a_rows call's columns (rows_width(),
# 64 on AVX-512, 16 on AVX2), so that a whole call reads its weights as one contiguous stream. Panels 64
# wide on AVX2 put a 16-wide call's rows 256 bytes apart, a weight chunk's 128 rows on a quarter of L1's sets
# (shared with A's rows and the sums). linear_packed alone, in-process A/B, Zen 3 EPYC (AVX2), 16 against 64 wide,
# GFLOP/s: 2048 x 2048 x 2048 79-80 against 69-70 on one thread, 146 against 122 on two; 784 x 768 -> 192
# 78-80 / 71-74 and 137-149 / 122-137; 136 x 64 -> 192 73-75 / 71-72 and 106-120 / 103-114
transposed_pad = rows_width


def transposed_pad_floats() -> int:
    """transposed_pad() of the code numba compiles in this process: the panel width transpose_padded lays
    weights out in, in Python."""
    return taps_channels(target_vector_floats())


def transpose_padded(weight: np.ndarray) -> np.ndarray:
    """A linear weight (O, K) as linear_packed takes it: panels of transposed_pad() features, each
    (K, transposed_pad()) contiguous (wt[P, p, i] = weight[P * pad + i, p]), the last one padded with
    zero features. A call of the microkernel (rows_width() features, or part of them) lies inside one
    panel, so the kernel reads its weights as one contiguous stream."""
    pad = transposed_pad_floats()
    o_n, k = weight.shape
    panels = -(-o_n // pad)
    padded = np.zeros((panels * pad, k), np.float32)
    padded[:o_n] = weight
    return padded.reshape(panels, pad, k).transpose(0, 2, 1).copy()


@numba.njit(**SEQ)
def _linear_task(t, n_o, mb, ob, m_n, o_n, k, xf, wf, of, bias, rf,
                 act, alpha, beta, post, post_alpha, post_beta):
    m0, o0 = (t // n_o) * mb, (t % n_o) * ob
    m1, o1 = min(m_n, m0 + mb), min(o_n, o0 + ob)
    width = o1 - o0
    gemm_blocks(m1 - m0, width, k, xf, m0 * k, k, wf, o0 * k, k, True, of, m0 * o_n + o0, o_n, False)
    for r in range(m0, m1):
        d = r * o_n + o0
        if bias is not None:
            for i in range(width):
                of[u(d + i)] += bias[u(o0 + i)]
        epilogue_run(of, d, width, of, d, 0.0, rf, act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**DOT)
def _dot(xf, x0, wf, w0, k):
    """sum_i xf[x0 + i] * wf[w0 + i], vectorised (the sum's order is the vector lanes')."""
    acc = xf[x0] * wf[w0] * 0
    for i in range(k):
        acc += xf[u(x0 + i)] * wf[u(w0 + i)]
    return acc


@numba.njit(**DOT)
def _dot8(xf, x0, wf, w0, k):
    """The dot products of x's row at x0 with the eight weight rows from w0 (k apart), in one loop:
    eight streams of the weight at once, and each x element loaded once for eight features. One row
    at a time, a batch-1 classifier read its weight at about 18 GB/s, too few streams in flight for
    the memory's rate: AlexNet's 4096 x 9216 layer 8.4 -> 3.0 ms with its weight in cache, 9.2 -> 6.0
    ms from memory (four rows at a time: 5.5 and 6.4 ms) (2 threads, AVX-512 Xeon)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = xf[x0] * wf[w0] * 0
    for i in range(k):
        v = xf[u(x0 + i)]
        a0 += v * wf[u(w0 + i)]
        a1 += v * wf[u(w0 + k + i)]
        a2 += v * wf[u(w0 + 2 * k + i)]
        a3 += v * wf[u(w0 + 3 * k + i)]
        a4 += v * wf[u(w0 + 4 * k + i)]
        a5 += v * wf[u(w0 + 5 * k + i)]
        a6 += v * wf[u(w0 + 6 * k + i)]
        a7 += v * wf[u(w0 + 7 * k + i)]
    return a0, a1, a2, a3, a4, a5, a6, a7


@numba.njit(**SEQ)
def _gemv_task(t, ob, m_n, o_n, k, xf, wf, of, bias, rf, act, alpha, beta, post, post_alpha, post_beta):
    o0 = t * ob
    o1 = min(o_n, o0 + ob)
    for r in range(m_n):
        d = r * o_n
        o = o0
        while o + 8 <= o1:  # features eight at a time (_dot8), then one at a time
            v0, v1, v2, v3, v4, v5, v6, v7 = _dot8(xf, r * k, wf, o * k, k)
            of[u(d + o)], of[u(d + o + 1)], of[u(d + o + 2)], of[u(d + o + 3)] = v0, v1, v2, v3
            of[u(d + o + 4)], of[u(d + o + 5)], of[u(d + o + 6)], of[u(d + o + 7)] = v4, v5, v6, v7
            o += 8
        for q in range(o, o1):
            of[u(d + q)] = _dot(xf, r * k, wf, q * k, k)
        if bias is not None:
            for q in range(o0, o1):
                of[u(d + q)] += bias[q]
        epilogue_run(of, d + o0, o1 - o0, of, d + o0, 0.0, rf, act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**SEQ)
def linear(x, weight, bias, residual, out, act, alpha, beta, post, post_alpha, post_beta):
    """out (M, O) = epilogue(x (M, K) @ weight (O, K).T + bias): blocks of rows times blocks of
    output features, each multiplied into its block of out and finished there; the features
    are split only when rows are too few. A product of GEMV_MAX_ROWS rows or fewer (a
    classifier at batch 1) is a dot product per output feature instead, in blocks of
    features: it streams the weight once, where BLAS would pack it first."""
    m_n, o_n = out.shape
    k = x.shape[1]
    if m_n <= GEMV_MAX_ROWS:
        xf, wf, of = x.reshape(-1), weight.reshape(-1), out.reshape(-1)
        rf = residual_run(residual, out)
        n_o, ob = blocks(1, o_n, 4 * MIN_ROWS)
        run_tasks(_gemv_task, n_o, (ob, m_n, o_n, k, xf, wf, of, bias, rf, act, alpha, beta, post, post_alpha,
                                    post_beta), m_n * o_n * k < PARALLEL_MIN_MACS)
        return
    n_m, mb = blocks(1, m_n, MIN_ROWS)
    n_o, ob = blocks(n_m, o_n, MIN_ROWS) if n_m == 1 else (1, o_n)
    xf, wf, of = x.reshape(-1), weight.reshape(-1), out.reshape(-1)
    rf = residual_run(residual, out)
    run_tasks(_linear_task, n_m * n_o, (n_o, mb, ob, m_n, o_n, k, xf, wf, of, bias, rf, act, alpha, beta, post,
                                        post_alpha, post_beta), m_n * o_n * k < PARALLEL_MIN_MACS)


@numba.njit(**SEQ)
def linear_packed(x, wt, bias, residual, out, act, alpha, beta, post, post_alpha, post_beta):
    """out (M, O) = epilogue(x (M, K) @ W.T + bias) for float32, wt = transpose_padded(W) made at
    compile time: on our microkernel (micro_gemm_a_rows), MR rows of x read where they lie times
    panels of wt's features, in tasks of (up to PACKED_ROWS rows, a block of panels) that share out
    evenly over the threads. OpenBLAS, called per block, packed the whole weight on every call
    (9 MB for ConvNeXt's 3072 x 768 layers); here it was laid out once, when the model compiled."""
    m_n, o_n = out.shape
    # blocks of features in units of two vectors (micro_gemm's panel): in units of rows_width() a layer of few
    # rows and 64 features would run in one task
    nr = panel_width()
    m_tiles = -(-m_n // PACKED_ROWS)
    # tiles of equal whole groups of MR rows: 128 rows in tiles of 96 and 32 kept one of two threads
    # idle most of the time (128 x 64 -> 64 features: 8.0 us on two threads, 7.4 on one)
    per_tile = -(-m_n // m_tiles)
    tile = -(-per_tile // MR) * MR
    m_tiles = -(-m_n // tile)
    serial = m_n * o_n * x.shape[1] < PARALLEL_MIN_MACS
    # blocks of cpt panels of features: in the calling thread one block, every feature (blocks cut for
    # threads that never run made 16 x 64 -> 64 features 1.6 -> 2.4 us)
    n_c, cpt = (1, -(-o_n // nr)) if serial else blocks(m_tiles, -(-o_n // nr), 1)
    rf = residual_run(residual, out)
    acts, params = (act, post), (alpha, beta, post_alpha, post_beta)
    run_tasks(_linear_packed_task, m_tiles * n_c, (n_c, cpt, tile, x, wt, bias, rf, out, acts, params), serial)


@numba.njit(**SEQ)
def _linear_packed_task(t, n_c, cpt, tile, x, wt, bias, rf, out, acts, params):
    """Task t of linear_packed: rows [m0, m1) (a tile) times features [c0, c1), into a block of its own,
    then bias and epilogue on the way to out. A last group of fewer than MR rows is copied into
    zero-padded rows first (the microkernel always reads MR)."""
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    m_n, o_n = out.shape
    k = x.shape[1]
    nr = panel_width()
    m0, c0 = t // n_c * tile, t % n_c * cpt * nr
    m1, c1 = min(m_n, m0 + tile), min(o_n, c0 + cpt * nr)
    width = half_panels(c1 - c0)  # the block's columns: whole vectors
    groups = -(-(m1 - m0) // MR)
    xf, wf, of = x.reshape(-1), wt.reshape(-1), out.reshape(-1)
    partial = (m1 - m0) % MR != 0
    last = aligned_zeros(MR * k if partial else 0, np.float32)  # the last group's rows, zero-padded to MR
    if partial:
        full = m0 + (groups - 1) * MR
        for i in range((m1 - full) * k):
            last[i] = xf[u(full * k + i)]
    acc = aligned_empty(groups * MR * width, np.float32)
    gemm_row_groups(xf, m0 * k, k, 1, groups, last, k, 1, wf, k, c0, width, acc, width)
    if bias is not None:
        for r in range(m1 - m0):
            s = r * width
            for i in range(c1 - c0):
                acc[u(s + i)] += bias[u(c0 + i)]
    if width == o_n:  # the block's rows are the output's, end to end: one epilogue over them (2048 rows of 32
        # features, a Swin block's projection, one call a row: 74 -> 43 us), a GELU's or SiLU's in one pass from
        # the block (ConvNeXt-T's 3136 x 96 -> 384 + GELU 0.92 of a copy and a pass in place, 784 x 192 -> 768 0.96)
        f32 = np.float32
        if not (rf.size == 0 and post == 0 and act > ONE_PASS and activate_copy_run(
                of, m0 * o_n, (m1 - m0) * o_n, acc, 0, f32(0.0), act, f32(alpha), f32(beta))):
            epilogue_run(of, m0 * o_n, (m1 - m0) * o_n, acc, 0, 0.0, rf, act, alpha, beta, post, post_alpha,
                         post_beta)
        return
    for r in range(m1 - m0):
        epilogue_run(of, (m0 + r) * o_n + c0, c1 - c0, acc, r * width, 0.0, rf, act, alpha, beta, post, post_alpha,
                     post_beta)


@numba.njit(**SEQ)
def next_weights(kb, c, c0, last, k, cols):
    """(start, count): the weights (transpose_padded's, flat) gemm_row_groups reads after the block of
    chunk kb and the `cols` features at c: the chunk's next columns, or when they are the task's last
    (`last`) the next chunk's first, at feature c0; count 0 after the last chunk."""
    nk, nc = (kb + PACKED_K_CHUNK, c0) if last else (kb, c + cols)
    pad = transposed_pad()
    start = (nc // pad * k + nk) * pad + nc % pad
    return start, min(PACKED_K_CHUNK, k - nk) * pad if nk < k else 0


@numba.njit(inline="always", **SEQ)
def row_block_columns(c, j, width):
    """The columns of gemm_row_groups' call at feature c, column j of `width` (c and width whole
    numbers of vectors): rows_width(), else its half, else one vector, the most that stay in the
    row and in c's panel of transpose_padded (the call reads one panel's rows)."""
    nr, room = rows_width(), transposed_pad() - c % transposed_pad()
    cols = min(width - j, room)
    return nr if cols >= nr else nr // 2 if cols >= nr // 2 else vector_floats()


@numba.njit(**SEQ)
def gemm_row_groups(a, a0, lda, lds, groups, last, last_lda, last_lds, wf, k, c0, width, acc, ldc):
    """acc[r * ldc + j] = sum_p A[r, p] * W[c0 + j, p] for r < groups * MR, j < width (a whole
    number of vectors), wf = transpose_padded(W) flattened: A's row r, reduction step p at
    a[a0 + r*lda + p*lds], except the last group's when `last` is not empty: its MR rows at
    last[i*last_lda + p*last_lds] (copied, zero-padded: the microkernel always reads MR rows).
    Rows of a linear layer (lda = K, lds = 1) or pixels of a 1x1 conv (lda = 1, lds = H*W), in
    reduction chunks whose weight panel (PACKED_K_CHUNK x rows_width()) stays in L1 across the row
    groups."""
    for kb in range(0, k, PACKED_K_CHUNK):
        kc = min(PACKED_K_CHUNK, k - kb)
        j = 0
        while j < width:
            cols = row_block_columns(c0 + j, j, width)
            c = c0 + j
            b0 = (c // transposed_pad() * k + kb) * transposed_pad() + c % transposed_pad()
            nb, count = next_weights(kb, c, c0, j + cols >= width, k, cols)
            share = -(-count // groups) if groups >= PREFETCH_MIN_GROUPS else 0
            for g in range(groups):
                if share > 0:  # a share of the next block's weights before each group
                    prefetch_run(wf, nb + g * share, share)
                if last.size != 0 and g == groups - 1:
                    src, s0, l_row, l_step = last, kb * last_lds, last_lda, last_lds
                else:
                    src, s0, l_row, l_step = a, a0 + g * MR * lda + kb * lds, lda, lds
                a_rows_block(cols, kc, src, s0, l_row, l_step, wf, b0, acc, g * MR * ldc + j, ldc, kb > 0)
            j += cols


@numba.njit(inline="always", **SEQ)
def a_rows_block(cols, kc, a, a0, lda, lds, wf, b0, c, c0, ldc, accumulate):
    """The micro_gemm_a_rows kernel of `cols` columns (row_block_columns'), on transpose_padded's rows."""
    nr = rows_width()
    if cols == nr:
        micro_gemm_a_rows(kc, a, a0, lda, lds, wf, b0, transposed_pad(), c, c0, ldc, accumulate)
    elif cols == nr // 2:
        micro_gemm_a_rows_half(kc, a, a0, lda, lds, wf, b0, transposed_pad(), c, c0, ldc, accumulate)
    else:
        micro_gemm_a_rows_vector(kc, a, a0, lda, lds, wf, b0, transposed_pad(), c, c0, ldc, accumulate)


@numba.njit(**SEQ)
def matmul(a, b, out, batch, a_step, b_step):
    """out[i] = a[ia] @ b[ib] over the flat batch index i of out (B, M, N), in blocks of rows.

    batch: out's batch dims (padded with leading 1s); a_step/b_step: each operand's
    stride per batch dim, in matrices (0 where it broadcasts)."""
    m_n = out.shape[1]
    n_m, mb = blocks(out.shape[0], m_n, MIN_ROWS)
    run_tasks(_matmul_task, out.shape[0] * n_m, (n_m, mb, m_n, a, b, out, batch, a_step, b_step),
              out.size * a.shape[2] < PARALLEL_MIN_MACS)


@numba.njit(inline="always", **SEQ)
def _operands(i, batch, a_step, b_step):
    """The matrices of a and of b that make matrix i of out (flat index over the batch dims)."""
    ia, ib, rest = 0, 0, i
    for d in range(len(batch) - 1, -1, -1):
        k = rest % batch[d]
        rest //= batch[d]
        ia += k * a_step[d]
        ib += k * b_step[d]
    return ia, ib


@numba.njit(**SEQ)
def _matmul_task(t, n_m, mb, m_n, a, b, out, batch, a_step, b_step):
    i, m0 = t // n_m, (t % n_m) * mb
    m1 = min(m_n, m0 + mb)
    ia, ib = _operands(i, batch, a_step, b_step)
    gemm(a[ia, m0:m1], b[ib], out[i, m0:m1])


@numba.njit(**SEQ)
def matmul_small(a, b, out, batch, a_step, b_step):
    """matmul of float32 matrices small enough (SMALL_MATMUL_MACS) that a BLAS call's fixed cost would
    dwarf each product: on the microkernel (gemm_row_groups, as linear_packed), each matrix's b laid out
    in panels in this thread's scratch, the product there, then copied out.
    Tasks: runs of matrices, shared out evenly (below PARALLEL_MIN_MACS, one in the calling thread)."""
    count, m, k, n = out.shape[0], out.shape[1], a.shape[2], out.shape[2]
    if a.shape[1] != m or b.shape[1] != k or b.shape[2] != n:
        raise ValueError("matmul_small: operands of mismatched shapes")
    if out.size == 0 or k == 0:
        out[:] = 0
        return
    serial = out.size * k < PARALLEL_MIN_MACS
    tasks = 1 if serial else min(count, 4 * num_threads())
    per = -(-count // tasks)
    tasks = -(-count // per)
    n_w, n_l, n_c = _small_scratch(m, k, n)
    scratch = aligned_empty((1 if serial else min(num_threads(), tasks)) * (n_w + n_l + n_c), np.float32)
    data = (per, a.reshape(-1), b.reshape(-1), out.reshape(-1), (count, m, k, n), batch, a_step, b_step, scratch)
    run_tasks(_matmul_small_task, tasks, data, serial)


@numba.njit(inline="always", **SEQ)
def _small_scratch(m, k, n):
    """matmul_small's scratch for one thread, in floats: (b's panels, a's last partial group, the product)."""
    groups = -(-m // MR)
    return (line_floats(-(-n // transposed_pad()) * transposed_pad() * k), line_floats(MR * k if m % MR else 0),
            line_floats(groups * MR * half_panels(n)))


@numba.njit(**SEQ)
def _matmul_small_task(t, per, af, bf, of, dims, batch, a_step, b_step, scratch):
    """Task t of matmul_small: matrices [t * per, (t + 1) * per) of out. Each b into transpose_padded's
    panels, a's rows read where they lie but for a last partial group of MR (copied, zero-padded), the
    product by gemm_row_groups into scratch and copied out. The padding of b's panels and of a's last
    group is zeroed once: every matrix writes the same places of them."""
    count, m, k, n = dims
    n_w, n_l, n_c = _small_scratch(m, k, n)
    tid = thread_id()
    own = (tid if tid < scratch.size // (n_w + n_l + n_c) else 0) * (n_w + n_l + n_c)
    wp = scratch[own:own + n_w]
    last = scratch[own + n_w:own + n_w + n_l]
    acc = scratch[own + n_w + n_l:own + n_w + n_l + n_c]
    wp[:] = 0
    last[:] = 0
    groups, width = -(-m // MR), half_panels(n)
    full = m // MR * MR  # rows of the whole groups
    laid = -1  # the b in the panels (a broadcast b is laid out once)
    for i in range(t * per, min(count, (t + 1) * per)):
        ia, ib = _operands(i, batch, a_step, b_step)
        if ib != laid:
            pad = transposed_pad()
            for q in range(0, n, pad):
                for p in range(k):
                    copy_run(wp, q * k + p * pad, bf, (ib * k + p) * n + q, min(pad, n - q))
            laid = ib
        for r in range(full, m):
            copy_run(last, (r - full) * k, af, (ia * m + r) * k, k)
        gemm_row_groups(af, ia * m * k, k, 1, groups, last, k, 1, wp, k, 0, width, acc, width)
        for r in range(m):
            copy_run(of, (i * m + r) * n, acc, r * width, n)


@numba.njit(**SEQ)
def matmul_loops(a, b, out, batch, a_step, b_step):
    """matmul for dtypes OpenBLAS does not take (integers, mixed): a plain loop per row."""
    run_tasks(_matmul_row, out.shape[0] * out.shape[1], (a, b, out, batch, a_step, b_step))


@numba.njit(**SEQ)
def _matmul_row(t, a, b, out, batch, a_step, b_step):
    m_n, n_n = out.shape[1], out.shape[2]
    i, m = t // m_n, t % m_n
    ia, ib = _operands(i, batch, a_step, b_step)
    row = out[i, m]
    row[:] = 0
    for k in range(a.shape[2]):
        av = a[ia, m, k]
        for j in range(n_n):
            row[j] += av * b[ib, k, j]
