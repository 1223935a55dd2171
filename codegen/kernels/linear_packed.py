"""Linear layers on our own microkernel (microkernel.py), for float32 layers whose weights are
known at compile time: out (M, O) = epilogue(x (M, K) @ W.T + bias).

The weight is stored transposed, (K, O) with O zero-padded to whole panels of columns
(`pack_columns`, once, when the model is compiled), so each reduction step of the
microkernel reads one contiguous run of NR output features; the rows of x are the
microkernel's MR broadcast rows, packed per call (x is read once per task, the weight
once per block of rows). Where OpenBLAS, called on blocks of the product, packs the whole
weight again on every call, this packs only the activations: ConvNeXt's pointwise
layers, a transformer's projections and an MLP's layers at batch > 2.

Each task of one parallel loop takes a block of rows (whole panels of MR, an accumulator
block of about BLOCK_BYTES) times a block of column panels (split only when the rows are
too few to keep every thread busy):
  1. its accumulator block starts as the bias, row by row;
  2. per reduction chunk: the block's rows are packed (MR rows side by side per step),
     then for each column panel the microkernel runs over the row panels, the weight
     panel staying in L1 while the packed rows stay in L2;
  3. the epilogue (activation, residual) runs from the block into the output, row by row.
Products of GEMV rows or fewer stay dot products (gemm.py's linear).
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import SEQ, blocks, u
from codegen.kernels.epilogue import epilogue_run, residual_run
from codegen.kernels.microkernel import MR, micro_gemm, panel_width
from codegen.kernels.tasks import run_tasks

COLUMN_ALIGN = 32  # output features padded to a multiple of this: whole panels for AVX2 (16) and AVX-512 (32)
K_CHUNK = 256  # reduction steps per microkernel call: a weight panel chunk (16-32 KB) stays in L1
BLOCK_BYTES = 1 << 17  # a task's accumulator block, about: it and the packed rows stay in L2
PARALLEL_MIN_MACS = 1 << 17  # below this many multiply-adds the tasks run in the calling thread


def pack_columns(weight: np.ndarray) -> np.ndarray:
    """A linear weight (O, K) as the microkernel's column operand: W.T, (K, O padded to a multiple
    of COLUMN_ALIGN), the padding zeros."""
    o_n, k = weight.shape
    padded = np.zeros((k, -(-o_n // COLUMN_ALIGN) * COLUMN_ALIGN), np.float32)
    padded[:, :o_n] = weight.T
    return padded


@numba.njit(**SEQ)
def linear_packed(x, wt, bias, residual, out, act, alpha, beta, post, post_alpha, post_beta):
    """out (M, O) = post(act(x (M, K) @ W.T + bias) + residual), wt = pack_columns(W); bias may be
    None, residual None or empty for none."""
    m_n, k = x.shape
    o_n, o_pad = out.shape[1], wt.shape[1]
    nr = panel_width()
    n_panels = -(-m_n // MR)  # row panels
    per_task = max(1, min(n_panels, BLOCK_BYTES // (x.itemsize * MR * o_pad)))
    n_m = -(-n_panels // per_task)
    n_o, ob = blocks(n_m, o_pad // nr, 1)  # column panels per block
    args = (x.reshape(-1), wt.reshape(-1), out.reshape(-1), residual_run(residual, out), bias,
            (m_n, k, o_n, o_pad), (per_task, n_o, ob), (act, post), (alpha, beta, post_alpha, post_beta))
    if m_n * k * o_n < PARALLEL_MIN_MACS:
        for t in range(n_m * n_o):
            _linear_task(t, *args)
    else:
        run_tasks(_linear_task, n_m * n_o, args)


@numba.njit(**SEQ)
def _linear_task(t, xf, wf, of, rf, bias, dims, split, acts, params):
    """Task t of linear_packed: row panels [p0, p1) times columns [j0, j1)."""
    m_n, k, o_n, o_pad = dims
    per_task, n_o, ob = split
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    nr = panel_width()
    mi, oi = t // n_o, t % n_o
    p0 = mi * per_task
    p1 = min(-(-m_n // MR), p0 + per_task)
    j0 = oi * ob * nr
    j1 = min(o_pad, j0 + ob * nr)
    width, rows = j1 - j0, (p1 - p0) * MR
    acc = np.empty(rows * width, xf.dtype)
    real = max(0, min(width, o_n - j0))  # the block's columns that are output features, not padding
    for r in range(rows):  # the block starts as the bias: the microkernel adds the products to it
        for j in range(real):
            acc[u(r * width + j)] = 0 if bias is None else bias[u(j0 + j)]
        for j in range(real, width):
            acc[u(r * width + j)] = 0
    packed = np.empty(rows * K_CHUNK, xf.dtype)  # per reduction step, MR rows side by side, per panel
    for kb in range(0, k, K_CHUNK):
        kc = min(K_CHUNK, k - kb)
        for p in range(p0, p1):
            base = (p - p0) * MR * kc
            for i in range(MR):
                m = p * MR + i
                if m < m_n:
                    for q in range(kc):
                        packed[u(base + q * MR + i)] = xf[u(m * k + kb + q)]
                else:
                    for q in range(kc):
                        packed[u(base + q * MR + i)] = 0
        for j in range(j0, j1, nr):
            for p in range(p0, p1):
                micro_gemm(kc, packed, (p - p0) * MR * kc, wf, kb * o_pad + j, o_pad,
                           acc, (p - p0) * MR * width + j - j0, width, True)
    if real > 0:
        for r in range(min(rows, m_n - p0 * MR)):  # the epilogue, from the block into the output
            d = (p0 * MR + r) * o_n + j0
            epilogue_run(of, d, real, acc, r * width, 0.0, rf, act, alpha, beta, post, post_alpha, post_beta)
