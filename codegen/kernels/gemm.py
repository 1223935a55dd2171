"""Matrix products: linear, fused_linear and matmul (torch semantics), and the epilogue
pass that conv and linear kernels run over a GEMM's result.

The products run in OpenBLAS (np.dot inside @njit calls scipy's sgemm, which uses its
own threads); np.dot is called at the top level of a kernel, never inside prange.
Integer or mixed-dtype matmuls fall back to a plain loop.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from codegen.kernels.epilogue import ACTIVATION_CODES, activate
from codegen.registry import Emit, emits, lit

_PAR = {"cache": True, "nogil": True, "parallel": True, "error_model": "numpy"}
_SEQ = {"cache": True, "nogil": True, "error_model": "numpy"}


@numba.njit(**_SEQ)
def epilogue_row(row, bias, res, act, alpha, beta, post, post_alpha, post_beta):
    """In place over the 1-D row: v = post(act(v + bias) + res); res is None or a row."""
    a, b = np.float32(alpha), np.float32(beta)
    pa, pb = np.float32(post_alpha), np.float32(post_beta)
    bv = np.float32(bias)
    if act <= 1 and post <= 1:  # none/relu: a loop LLVM vectorises
        lo = np.float32(-np.inf if act == 0 else 0.0)
        top = np.float32(0.0 if post == 1 else -np.inf)
        if res is None:
            for i in range(row.shape[0]):
                row[i] = max(max(row[i] + bv, lo), top)
        else:
            for i in range(row.shape[0]):
                row[i] = max(max(row[i] + bv, lo) + res[i], top)
    elif res is None:
        for i in range(row.shape[0]):
            row[i] = activate(activate(row[i] + bv, act, a, b), post, pa, pb)
    else:
        for i in range(row.shape[0]):
            row[i] = activate(activate(row[i] + bv, act, a, b) + res[i], post, pa, pb)


@numba.njit(**_PAR)
def epilogue(y, bias, residual, bias_per_row, act, alpha, beta, post, post_alpha, post_beta):
    """In place over y (R, L): v = post(act(v + bias) + residual).

    bias: None or 1-D, indexed by row (r % len) if bias_per_row, else by column;
    residual: None or an array of y's shape."""
    for r in prange(y.shape[0]):
        row = y[r]
        bv = 0.0
        if bias is not None:
            if bias_per_row:
                bv = bias[r % bias.shape[0]]
            else:
                row += bias
        if residual is None:
            epilogue_row(row, bv, None, act, alpha, beta, post, post_alpha, post_beta)
        else:
            epilogue_row(row, bv, residual[r], act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**_SEQ)
def linear(x, weight, bias, residual, out, act, alpha, beta, post, post_alpha, post_beta):
    """out (M, O) = epilogue(x (M, K) @ weight (O, K).T + bias)."""
    np.dot(x, weight.T, out)
    if bias is not None or residual is not None or act != 0 or post != 0:
        epilogue(out, bias, residual, False, act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**_SEQ)
def matmul(a, b, out, batch, a_step, b_step):
    """out[i] = a[ia] @ b[ib] over the flat batch index i of out (B, M, N).

    batch: out's batch dims (padded with leading 1s); a_step/b_step: each operand's
    stride per batch dim, in matrices (0 where it broadcasts)."""
    for i in range(out.shape[0]):
        ia, ib, rest = 0, 0, i
        for d in range(len(batch) - 1, -1, -1):
            k = rest % batch[d]
            rest //= batch[d]
            ia += k * a_step[d]
            ib += k * b_step[d]
        np.dot(a[ia], b[ib], out[i])


@numba.njit(**_PAR)
def matmul_loops(a, b, out, batch, a_step, b_step):
    """matmul for dtypes OpenBLAS does not take (integers, mixed): a plain loop."""
    m_n, n_n = out.shape[1], out.shape[2]
    for t in prange(out.shape[0] * m_n):
        i, m = t // m_n, t % m_n
        ia, ib, rest = 0, 0, i
        for d in range(len(batch) - 1, -1, -1):
            k = rest % batch[d]
            rest //= batch[d]
            ia += k * a_step[d]
            ib += k * b_step[d]
        row = out[i, m]
        row[:] = 0
        for k in range(a.shape[2]):
            av = a[ia, m, k]
            for j in range(n_n):
                row[j] += av * b[ib, k, j]


# -- emit rules ------------------------------------------------------------------------------

def epilogue_args(attrs: dict) -> str:
    """The activation arguments of an epilogue kernel call, from fused op attributes."""
    return ", ".join([lit(ACTIVATION_CODES[attrs["activation"]]), lit(float(attrs["alpha"])),
                      lit(float(attrs["beta"])), lit(ACTIVATION_CODES[attrs["post_activation"]]),
                      lit(float(attrs["post_alpha"])), lit(float(attrs["post_beta"]))])


NO_EPILOGUE = "0, 0.0, 0.0, 0, 0.0, 0.0"
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
            f"{e.outs[0]}.reshape({lit((out_n, m, n))}), {lit(dims)}, {lit(a_step)}, {lit(b_step)})"]
