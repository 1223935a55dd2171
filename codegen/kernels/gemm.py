"""Matrix products: linear, fused_linear and matmul (torch semantics).

The products run in single-threaded OpenBLAS (common.gemm), one block of rows (or of
output features) per task of a parallel loop. A product too small to repay waking the
other threads (PARALLEL_MIN_MACS) runs its tasks in the calling thread. Integer or
mixed-dtype matmuls fall back to a plain loop.
"""

from __future__ import annotations

import math

import numba
from numba import prange

from codegen.kernels.common import PAR, SEQ, blocks, gemm, gemm_blocks, u
from codegen.kernels.epilogue import ACTIVATION_CODES, epilogue_run
from codegen.registry import Emit, const_args, emits, lit

MIN_ROWS = 8  # rows (or output features) per block of a split product, at least
# below this many multiply-adds (a few microseconds on one core) a product runs in the calling
# thread: waking the others for a parallel loop costs more (an MLP's layers, a transformer's heads)
PARALLEL_MIN_MACS = 1 << 17


@numba.njit(inline="always", **SEQ)
def _linear_task(t, n_o, mb, ob, m_n, o_n, k, xf, wf, of, bias, residual, rf,
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
        if residual is None:
            epilogue_run(of, d, width, None, 0, 0.0, None, act, alpha, beta, post, post_alpha, post_beta)
        else:
            epilogue_run(of, d, width, None, 0, 0.0, rf, act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**PAR)
def linear(x, weight, bias, residual, out, act, alpha, beta, post, post_alpha, post_beta):
    """out (M, O) = epilogue(x (M, K) @ weight (O, K).T + bias): blocks of rows times blocks of
    output features, each multiplied into its block of out and finished there; the features
    are split only when rows are too few."""
    m_n, o_n = out.shape
    k = x.shape[1]
    n_m, mb = blocks(1, m_n, MIN_ROWS)
    n_o, ob = blocks(n_m, o_n, MIN_ROWS) if n_m == 1 else (1, o_n)
    xf, wf, of = x.reshape(-1), weight.reshape(-1), out.reshape(-1)
    rf = of if residual is None else residual.reshape(-1)
    if m_n * o_n * k < PARALLEL_MIN_MACS:
        for t in range(n_m * n_o):
            _linear_task(t, n_o, mb, ob, m_n, o_n, k, xf, wf, of, bias, residual, rf,
                         act, alpha, beta, post, post_alpha, post_beta)
    else:
        for t in prange(n_m * n_o):
            _linear_task(t, n_o, mb, ob, m_n, o_n, k, xf, wf, of, bias, residual, rf,
                         act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**PAR)
def matmul(a, b, out, batch, a_step, b_step):
    """out[i] = a[ia] @ b[ib] over the flat batch index i of out (B, M, N), in blocks of rows.

    batch: out's batch dims (padded with leading 1s); a_step/b_step: each operand's
    stride per batch dim, in matrices (0 where it broadcasts)."""
    m_n = out.shape[1]
    n_m, mb = blocks(out.shape[0], m_n, MIN_ROWS)
    if out.size * a.shape[2] < PARALLEL_MIN_MACS:
        for t in range(out.shape[0] * n_m):
            _matmul_task(t, n_m, mb, m_n, a, b, out, batch, a_step, b_step)
    else:
        for t in prange(out.shape[0] * n_m):
            _matmul_task(t, n_m, mb, m_n, a, b, out, batch, a_step, b_step)


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


@numba.njit(inline="always", **SEQ)
def _matmul_task(t, n_m, mb, m_n, a, b, out, batch, a_step, b_step):
    i, m0 = t // n_m, (t % n_m) * mb
    m1 = min(m_n, m0 + mb)
    ia, ib = _operands(i, batch, a_step, b_step)
    gemm(a[ia, m0:m1], b[ib], out[i, m0:m1])


@numba.njit(**PAR)
def matmul_loops(a, b, out, batch, a_step, b_step):
    """matmul for dtypes OpenBLAS does not take (integers, mixed): a plain loop."""
    m_n, n_n = out.shape[1], out.shape[2]
    for t in prange(out.shape[0] * m_n):
        i, m = t // m_n, t % m_n
        ia, ib = _operands(i, batch, a_step, b_step)
        row = out[i, m]
        row[:] = 0
        for k in range(a.shape[2]):
            av = a[ia, m, k]
            for j in range(n_n):
                row[j] += av * b[ib, k, j]


# -- emit rules ------------------------------------------------------------------------------

def epilogue_args(attrs: dict) -> str:
    """The activation arguments of an epilogue kernel call, from fused op attributes."""
    return const_args(ACTIVATION_CODES[attrs["activation"]], float(attrs["alpha"]), float(attrs["beta"]),
                      ACTIVATION_CODES[attrs["post_activation"]], float(attrs["post_alpha"]),
                      float(attrs["post_beta"]))


NO_EPILOGUE = const_args(0, 0.0, 0.0, 0, 0.0, 0.0)
BATCH_DIMS = 6  # matmul broadcasts over at most this many (merged) batch dims


@emits("linear", "fused_linear")
def _emit_linear(e: Emit) -> list[str]:
    x, w = e.node.inputs[0].type, e.node.inputs[1].type
    rows = (math.prod(x.shape[:-1]), x.shape[-1])
    out_rows = (rows[0], w.shape[0])
    bias = e.args[2] if len(e.args) > 2 else "None"
    residual = f"{e.args[3]}.reshape({lit(out_rows)})" if len(e.args) > 3 else "None"
    act = epilogue_args(e.node.attrs) if e.node.op == "fused_linear" else NO_EPILOGUE
    return [f"{e.call(linear)}({e.args[0]}.reshape({lit(rows)}), {e.args[1]}, {bias}, {residual}, "
            f"{e.outs[0]}.reshape({lit(out_rows)}), {act})"]


def _batch_plan(a_batch: tuple, b_batch: tuple, batch: tuple) -> tuple[tuple, tuple, tuple]:
    """(batch dims, a steps, b steps), each of length BATCH_DIMS, for matmul's broadcast loop."""
    a_batch = (1,) * (len(batch) - len(a_batch)) + a_batch
    b_batch = (1,) * (len(batch) - len(b_batch)) + b_batch
    dims: list[list[int]] = []  # [size, a broadcasts, b broadcasts]; merge neighbours alike
    for n, an, bn in zip(batch, a_batch, b_batch):
        if n == 1:
            continue
        kind = [n, an == 1, bn == 1]
        if dims and dims[-1][1:] == kind[1:]:
            dims[-1][0] *= n
        else:
            dims.append(kind)
    if len(dims) > BATCH_DIMS:
        raise NotImplementedError(f"matmul broadcast over {len(dims)} batch dims (at most {BATCH_DIMS})")
    dims = [[1, True, True]] * (BATCH_DIMS - len(dims)) + dims
    a_step, b_step, sa, sb = [0] * BATCH_DIMS, [0] * BATCH_DIMS, 1, 1
    for d in range(BATCH_DIMS - 1, -1, -1):
        n, a_bc, b_bc = dims[d]
        a_step[d], b_step[d] = (0 if a_bc else sa), (0 if b_bc else sb)
        sa, sb = sa * (1 if a_bc else n), sb * (1 if b_bc else n)
    return tuple(d[0] for d in dims), tuple(a_step), tuple(b_step)


@emits("matmul")
def _emit_matmul(e: Emit) -> list[str]:
    a, b = (v.type for v in e.node.inputs)
    out = e.node.outputs[0].type
    a_shape = a.shape if a.rank > 1 else (1,) + a.shape
    b_shape = b.shape if b.rank > 1 else b.shape + (1,)
    (m, k), n = a_shape[-2:], b_shape[-1]
    batch = out.shape[:len(out.shape) - (a.rank > 1) - (b.rank > 1)]
    blas = a.dtype == b.dtype == out.dtype and a.dtype in ("float32", "float64")
    a_n, b_n, out_n = math.prod(a_shape[:-2]), math.prod(b_shape[:-2]), math.prod(batch)
    if b_n == 1 and a_shape[:-2] == batch:  # x @ W: one product over all rows of x
        a_n, m, out_n = 1, out_n * m, 1
        dims, a_step, b_step = (1,) * BATCH_DIMS, (0,) * BATCH_DIMS, (0,) * BATCH_DIMS
    else:
        dims, a_step, b_step = _batch_plan(a_shape[:-2], b_shape[:-2], batch)
    kernel = matmul if blas else matmul_loops
    return [f"{e.call(kernel)}({e.args[0]}.reshape({lit((a_n, m, k))}), {e.args[1]}.reshape({lit((b_n, k, n))}), "
            f"{e.outs[0]}.reshape({lit((out_n, m, n))}), {const_args(dims, a_step, b_step)})"]
